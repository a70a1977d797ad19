"""prorl-compile: the run's programs compiled for TPU slices and GPU nodes this host does not
have (libtpu and the CUDA compiler plugin in .venv-chips), their memory checked against the chip,
the one line of a program that does not fit, and the packed programs free of [T, T] buffers."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from prorl_jax.model import presets
from prorl_jax.parallel import chips
from prorl_jax.trainer import aot, estimate, fit
from prorl_jax.trainer.plan import Plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHIPS_PY = ROOT / ".venv-chips" / "bin" / "python"
TINY = ["--config=configs/tiny.py", "--config.rollout.pack_row_len=384"]  # no model dim is 384


def compile_cli(*args, timeout=600):
  """(exit status, JSON lines, stderr) of prorl-compile run in .venv-chips."""
  assert CHIPS_PY.exists(), ".venv-chips is missing: `make venv-chips` builds it"
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "XLA_FLAGS")}
  p = subprocess.run(
    [str(CHIPS_PY), "-m", "prorl_jax.cli.compile", *args],
    cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
  )  # fmt: skip
  lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
  return p.returncode, lines, p.stderr


def by_program(lines):
  return {ln["program"]: ln for ln in lines if "program" in ln}


def test_topology_names_map_to_chips_hosts_and_grids():
  t = chips.parse("v5p-8")  # four chips of two TensorCores, one host
  assert (t.devices, t.hosts, t.shape, t.chip.kind) == (4, 1, (2, 2, 1), "v5p")
  assert (chips.parse("v5p-16").devices, chips.parse("v5p-16").hosts) == (8, 2)
  assert (chips.parse("v5p-64").devices, chips.parse("v5p-64").hosts) == (32, 8)
  assert (chips.parse("v5e-8").devices, chips.parse("v5e-8").hosts) == (8, 1)
  assert (chips.parse("v5e-16").devices, chips.parse("v5e-16").hosts) == (16, 4)
  assert chips.parse("v6e-256").shape == (16, 16)
  assert (chips.parse("2xh200-8").devices, chips.parse("2xh200-8").hosts) == (16, 2)
  assert chips.parse("h100-8").chip.hbm_bytes == 84942979072
  assert chips.parse("v5e-16").chip.hbm_bytes == 16 << 30
  for bad in ("v5p-7", "v9-8", "h300-8", "v5e"):
    with pytest.raises(chips.TopologyError, match="v5p-2/4/8/16"):  # the names it accepts
      chips.parse(bad)


def test_model_counted_flops_of_the_real_model_by_hand():
  c = presets.r1_distill_qwen_1p5b()
  layers, head = estimate.matmul_params(c)
  # per layer: q, k, v (1536 x (12 + 2 + 2) x 128), o (1536 x 1536), gate, up, down (1536 x 8960)
  assert layers == 28 * (1536 * 16 * 128 + 1536 * 1536 + 3 * 1536 * 8960) == 1_310_195_712
  assert head == 1536 * 151936
  # one token with no context: 2 FLOPs a weight
  assert estimate.forward_flops(c, 1, 0) == 2 * (layers + head)


def test_fit_candidates_never_pack_rows_shorter_than_a_sequence():
  from configs import qwen15b

  cfg = qwen15b.get_config()
  plan = Plan.from_config(cfg)
  got = fit.candidates(plan, "cuda")
  budgets = [c["rollout.token_budget"] for c in got if "rollout.token_budget" in c]
  assert budgets == [9216]  # 16384 halves below 9216 = 1024 + 8192 tokens: only the floor
  assert {"vllm.gpu_memory_utilization": 0.4} in got
  assert got[-1] == {"mesh.tensor": 4, "mesh.fsdp": -1}
  assert not any("vllm.gpu_memory_utilization" in c for c in fit.candidates(plan, "tpu"))
  said = fit.settings(plan, "cuda")
  assert said[0].startswith("lower rollout.token_budget (16384") and "lower vllm." in said[-1]
  assert not any("remat" in x for x in said)  # already full in the run's config
  cfg.rollout.engine = "inline"
  assert fit.candidates(Plan.from_config(cfg), "tpu")[1] == {"jax_engine.dtype": "bfloat16"}
  assert "fewer jax_engine.slots (64) or jax_engine.pages, jax_engine.dtype=bfloat16" in (
    fit.settings(Plan.from_config(cfg), "tpu")
  )


def test_square_buffer_detector():
  hlo = "%a = f32[4,16384,16384]{2,1,0} x\n%b = bf16[16384,1536] y\n%c = pred[2,128,128] z"
  assert aot.square_buffers(hlo, 16384) == 1
  assert aot.square_buffers(hlo, 128) == 1
  assert aot.square_buffers(hlo, 1536) == 0
  assert aot.largest_buffer(hlo) == 4 * 16384 * 16384


def test_a_run_compiles_for_a_v5p_8_with_its_kernels(tmp_path):
  """Every program of a small run with the inline engine compiles for four v5p chips from a
  model directory holding nothing but config.json (a small Qwen2 of head_dim 128): the memory
  numbers positive, splash attention (a Mosaic kernel) in the packed programs and no [T, T]
  buffer in them, JAX's Pallas paged-attention kernel for the TPU in the decode step, one per
  layer; a model path that is neither a directory nor a preset is refused."""
  model_cfg = presets.tiny(vocab_size=512, head_dim=128, num_heads=2, num_kv_heads=1)
  (tmp_path / "config.json").write_text(json.dumps(model_cfg.to_hf_dict()))
  rc, lines, err = compile_cli(
    *TINY, "--topology=v5p-8", f"--config.model.path={tmp_path}",
    "--config.rollout.engine=inline", "--config.jax_engine.dtype=bfloat16",
  )  # fmt: skip
  assert rc == 0, err[-2000:]
  progs = by_program(lines)
  assert set(progs) == {
    "logprob", "update/accumulate", "update/apply", "reset_ref",
    "engine/layout", "engine/prefill", "engine/decode",
  }  # fmt: skip
  for ln in progs.values():
    assert ln["fits"] and "error" not in ln, ln
    assert ln["peak_bytes_per_chip"] > 0 and ln["argument_bytes"] > 0
    assert ln["hbm_bytes_per_chip"] == 95 << 30
  for name in ("logprob", "update/accumulate"):
    assert progs[name]["attention"] == "splash"
    assert progs[name]["kernels"].get("custom_call:tpu_custom_call", 0) >= 1, progs[name]
    assert progs[name]["tt_buffers"] == 0 and progs[name]["row_len"] == 384
  assert progs["update/accumulate"]["temp_bytes"] > 0
  assert progs["update/accumulate"]["kernels"].get("all-gather", 0) > 0  # FSDP over 4 chips
  decode = progs["engine/decode"]
  assert decode["attention"] == "pallas_tpu"
  assert decode["kernels"].get("custom_call:tpu_custom_call", 0) == model_cfg.num_layers
  last = lines[-1]
  assert last["topology"] == "v5p-8" and last["fits"] and last["mesh"]["fsdp"] == 4
  assert last["estimate"]["step_s"] > 0 and last["estimate"]["decode_tokens_per_s_per_chip"] > 0
  assert "not measured" in last["estimates_are"]
  # a v5p's expected times at MaxText's published v5p figure, its source stated
  assert "fits; roofline bound (not measured)" in err and "expected at 0.68 of peak" in err
  expected = last["estimate"]["expected"]
  assert expected["train_s"] == pytest.approx(last["estimate"]["train_s"] / 0.6776)
  assert expected["mfu_source"].startswith("published: MaxText, a 32B model on v5p-128")
  assert expected["step_s"] is None  # the inline engine's decode is not measured: not guessed
  assert last["estimate"]["total_steps"] == 220 and "covers" in last["estimate"]
  rc, lines, err = compile_cli(*TINY, "--topology=v5p-8", "--config.model.path=/no/such/model")
  assert rc == 2 and "neither a directory with a config.json nor a preset name" in err


def test_a_run_that_cannot_fit_is_refused_in_one_line(tmp_path):
  """A chip share too small for the tiny model: exit 1, the program, its bytes and the chip's,
  and the settings that change them; --dump writes the HLO of every program it compiled."""
  rc, lines, err = compile_cli(
    "--config=configs/tiny.py", "--topology=v5e-8", "--config.model.memory_fraction=0.0001",
    f"--dump={tmp_path}",
  )  # fmt: skip
  assert rc == 1
  assert not lines[-1]["fits"]
  why = lines[-1]["why"]
  first = next(ln for ln in lines[:-1] if not ln["fits"])
  assert why.startswith(f"{first['program']} needs ")
  assert f"{first['peak_bytes_per_chip'] / 1e9:.1f} GB per chip" in why
  assert "gives it 0.0 GB" in why and "lower rollout.token_budget (2048 tokens" in why
  assert "set model.remat=full" in why  # the tiny config rematerialises "dots"
  assert "vllm" not in why and "jax_engine" not in why  # neither acts in this run
  assert why in err
  assert len(list(tmp_path.glob("*.hlo.txt"))) == 4


def test_gpu_node_compiles_and_a_dense_mask_is_caught():
  """An H200 node without a GPU: the tiny run in bf16 compiles with the packed passes' attention
  as Pallas' GPU flash attention, one Triton kernel a pass (the forward; in the update the
  forward, its rematerialisation and the two backward kernels) and no [T, T] buffer, and Triton
  paged attention in the decode step; the same packed programs with one dense XLA attention
  block hold [T, T] buffers, which the line reports (the check can fail)."""
  rc, lines, err = compile_cli(
    *TINY,
    "--topology=h200-8",
    "--config.rollout.engine=inline",
    "--config.model.compute_dtype=bfloat16",
  )
  assert rc == 0, err[-2000:]
  progs = by_program(lines)
  for name, kernels in (("logprob", 1), ("update/accumulate", 4)):
    assert progs[name]["attention"] == "pallas_gpu" and progs[name]["tt_buffers"] == 0
    assert progs[name]["kernels"].get("custom_call:__gpu$xla.gpu.triton") == kernels, progs[name]
  assert progs["engine/decode"]["kernels"].get("custom_call:__gpu$xla.gpu.triton", 0) >= 1
  assert lines[-1]["hosts"] == 1 and lines[-1]["devices"] == 8
  rc, lines, err = compile_cli(
    *TINY, "--topology=h200-8", "--config.model.attention_impl=xla",
    "--config.model.attention_chunk=0",
  )  # fmt: skip
  assert rc == 0, err[-2000:]
  assert by_program(lines)["update/accumulate"]["tt_buffers"] > 0


def test_the_training_environment_has_no_tpu_or_cuda_backend():
  """libtpu and the CUDA plugin live only in .venv-chips: a run in this environment probes no
  accelerator backend."""
  import importlib.util

  assert importlib.util.find_spec("libtpu") is None
  assert importlib.util.find_spec("jax_plugins") is None  # the CUDA plugin's package
  assert sys.executable != str(CHIPS_PY)


@pytest.mark.slow
@pytest.mark.parametrize(
  "config, model, topology",
  [
    ("qwen15b", "deepseek-r1-distill-qwen-1.5b", "v5p-8"),
    ("qwen15b", "deepseek-r1-distill-qwen-7b", "v5p-16"),
    ("qwen3", "Qwen/Qwen3-1.7B", "v5p-8"),
  ],
)
def test_the_real_run_compiles(config, model, topology):
  rc, lines, err = compile_cli(
    f"--config=configs/{config}.py", f"--topology={topology}", f"--config.model.path={model}",
    timeout=1800,
  )  # fmt: skip
  assert rc in (0, 1), err[-2000:]
  progs = by_program(lines)
  assert set(progs) == {"logprob", "update/accumulate", "update/apply", "reset_ref"}
  assert all("error" not in ln for ln in progs.values())
  assert progs["update/accumulate"]["tt_buffers"] == 0
  assert progs["update/accumulate"]["row_len"] == 16384


def _tiny_cfg(**changes):
  from configs import tiny

  cfg = tiny.get_config()
  for key, value in changes.items():
    section, leaf = key.split(".")
    cfg[section][leaf] = value
  return cfg


def test_saved_executables_load_only_where_they_match(tmp_path):
  """Saved programs of this host's devices load back and compute what the jitted programs
  compute, bit for bit; another shape or another device count loads nothing."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from prorl_jax.model import init_params
  from prorl_jax.trainer import saved_programs

  # one device: an executable with collectives loaded back aborts jaxlib 0.10.2's CPU client now
  # and then (tests/conftest.py); the device check is the two-device case below
  devices = jax.devices()[:1]
  progs, shapes = aot.programs(Plan.from_config(_tiny_cfg()), devices)
  saved = saved_programs.save(
    [aot.compile_program(p, shapes.mesh) for p in progs], str(tmp_path), shapes.mesh
  )
  assert saved == ["logprob", "update/accumulate", "update/apply", "reset_ref"]
  loaded = saved_programs.load(progs, str(tmp_path), shapes.mesh)
  assert set(loaded) == set(saved)
  lp = next(p for p in progs if p.name == "logprob")
  params = init_params(shapes.model_cfg, jax.random.PRNGKey(3), shapes.mesh)
  rows, length = shapes.slab_shape
  rng = np.random.RandomState(0)
  seg = np.repeat(np.arange(1, length // 16 + 1), 16)[None].repeat(rows, 0).astype(np.int32)
  inputs = {
    "tokens": rng.randint(0, shapes.model_cfg.vocab_size, (rows, length)).astype(np.int32),
    "positions": np.tile(np.arange(16), length // 16)[None].repeat(rows, 0).astype(np.int32),
    "segment_ids": seg,
  }
  inputs = {k: jax.device_put(jnp.asarray(v), lp.args[1][k].sharding) for k, v in inputs.items()}
  want = lp.jitted(params, inputs)
  got = loaded["logprob"](params, inputs)
  for a, b in zip(want, got):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  other, other_shapes = aot.programs(
    Plan.from_config(_tiny_cfg(**{"rollout.token_budget": 1024})), devices
  )
  loaded_other = saved_programs.load(other, str(tmp_path), other_shapes.mesh)
  assert set(loaded_other) == {"update/apply", "reset_ref"}
  more, more_shapes = aot.programs(Plan.from_config(_tiny_cfg()), jax.devices()[:2])
  assert saved_programs.load(more, str(tmp_path), more_shapes.mesh) == {}
  with pytest.raises(FileNotFoundError, match="prorl-compile"):
    saved_programs.load(progs, str(tmp_path / "none"), shapes.mesh)


@pytest.mark.slow
def test_a_run_given_saved_programs_is_the_run_that_compiles_them(tmp_path, base):
  """`prorl-compile --topology=host --save DIR`, then the same run with compiled=DIR: it says it
  loaded the four programs, and its metrics and weights equal the run that compiled its own."""
  from tests import loop_helpers as lh

  saved = tmp_path / "compiled"
  extra = lh.flags(str(tmp_path / "plain"), base, 2)[1:]  # the run's flags, but its run_dir
  rc, _, err = compile_cli("--config=configs/tiny.py", "--topology=host", f"--save={saved}", *extra)
  assert rc == 0, err[-2000:]
  plain = lh.finish(lh.start(str(tmp_path / "plain"), base, 2))
  loaded = lh.finish(lh.start(str(tmp_path / "loaded"), base, 2, compiled=str(saved)))
  assert "compiling logprob" not in plain
  assert "loaded logprob, update/accumulate, update/apply, reset_ref; compiling none" in loaded
  assert lh.metrics(str(tmp_path / "plain")) == lh.metrics(str(tmp_path / "loaded"))
  assert lh.params_hash(str(tmp_path / "plain"))[1] == lh.params_hash(str(tmp_path / "loaded"))[1]


def test_the_tpu_compilers_own_out_of_memory_is_a_program_that_does_not_fit():
  """XLA:TPU refuses to compile a program whose temporaries exceed the chip (its message, as
  the real compile of the 1.5B engine for a v5e-16 gives it): the line says it does not fit,
  with at least those bytes; another compile error stays an error."""

  class Refused:  # stands in for a jitted function the compiler refuses
    def __init__(self, msg):
      self.msg = msg

    def lower(self, *a, **k):
      raise RuntimeError(self.msg)

  oom = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
    "temporaries (33.08G) exceeds available HBM (15.75G)."
  )
  import jax

  mesh = jax.sharding.Mesh(jax.devices()[:1], ("fsdp",))
  res = aot.compile_program(aot.Program("engine/prefill", Refused(oom), (), "prefill"), mesh)
  assert res.temp_bytes == int(33.08 * (1 << 30)) and res.oom and not res.error
  work = fit.workload(Plan.from_config(_tiny_cfg()))
  shapes = aot.Shapes(presets.tiny(), mesh, 8, 56, None, 0, 16, 0)
  line = fit.program_line(res, shapes, work, chips.CHIPS["v5e"], 16 << 30)
  assert line["fits"] is False and line["peak_bytes_per_chip"] == res.temp_bytes
  said = fit.why(line, "v5e-16", ["lower it"])
  assert (
    said == "engine/prefill needs more than 35.5 GB per chip; v5e-16 gives it 17.2 GB: lower it"
  )
  res = aot.compile_program(aot.Program("logprob", Refused("INTERNAL: boom"), (), "logprob"), mesh)
  assert res.error == "INTERNAL: boom" and not res.oom


def test_fit_search_changes_only_the_side_that_does_not_fit(monkeypatch):
  """The search adds a setting only where it shrinks a program that does not fit: an engine
  that is too big is fixed by the engine's settings, the update's batch is left alone; then a
  training program too big takes the training settings."""
  from configs import qwen15b

  cfg = qwen15b.get_config()
  cfg.rollout.engine = "inline"
  tried = []

  def fake_report(plan, topology):  # stands in for a compile: what fits under which settings
    e, budget = plan.workers.options, plan.batching.token_budget
    tried.append((e["dtype"], e["slots"], budget))
    decode_fits = e["dtype"] == "bfloat16" and e["slots"] <= 32
    update_fits = budget <= limit
    lines = [
      {"program": "engine/decode", "kind": "decode", "fits": decode_fits},
      {"program": "update/accumulate", "kind": "accumulate", "fits": update_fits},
    ]
    return fit.Report(lines, {"fits": decode_fits and update_fits})

  monkeypatch.setattr(fit, "report", fake_report)
  from prorl_jax.cli.compile import with_changes

  def search():
    return fit.find_fit(
      Plan.from_config(cfg), "v5p-8", lambda changes: Plan.from_config(with_changes(cfg, changes))
    )

  limit = 16384
  found = search()
  assert found == {"jax_engine.dtype": "bfloat16", "jax_engine.slots": 32, "jax_engine.pages": 0}
  assert [t[2] for t in tried] == [16384] * 3  # the update's batch never shrank
  limit, tried[:] = 9216, []
  found = search()
  assert found["rollout.token_budget"] == 9216 and found["jax_engine.slots"] == 32
  limit = 1024  # nothing the candidates offer fits
  assert search() is None


_FIGURE = __import__("re").compile(r"([\d.]+)\s*(GiB|TFLOP/s|GB/s|TB/s|B)\b")
_SCALE = {"GiB": 2**30, "B": 1, "TFLOP/s": 1e12, "GB/s": 1e9, "TB/s": 1e12}


def test_every_chip_row_is_its_source():
  """Each chip's HBM, peak bf16 FLOP/s and bandwidth are the figures its source string quotes
  (read here by an independent parser): a changed number, or a sparsity figure (twice the dense
  one), fails. Every TPU row is a chip's: JAX runs v4's and v5p's two cores as one device."""
  for kind, chip in chips.CHIPS.items():
    if kind == "host":
      continue
    found: dict[str, list[float]] = {}
    for value, unit in _FIGURE.findall(chip.source):
      what = {"GiB": "hbm", "B": "hbm", "TFLOP/s": "flops"}.get(unit, "bandwidth")
      found.setdefault(what, []).append(float(value) * _SCALE[unit])
    assert set(found) == {"hbm", "flops", "bandwidth"}, (kind, chip.source)
    assert "bf16" in chip.source and ("dense" in chip.source or chip.platform == "tpu"), kind
    for what, got in (
      ("hbm", chip.hbm_bytes),
      ("flops", chip.peak_flops),
      ("bandwidth", chip.hbm_bw),
    ):
      (quoted,) = found[what]
      assert abs(got - quoted) <= 0.005 * quoted, (kind, what, got, quoted)


@pytest.mark.parametrize(
  "args, names",
  [
    (["--config.rollout.engine=foo"], "rollout.engine"),
    (["--config.algo.clip_high=-3"], "algo.clip_high"),
    (["--keep_rate=0"], "--keep_rate"),
    (["--mean_response=-5"], "--mean_response"),
    (["--topology=v9z-8"], "unknown topology"),
  ],
)
def test_a_mistake_is_one_line_and_exit_2(args, names):
  """The config's checks and the assumption flags run before anything compiles: one line
  naming the key or flag, exit 2 (exit 1 means "does not fit"), no traceback."""
  topology = [] if any(a.startswith("--topology") for a in args) else ["--topology=v5p-8"]
  code, lines, err = compile_cli(*TINY, *topology, *args, timeout=120)
  assert code == 2 and "Traceback" not in err, err[-2000:]
  said = [ln for ln in err.splitlines() if ln.strip() and "WARNING" not in ln]
  assert len(said) <= 2 and names in said[-1], said


def test_help_lists_every_topology_the_table_accepts():
  p = subprocess.run(
    [str(CHIPS_PY), "-m", "prorl_jax.cli.compile", "--helpfull"],
    cwd=ROOT, capture_output=True, text=True, timeout=120,
  )  # fmt: skip
  text = " ".join(p.stdout.split())
  for name in ("v5e-1/4/8", "v6e-1/4/8", "v5p-2/4/8", "h200-N"):
    assert name in text, name


def test_every_slice_of_the_table_gives_its_compile_only_devices():
  """Each TPU size the topology table accepts (a single chip, four, a host, several hosts) and
  GPU nodes give JAX's compile-only devices of their count: small slices included (libtpu needs
  a single host's whole grid as its chips-per-host bounds)."""
  names = ["v5e-1", "v5e-4", "v5e-8", "v5e-16", "v6e-1", "v6e-4", "v6e-8", "v4-8", "v5p-2",
           "v5p-8", "v5p-16", "h100-8", "2xh200-8"]  # fmt: skip
  code = (
    "import json, sys\n"
    "from prorl_jax.parallel import chips\n"
    "out = {}\n"
    f"for n in {names!r}:\n"
    "  t = chips.parse(n)\n"
    "  devs = chips.compile_only_devices(t)\n"
    "  out[n] = [len(devs), t.devices]\n"
    "  if t.platform == 'tpu':  # one device a chip: a megacore's two cores are one device\n"
    "    out[n + ' chips'] = [len({tuple(d.coords) for d in devs}), len(devs)]\n"
    "print(json.dumps(out))\n"
  )
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "XLA_FLAGS")}
  env.update(JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1", TPU_SKIP_MDS_QUERY="1")
  p = subprocess.run(
    [str(CHIPS_PY), "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
  )
  assert p.returncode == 0, p.stderr[-2000:]
  got = json.loads(p.stdout.strip().splitlines()[-1])
  assert {n: a for n, (a, b) in got.items()} == {n: b for n, (a, b) in got.items()}, got
  assert got["v4-8"] == [4, 4] and got["v5p-8"] == [4, 4]  # 8 TensorCores: 4 chips


def test_the_pre_flight_compiles_the_trainers_programs_once_for_the_run():
  """What the TPU pre-flight compiles is what the run runs: the trainer's programs come from
  the one builder (`trainer.programs.build`), and the pre-flight hands its executables to the
  run (`saved_programs.use`), which computes with them what its own jitted programs compute."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from prorl_jax.model import init_params
  from prorl_jax.trainer import programs, saved_programs
  from prorl_jax.trainer import train_step as ts

  cfg = _tiny_cfg(**{"rollout.token_budget": 0})  # padded: the update is one program
  devices = jax.devices()[:1]
  why, exes = fit.compiled_for(Plan.from_config(cfg), devices, chips.CHIPS["v5p"], "here")
  assert why is None and set(exes) == {"logprob", "update", "reset_ref"}
  progs, shapes = aot.programs(Plan.from_config(cfg), devices)
  plan = Plan.from_config(cfg)
  tx = plan.optimizer.make()
  st_sh = ts.state_shardings(shapes.model_cfg, tx, shapes.mesh)
  built = programs.build(
    plan.batching, plan.loss, plan.reset.ref_reset_optimizer, shapes.model_cfg, tx,
    shapes.mesh, st_sh,
  )  # fmt: skip
  assert (built.rows, built.seq, built.slab_shape) == (shapes.rows, shapes.seq, None)
  lp = next(p for p in progs if p.name == "logprob")
  assert built.logprobs.lower(*lp.args).as_text() == lp.jitted.lower(*lp.args).as_text()

  @dataclasses.dataclass(frozen=True)
  class Run:  # what `use` reads of a `setup.Setup`: its programs
    programs: object

  run = saved_programs.use(Run(built), exes).programs
  assert run.logprobs is exes["logprob"] and run.train_step is exes["update"]
  assert run.reset is exes["reset_ref"]
  params = init_params(shapes.model_cfg, jax.random.PRNGKey(3), shapes.mesh)
  rng = np.random.RandomState(0)
  tokens = rng.randint(0, shapes.model_cfg.vocab_size, (shapes.rows, shapes.seq))
  inputs = {"tokens": tokens, "attn_mask": np.ones_like(tokens)}
  inputs = {
    k: jax.device_put(jnp.asarray(v, jnp.int32), lp.args[1][k].sharding) for k, v in inputs.items()
  }
  for a, b in zip(built.logprobs(params, inputs), run.logprobs(params, inputs)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # a program that does not fit: the verdict's one line, and nothing to run
  small = dataclasses.replace(chips.CHIPS["v5p"], hbm_bytes=1 << 20)
  why, exes = fit.compiled_for(Plan.from_config(cfg), devices, small, "a 1 MiB chip")
  assert why.startswith("logprob needs ") and "a 1 MiB chip gives it" in why and exes == {}


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_the_compile_tools_programs_are_the_runs(base, tmp_path, packed):
  """The run's programs (`setup.build`, the real weights) and the compile tool's (`aot.programs`,
  the state as shapes) lower to the same StableHLO: same fingerprint, program by program."""
  import jax

  from prorl_jax.trainer import saved_programs, setup
  from tests import loop_helpers as lh

  cfg = _tiny_cfg()
  for flag in lh.flags(str(tmp_path / "run"), base, 1):
    key, value = flag.removeprefix("--config.").split("=", 1)
    section, _, leaf = key.rpartition(".")
    node = cfg[section] if section else cfg
    node[leaf] = type(node[leaf])(value)
  if not packed:
    cfg.rollout.token_budget = 0
  run, _, _ = setup.build(Plan.from_config(cfg))
  progs, shapes = aot.programs(Plan.from_config(cfg), jax.devices())
  assert (shapes.rows, shapes.seq, shapes.slab_shape) == (run.rows, run.seq, run.slab_shape)
  ran = {
    "logprob": run.packed_logprobs if packed else run.logprobs,
    "update": run.train_step,
    "update/accumulate": run.packed_train_step and run.packed_train_step._add,
    "update/apply": run.packed_train_step and run.packed_train_step._apply,
  }
  names = {p.name for p in progs if p.kind not in ("prefill", "decode", "layout")}
  assert names == (
    {"logprob", "update/accumulate", "update/apply", "reset_ref"}
    if packed
    else {"logprob", "update", "reset_ref"}
  )
  for p in progs:
    if p.name in ran:
      mine = saved_programs.fingerprint(ran[p.name].lower(*p.args))
      assert mine == saved_programs.fingerprint(p.jitted.lower(*p.args)), p.name


def test_a_config_that_names_its_base_model_compiles_without_a_path():
  """configs/qwen15b.py names its base model (`model.name`): with `model.path` empty the compile
  tool takes that preset's architecture; a config that names none says what to pass, in one
  line; a run without the weights says what to download."""
  from configs import qwen3, qwen15b
  from prorl_jax import config as config_lib
  from prorl_jax.trainer import setup

  cfg = qwen15b.get_config()
  assert cfg.model.path == "" and cfg.model.name == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
  got = aot.model_config(Plan.from_config(cfg), "tpu")
  want = presets.r1_distill_qwen_1p5b(**{"param_dtype": "float32", "compute_dtype": "bfloat16"})
  assert (got.hidden_size, got.num_layers, got.vocab_size) == (1536, 28, want.vocab_size)
  assert got.attention_impl == "splash"
  with pytest.raises(config_lib.ConfigError, match="model.path is empty and model.name='' is no"):
    aot.model_config(Plan.from_config(qwen3.get_config()), "tpu")
  said = setup.missing_model(cfg.model.name)
  assert "`hf download deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --local-dir DIR`" in said
