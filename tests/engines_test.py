"""One descriptor per rollout engine (`config/engines.py`): no other module tests an engine's
name, and every descriptor points at what exists (its module and class, its config section)."""

import ast
import dataclasses
import importlib.util
import pathlib

import pytest

from prorl_jax import config as config_lib
from prorl_jax.config import engines
from prorl_jax.rollout.engines import make_engine

ROOT = pathlib.Path(__file__).resolve().parent.parent / "prorl_jax"


def _name_tests(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
  """Comparisons of an engine name in a module: `x == "vllm"`, `"inline" != x`, `x in ("jax",
  ...)`, as the AST reads them (a relative or aliased name is a name)."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if not isinstance(node, ast.Compare):
      continue
    sides = [node.left, *node.comparators]
    consts = [c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)]
    names = [n.id if isinstance(n, ast.Name) else n.attr for s in sides for n in ast.walk(s)
             if isinstance(n, (ast.Name, ast.Attribute))]  # fmt: skip
    about_engines = any("engine" in n or n in ("module", "name") for n in names)
    if (
      any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
      and any(v in engines.NAMES for v in consts if isinstance(v, str))
      and about_engines
    ):
      found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
  return found


def test_no_module_but_the_descriptors_tests_an_engine_name():
  allowed = {ROOT / "config" / "engines.py"}
  # `module == "jax"` where jax is a Python module, not the engine: none left either
  found = [f for p in sorted(ROOT.rglob("*.py")) if p not in allowed for f in _name_tests(p)]
  assert found == [], found


def test_the_checker_sees_every_form_of_a_name_test(tmp_path):
  src = (
    'a = engine == "vllm"\nb = "inline" != cfg.rollout.engine\nc = engine in ("jax", "x")\n'
    'd = engine == "other"\ne = token.type == "inline"\nf = module == "jax"\n'
  )
  (tmp_path / "m.py").write_text(src)
  got = [f.rsplit(":", 1)[1] for f in _name_tests(tmp_path / "m.py", root=tmp_path)]
  assert got == ["1", "2", "3", "6"]


@pytest.mark.parametrize("name", engines.NAMES)
def test_every_descriptor_points_at_what_exists(name):
  s = engines.spec(name)
  cfg = config_lib.base_config()
  assert s.options_section in cfg, s.options_section
  assert s.worker_engine in engines.WORKER_ENGINES
  if s.in_trainer:
    with pytest.raises(ValueError, match="runs inside the trainer"):
      make_engine(name)
    return
  assert importlib.util.find_spec(s.module) is not None, s.module
  source = pathlib.Path(importlib.util.find_spec(s.module).origin).read_text()
  assert f"class {s.cls}" in source


def test_an_unknown_engine_is_one_line_naming_the_known_ones(capsys):
  from prorl_jax.cli import worker as worker_cli

  assert worker_cli.main(["--exchange=/nonexistent", "--engine=sglang"]) == 2
  assert "--engine=sglang: want one of jax, vllm" in capsys.readouterr().err
  with pytest.raises(ValueError, match="unknown engine 'sglang'; use jax, vllm, inline"):
    engines.spec("sglang")
  with pytest.raises(ValueError, match="unknown engine 'sglang'"):
    make_engine("sglang")


class StubEngine:
  """A new engine, registered by one table row: no other module changes."""

  last_mismatch = None
  inflight_updates = False

  def __init__(self, dtype="float32"):
    self.dtype = dtype


def test_a_new_engine_is_placed_configured_and_built_from_its_row_alone(monkeypatch, tmp_path):
  from prorl_jax.rollout import layout, local
  from prorl_jax.trainer import placement

  row = dataclasses.replace(
    engines.ENGINES["vllm"], name="stub", module=__name__, cls="StubEngine",
    options_section="jax_engine", import_name="jax", own_python=False, worker_engine="stub",
  )  # fmt: skip
  monkeypatch.setitem(engines.ENGINES, "stub", row)
  cfg = config_lib.base_config()
  cfg.rollout.engine = "stub"
  config_lib.validate(cfg)  # configured: a known engine
  assert placement.worker_engine(cfg) == "stub"
  assert placement.engine_options(cfg)["dtype"] == cfg.jax_engine.dtype  # its options section
  got = layout.plan(8, "stub", tensor_parallel=2)  # it places GPUs, as its row says
  assert len(got.workers) == 4 and got.workers[0] == (0, 1)
  assert local.worker_python("stub") == local.sys.executable  # the trainer's Python
  engine = make_engine("stub", {"dtype": "bfloat16"})
  assert isinstance(engine, StubEngine) and engine.dtype == "bfloat16"
  # launched: the worker's and the planner's command lines take it from the table
  from prorl_jax.cli import layout as layout_cli
  from prorl_jax.cli import worker as worker_cli

  argv = [f"--exchange={tmp_path}", "--engine=stub", "--idle_exit_seconds=0.1"]
  assert (
    worker_cli.main(argv + ["--verifier_processes=1", '--engine_options={"dtype": "bfloat16"}'])
    == 0
  )
  assert layout_cli.main(["--gpus=4", "--engine=stub", "--tensor_parallel=2"]) == 0
