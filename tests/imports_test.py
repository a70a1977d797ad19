"""Import layering: a module may import only its own or lower layers."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "prorl_jax"

LAYERS = {
  0: [
    "config",
    "rollout.layout",
    "cli",
    "dist",
    "sharding",
    "algo",
    "demo",
    "demo.chain_sum",
    "metrics",
    "records",
    "rewards",
    "model.presets",
    "tokenizer",
    "__init__",
  ],
  1: [
    "packing",
    "dynamic_sampling",
    "loop_state",
    "preemption",
    "preflight",
    "model.qwen2",
    "model.hf_weights",
    "model",
    "data",
    "checkpoint",
    "rollout",
    "rollout.store",
    "rollout.entries",
    "rollout.weights",
    "rollout.results",
    "rollout.queue",
    "rollout.exchange",
  ],
  2: [
    "train_step",
    "rollout.jax_sampler",
    "rollout.worker",
    "rollout.vllm_engine",
    "rollout.local",
    "rollout.probe",
    "demo.tiny_base",
    "demo.warm_start",
  ],
  3: [
    "eval",
    "scoring",
    "evalsuite",
    "plot",
    "export",
    "prepare",
    "suite",
    "sources",
    "run_record",
    "hub",
    "rewards.audit",
    "solution_answers",
    "mix",
  ],
  4: ["setup", "train", "rl_step", "step"],
  5: ["main", "config.__main__"],
}
# These run in worker processes and in vLLM's own environment, which has no jax.
NO_JAX = (
  "rewards",
  "records",
  "demo.chain_sum",
  "rollout.probe",
  "rollout.vllm_engine",
  "rollout.store",
  "rollout.entries",
  "rollout.weights",
  "rollout.results",
  "rollout.queue",
  "rollout.exchange",
  "tokenizer",
)


def _module_name(path: pathlib.Path) -> str:
  rel = path.relative_to(ROOT).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__" and len(parts) > 1:
    parts = parts[:-1]
  return ".".join(parts)


def _layer(name: str) -> int:
  best = None
  for layer, names in LAYERS.items():
    for n in names:  # longest matching prefix wins: model.qwen2 before model
      if (name == n or name.startswith(n + ".")) and (best is None or len(n) > len(best[1])):
        best = (layer, n)
  if best is None:
    raise AssertionError(f"prorl_jax.{name} is not in a layer of tests/imports_test.py: add it")
  return best[0]


def _imports(path: pathlib.Path):
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        yield a.name
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module
      for a in node.names:
        yield f"{node.module}.{a.name}"


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
  src = _module_name(path)
  src_layer = _layer(src)
  for imp in _imports(path):
    if imp.startswith("prorl_jax."):
      target = imp[len("prorl_jax.") :]
      if not any(target == n or target.startswith(n + ".") for ns in LAYERS.values() for n in ns):
        continue  # `from prorl_jax.x import name` also yields x.name; x itself is checked
      assert _layer(target) <= src_layer, (
        f"prorl_jax.{src} (layer {src_layer}) imports prorl_jax.{target} (layer {_layer(target)})"
      )
    if any(src == n or src.startswith(n + ".") for n in NO_JAX):
      assert imp.split(".")[0] not in ("jax", "flax", "optax"), f"prorl_jax.{src} imports {imp}"


def test_layering_check_can_fail():
  assert _layer("main") > _layer("train") > _layer("train_step") > _layer("model.qwen2")
  with pytest.raises(AssertionError):
    _layer("not_a_module")


def test_rollout_worker_never_imports_jax():
  """The worker runs in vLLM's own environment, which has no jax."""
  import subprocess
  import sys

  code = (
    "import sys; import prorl_jax.rollout.worker, prorl_jax.rollout.vllm_engine; "
    "bad = [m for m in ('jax', 'flax', 'optax') if m in sys.modules]; "
    "assert not bad, bad"
  )
  subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)


def _graph() -> dict[str, set[str]]:
  """Module -> the package modules it imports (at the top or inside a function);
  `from prorl_jax.pkg import sub` names the module pkg.sub, `from prorl_jax.pkg import Name`
  the module pkg."""
  modules = {_module_name(p) for p in FILES}
  graph = {}
  for path in FILES:
    src, targets = _module_name(path), set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        targets |= {a.name for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module:
        for a in node.names:
          sub = f"{node.module}.{a.name}"
          targets.add(sub if sub[len("prorl_jax.") :] in modules else node.module)
    graph[src] = {
      t[len("prorl_jax.") :]
      for t in targets
      if t.startswith("prorl_jax.") and t[len("prorl_jax.") :] in modules - {src}
    }
  return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Each strongly connected group of more than one module (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      group = []
      while True:
        w = stack.pop()
        on.discard(w)
        group.append(w)
        if w == v:
          break
      if len(group) > 1:
        out.append(sorted(group))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_no_import_circles():
  """No two modules import each other, directly or through others, even inside a function
  (the layer check above lets modules of one layer import each other)."""
  assert _cycles(_graph()) == []


def test_the_circle_check_can_fail():
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
