"""Import layering: a module may import only its own or lower layers."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "prorl_jax"

# Each unit (a folder of prorl_jax, or a module at its top) stands on a floor. An import from one
# unit into another goes strictly down; inside a unit any import is allowed as long as no circle
# forms (test_no_import_circles). Data flows one way: records, the code sandbox and the numerical
# parts at the bottom, then the model and the config (pure data and its checks), the demo task, the
# exchange and its workers, the data that a config selects, the trainer, the evaluation of what it
# trained (its checkpoints and its run record), and the command lines on top.
FLOORS = {
  0: ["__init__", "records", "sandbox"],
  1: ["parallel", "algo", "rewards"],
  2: ["model", "config"],
  3: ["demo"],
  4: ["rollout"],
  5: ["data"],
  6: ["trainer"],
  7: ["evaluation"],
  8: ["cli"],
  9: ["main"],
}
# These run in worker processes and in vLLM's own environment, which has no jax.
NO_JAX = (  # a name ending in ".*": the package and everything in it
  "rewards.*",
  "sandbox.*",
  "records",
  "demo.chain_sum",
  "rollout.probe",
  "rollout.adapters",
  "rollout.engines.vllm",
  "rollout.store",
  "rollout.entries",
  "rollout.weights",
  "rollout.results",
  "rollout.queue",
  "rollout.exchange",
  "model",
  "model.presets",
  "model.tokenizer",
  "config.*",  # pure data and validation
  "trainer.placement",  # where the workers go: read by the launch scripts without JAX
)


def test_the_run_sets_the_memory_fraction_before_jax_starts(tmp_path):
  """`prorl-train` imports JAX but starts no backend before `start` has validated the config
  and set JAX's memory fraction: the first backend call of a run (spied in a fresh process)
  sees XLA_PYTHON_CLIENT_MEM_FRACTION set from the config."""
  code = f"""
import os
import prorl_jax.main
from prorl_jax.trainer import loop
from jax._src import xla_bridge
assert not xla_bridge._backends, "an import started a JAX backend"
os.environ.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)

def first_backend_call(*args, **kwargs):
  got = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
  raise SystemExit(0 if got == "0.37" else f"the backend started with fraction {{got!r}}")

xla_bridge.backends = first_backend_call
from configs import tiny
cfg = tiny.get_config()
cfg.model.memory_fraction = 0.37
cfg.run_dir = {str(tmp_path / "run")!r}
loop.run(cfg)
raise SystemExit("no backend call")
"""
  env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_MEM_FRACTION"}
  out = subprocess.run(
    [sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True, env=env
  )
  assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


def _no_jax(name: str) -> bool:
  return any(
    name == n.removesuffix(".*") or (n.endswith(".*") and name.startswith(n[:-1])) for n in NO_JAX
  )


def _module_name(path: pathlib.Path) -> str:
  rel = path.relative_to(ROOT).with_suffix("")
  parts = list(rel.parts)
  if parts[-1] == "__init__" and len(parts) > 1:
    parts = parts[:-1]
  return ".".join(parts)


def _unit(name: str) -> str:
  return name.split(".")[0]


def _floor(name: str) -> int:
  for floor, units in FLOORS.items():
    if _unit(name) in units:
      return floor
  raise AssertionError(f"prorl_jax.{name} is in no floor of tests/imports_test.py: add its unit")


def _absolute(path: pathlib.Path, node: ast.ImportFrom) -> str | None:
  """The absolute module an ImportFrom names: `from ..trainer import loop` in
  prorl_jax/cli/eval.py is prorl_jax.trainer (a relative import is an import like any other)."""
  if not node.level:
    return node.module
  package = ["prorl_jax", *path.relative_to(ROOT).with_suffix("").parts]
  package = package[:-1]  # a module's package; __init__'s is its own folder
  if node.level > 1:
    package = package[: -(node.level - 1)]
  return ".".join(package + ([node.module] if node.module else []))


def _imports(path: pathlib.Path):
  tree = ast.parse(path.read_text())
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        yield a.name
    elif isinstance(node, ast.ImportFrom) and (module := _absolute(path, node)):
      yield module
      for a in node.names:
        yield f"{module}.{a.name}"


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
  src = _module_name(path)
  for imp in _imports(path):
    if imp.startswith("prorl_jax.") and _unit(imp[len("prorl_jax.") :]) != _unit(src):
      target = imp[len("prorl_jax.") :]
      if not (ROOT / _unit(target)).exists() and not (ROOT / f"{_unit(target)}.py").exists():
        continue  # `from prorl_jax import name` also yields the bare name
      assert _floor(target) < _floor(src), (
        f"prorl_jax.{src} (floor {_floor(src)}) imports prorl_jax.{target} "
        f"(floor {_floor(target)}): an import between units goes strictly down"
      )
    if _no_jax(src):
      assert imp.split(".")[0] not in ("jax", "flax", "optax"), f"prorl_jax.{src} imports {imp}"


def test_layering_check_can_fail():
  assert _floor("main") > _floor("evaluation.runner") > _floor("trainer.loop") > _floor("model")
  assert _floor("rollout.worker") == _floor("rollout.local")  # one unit: any import inside
  with pytest.raises(AssertionError):
    _floor("not_a_module")


def test_rollout_worker_never_imports_jax():
  """The worker runs in vLLM's own environment, which has no jax."""
  import subprocess
  import sys

  code = (
    "import sys; import prorl_jax.rollout.worker, prorl_jax.rollout.engines.vllm; "
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
      elif isinstance(node, ast.ImportFrom) and (module := _absolute(path, node)):
        for a in node.names:
          sub = f"{module}.{a.name}"
          targets.add(sub if sub[len("prorl_jax.") :] in modules else module)
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


def test_relative_imports_are_read_as_the_modules_they_name(tmp_path, monkeypatch):
  """`from ..trainer import loop` in a cli module is prorl_jax.trainer.loop: an upward import or a
  circle written relatively is seen like any other (ruff's TID252 also bans the form)."""
  fake = tmp_path / "prorl_jax"
  (fake / "rewards").mkdir(parents=True)
  (fake / "trainer").mkdir()
  (fake / "rewards" / "__init__.py").write_text("from ..trainer import loop\n")
  (fake / "rewards" / "math.py").write_text("from . import common\nfrom .. import records\n")
  (fake / "trainer" / "loop.py").write_text("from .. import rewards\n")
  monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
  assert set(_imports(fake / "rewards" / "__init__.py")) >= {"prorl_jax.trainer.loop"}
  assert set(_imports(fake / "rewards" / "math.py")) >= {
    "prorl_jax.rewards.common",
    "prorl_jax.records",
  }
  with pytest.raises(AssertionError, match="goes strictly down"):
    test_imports_point_down(fake / "rewards" / "__init__.py")
  monkeypatch.setattr(sys.modules[__name__], "FILES", sorted(fake.rglob("*.py")))
  assert _cycles(_graph()) == [["rewards", "trainer.loop"]]


def test_the_circle_check_can_fail():
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_fits_on_a_few_screens():
  """A module over 400 lines holds more than one idea: split it by role (the benchmarks too)."""
  bench = sorted((ROOT.parent / "bench").glob("*.py"))
  assert len(bench) > 10, "bench/ not found"
  long = {
    str(p.relative_to(ROOT.parent)): n
    for p in FILES + bench
    if (n := len(p.read_text().splitlines())) > 400
  }
  assert not long, long


def _unexplained_function_imports(path: pathlib.Path) -> list[str]:
  """Imports inside functions with no comment on their line or on a comment line opening their
  block of imports."""
  src = path.read_text()
  lines, out = src.split("\n"), []
  for fn in ast.walk(ast.parse(src)):
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    for node in ast.walk(fn):
      if not isinstance(node, (ast.Import, ast.ImportFrom)):
        continue
      i = node.lineno - 1  # up to the first import of its block (blank lines inside it too)
      while i > 0 and (
        _is_import(lines[i - 1])
        or (i > 1 and not lines[i - 1].strip() and _is_import(lines[i - 2]))
      ):
        i -= 1
      said = any("#" in lines[k] for k in range(i, node.end_lineno))
      if not (said or lines[i - 1].strip().startswith("#")):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        out.append(f"{where}:{node.lineno}: {lines[node.lineno - 1].strip()}")
  return out


def _is_import(line: str) -> bool:
  return line.strip().startswith(("import ", "from "))


def test_an_import_inside_a_function_says_why():
  """An import belongs at the top of its module; one inside a function (a package vLLM's
  environment lacks, JAX held back until its memory fraction is set, a slow optional one) says
  why in a comment, or it hides a circle or an upward import."""
  bad = [line for p in FILES for line in _unexplained_function_imports(p)]
  assert not bad, "\n".join(bad)


def test_the_function_import_check_can_fail(tmp_path):
  f = tmp_path / "probe.py"
  f.write_text("def f():\n  import json\n\n  return json\n\n\ndef g():\n  import os  # why\n")
  assert [x.split(": ")[1] for x in _unexplained_function_imports(f)] == ["import json"]


# Below `start` (trainer/start.py): the build, the steps and the compile tool read the `Plan`;
# none of these modules takes the ConfigDict or imports the config (its `ConfigError` aside),
# except `loop.run`, which hands it to `start`.
STEP_SIDE = (
  "aot",
  "batch",
  "checkpoint",
  "collect",
  "compiled",
  "estimate",
  "fit",
  "hacks",
  "loop",
  "loop_state",
  "metrics",
  "preemption",
  "programs",
  "run_dir",
  "saved_programs",
  "scoring",
  "setup",
  "train_step",
  "update",
  "versions",
  "workers",
)
CONFIG_ENTRY = {("loop", "run")}


def _config_readers(module: str, source: str) -> list[str]:
  """What in `source` (the module trainer/`module`) takes or imports the config."""
  out = []
  for n in ast.walk(ast.parse(source)):
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
      args = n.args.posonlyargs + n.args.args + n.args.kwonlyargs
      if any(a.arg in ("cfg", "config") for a in args) and (module, n.name) not in CONFIG_ENTRY:
        out.append(f"{module}.{n.name} takes the config")
    names = []
    if isinstance(n, ast.Import):  # `import prorl_jax.config`, `import prorl_jax.config.fields`
      names = [a.name for a in n.names]
    elif isinstance(n, ast.ImportFrom) and [a.name for a in n.names] == ["ConfigError"]:
      pass  # the error a bad setting raises: it reads no config
    elif isinstance(n, ast.ImportFrom):  # absolute or relative (`from .. import config`)
      base = (
        n.module
        if not n.level
        else ".".join(["prorl_jax", "trainer"][: 3 - n.level] + ([n.module] if n.module else []))
      )
      names = [base] + [f"{base}.{a.name}" for a in n.names]
    if any(x == "prorl_jax.config" or x.startswith("prorl_jax.config.") for x in names):
      out.append(f"{module} imports the config")
  return out


def test_below_the_entry_nothing_reads_the_config():
  found = []
  for module in STEP_SIDE:
    found += _config_readers(module, (ROOT / "trainer" / f"{module}.py").read_text())
  assert found == []


def test_the_config_read_check_can_fail():
  src = "from prorl_jax import config as config_lib\n\ndef update(setup, cfg):\n  pass\n"
  assert sorted(_config_readers("update", src)) == [
    "update imports the config",
    "update.update takes the config",
  ]
  assert _config_readers("loop", "def run(cfg):\n  pass\n") == []
  for form in (
    "import prorl_jax.config\n",
    "import prorl_jax.config.fields as f\n",
    "from .. import config\n",
    "from ..config import fields\n",
    "from prorl_jax.config.engines import spec\n",
  ):
    assert _config_readers("update", form) == ["update imports the config"], form
  assert _config_readers("update", "from . import batch\nimport prorl_jax.records\n") == []
  assert _config_readers("update", "from prorl_jax.config import ConfigError\n") == []
  both = "from prorl_jax.config import ConfigError, engines\n"
  assert _config_readers("update", both) == ["update imports the config"]


# Where the run's ConfigDict is handled; everywhere else a `cfg` would be some other config.
CONFIG_UNITS = ("config", "trainer", "cli", "main")


def _config_names(module: str, source: str) -> list[str]:
  """One name per kind of config in `source` (the module `module`): `cfg` is the run's ConfigDict
  only, so outside CONFIG_UNITS nothing is named `cfg` (an argument, a variable, an attribute),
  and the model's config (annotated `ModelConfig`) is `model_cfg` everywhere."""
  out = []
  for n in ast.walk(ast.parse(source)):
    if isinstance(n, ast.arg):
      hint = ast.unparse(n.annotation) if n.annotation is not None else ""
      if "ModelConfig" in hint and n.arg != "model_cfg":
        out.append(f"{module}: the model's config named {n.arg!r}")
    if _unit(module) in CONFIG_UNITS:
      continue
    name = {ast.arg: "arg", ast.Name: "id", ast.Attribute: "attr"}.get(type(n))
    if name and getattr(n, name) == "cfg":
      out.append(f"{module}:{n.lineno} names something other than the run's config `cfg`")
  return out


def test_one_name_per_kind_of_config():
  found = []
  for path in sorted(ROOT.rglob("*.py")):
    found += _config_names(_module_name(path), path.read_text())
  assert found == []


def test_the_config_name_check_can_fail():
  src = "def prepare(cfg, params):\n  return cfg.hidden\n\ndef f(c: ModelConfig):\n  pass\n"
  assert sorted(_config_names("rollout.engines.jax_sampler", src)) == [
    "rollout.engines.jax_sampler: the model's config named 'c'",
    "rollout.engines.jax_sampler:1 names something other than the run's config `cfg`",
    "rollout.engines.jax_sampler:2 names something other than the run's config `cfg`",
  ]
  assert _config_names("trainer.start", "def start(cfg):\n  return cfg.seed\n") == []


def _long_functions(source: str, limit: int) -> list[str]:
  return [
    f"{n.name}: {n.end_lineno - n.lineno + 1} lines"
    for n in ast.walk(ast.parse(source))
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno >= limit
  ]


SMALL_FUNCTIONS = ("trainer", "rewards", "rollout/engines")  # also McCabe <= 10: ruff.toml


def test_no_function_in_the_trainer_the_engines_or_the_rewards_is_over_60_lines():
  found = []
  for room in SMALL_FUNCTIONS:
    for path in sorted((ROOT / room).glob("*.py")):
      found += [f"{room}/{path.name} {x}" for x in _long_functions(path.read_text(), 60)]
  assert found == []


def _too_complex(root: pathlib.Path) -> list[str]:
  """ruff's McCabe findings (C901, limit in ruff.toml) under `root`, with the repo's rules."""
  ruff = pathlib.Path(sys.executable).parent / "ruff"
  config = ROOT.parent / "ruff.toml"
  r = subprocess.run(
    [str(ruff), "check", "--select", "C901", "--config", str(config), "--output-format", "concise",
     "--no-cache", "."],
    cwd=root, capture_output=True, text=True,
  )  # fmt: skip
  return [ln for ln in r.stdout.splitlines() if "C901" in ln]


def test_no_function_in_the_trainer_the_engines_or_the_rewards_is_over_mccabe_10():
  assert _too_complex(ROOT.parent) == []


def test_the_complexity_check_can_fail(tmp_path):
  branches = "".join(f"  if x == {k}:\n    return {k}\n" for k in range(11))
  for room in SMALL_FUNCTIONS + ("data",):
    (tmp_path / "prorl_jax" / room).mkdir(parents=True)
    (tmp_path / "prorl_jax" / room / "m.py").write_text(f"def f(x):\n{branches}  return -1\n")
  found = _too_complex(tmp_path)
  assert len(found) == 3 and all("prorl_jax/data" not in ln for ln in found), found


def test_the_function_length_check_can_fail():
  src = "def f():\n" + "  x = 1\n" * 60
  assert _long_functions(src, 60) == ["f: 61 lines"]
  assert _long_functions("def f():\n" + "  x = 1\n" * 59, 60) == []
