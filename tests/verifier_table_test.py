"""Every verifier is one row (`rewards.verifiers.VerifierSpec`): the routing table, the pool's
confinement, the benchmarks' metric and the audit's domain all read the row; a domain's hooks
are one typed value (`data.domains.Domain`), so a misspelled hook fails at once."""

import ast
import importlib
import pathlib
import sys
import types

import pytest

from prorl_jax import rewards
from prorl_jax.data import domains
from prorl_jax.rewards import hooks
from prorl_jax.rewards.verifiers import VERIFIERS, VerifierSpec

ROOT = pathlib.Path(__file__).resolve().parents[1] / "prorl_jax"


def test_the_tables_are_read_from_the_rows():
  assert rewards.DEFAULT_ROUTING == {s: v.name for v in VERIFIERS.values() for s in v.sources}
  assert set(rewards.ISOLATED) == {n for n, v in VERIFIERS.items() if v.isolated}
  assert set(rewards.CONTINUOUS) == {n for n, v in VERIFIERS.items() if v.continuous}
  assert rewards.verifier_names() == sorted(VERIFIERS)
  for name, spec in VERIFIERS.items():
    module = importlib.import_module(f"prorl_jax.rewards.{spec.module}")
    assert rewards.route(name) is module.score
    assert hooks.module_of(name) == spec.module
    domain = domains.hooks(name)
    assert (domain is None) == (spec.domain is None), name
    if domain is not None:
      assert isinstance(domain, domains.Domain)
  # the hand-checked facts the rows state
  assert rewards.verifier_name("gpqa") == "stem" and not rewards.continuous("gpqa")
  assert rewards.continuous("llama_nemotron_if") and "code" not in rewards.ISOLATED


def test_a_misspelled_domain_hook_is_an_error():
  def wrap(t):
    return t

  with pytest.raises(TypeError, match="near_miss"):
    domains.Domain(wrap=wrap, answer_of=wrap, honest=wrap, near_miss=wrap)
  with pytest.raises(TypeError):
    domains.Domain(wrap=wrap, answer_of=wrap)  # a required hook missing


def test_a_misspelled_verifier_hook_is_an_error():
  assert hooks.hook("math", "warm") is not None and hooks.hook("code", "hack_flags") is not None
  assert hooks.hook("chain_sum", "warm") is None  # offered by none: None, as documented
  with pytest.raises(ValueError, match="not a verifier hook"):
    hooks.hook("math", "warmup")


def test_a_domain_module_without_a_typed_domain_is_refused(monkeypatch):
  untyped = types.ModuleType("prorl_jax.data.domains.untyped")
  untyped.DOMAIN = {"wrap": str, "answer_of": str, "honest": dict}
  monkeypatch.setitem(sys.modules, untyped.__name__, untyped)
  monkeypatch.setitem(VERIFIERS, "math", VerifierSpec("math", "math", domain="untyped"))
  with pytest.raises(TypeError, match="not a Domain"):
    domains.hooks("math")


def _names_used(path: pathlib.Path) -> set[tuple[str, str]]:
  """(function, first argument's name) of every getattr/hasattr call in a module."""
  out = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr"):
      first = node.args[0]
      out.add((node.func.id, first.id if isinstance(first, ast.Name) else ast.dump(first)))
  return out


def test_no_hook_is_looked_up_by_name_with_a_silent_default():
  """The audit and the red team read a domain's typed hooks; nothing probes a module by name."""
  readers = [ROOT / "data" / "audit.py", ROOT / "data" / "attacks.py"]
  for path in [*readers, *(ROOT / "data" / "domains").glob("*.py")]:
    assert _names_used(path) == set(), path


def test_the_attacks_do_not_import_the_domains():
  """The domains build their attacks from `data.attacks`; the attacks know no domain."""
  tree = ast.parse((ROOT / "data" / "attacks.py").read_text())
  imported = {
    (node.module or "") + "." + a.name
    for node in ast.walk(tree)
    if isinstance(node, ast.ImportFrom)
    for a in node.names
  }
  assert not any("domains" in name for name in imported), imported
