"""A run's programs compiled ahead of time for devices it may not have (`parallel.chips`: the
compile-only devices of a TPU slice or a GPU node, or the host's own), with per-device memory.

`programs(plan, devices)` takes the trainer's programs (the packed or padded update, the log-prob
pass, the reference reset) from the builder the run itself uses (`trainer.programs.build`), given
the state as shapes (`jax.eval_shape`: no weights are read), adds with `rollout.engine=inline`
the JAX engine's weight layout, prefill and decode step, and returns each jitted function with
its abstract arguments at the run's shapes. `compile_program` lowers and compiles one and reads
the compiler's memory analysis and optimized HLO. The arithmetic of time (FLOPs, bytes, the
roofline) is `trainer.estimate`'s.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import time
from typing import Any

import jax
import jax.numpy as jnp

from prorl_jax.config import ConfigError
from prorl_jax.model import init_params, presets
from prorl_jax.model.hf_weights import read_hf_config
from prorl_jax.parallel import sharding
from prorl_jax.rollout import inline
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.trainer import programs as programs_lib
from prorl_jax.trainer import setup
from prorl_jax.trainer import train_step as ts
from prorl_jax.trainer.plan import Plan


@dataclasses.dataclass
class Program:
  """One jitted function of the run at its shapes: `args` abstract (with shardings); `calls` per
  RL step are counted by `estimate`; `resident` bytes a device holds beside its arguments while
  it runs (the rest of the train state, the inline engine's weights)."""

  name: str
  jitted: Any
  args: tuple
  kind: str  # accumulate | apply | update | logprob | reset | prefill | decode | layout
  resident: int = 0
  kwargs: dict = dataclasses.field(default_factory=dict)
  attention: str = ""  # splash | cudnn | xla (full passes); pallas_tpu | pallas_gpu | xla (decode)


@dataclasses.dataclass(frozen=True)
class Shapes:
  """What the programs were built for: the model, the mesh, and the run's token shapes."""

  model_cfg: Any
  mesh: Any
  rows: int  # padded mini-batch rows
  seq: int  # prompt + response tokens at most
  slab_shape: tuple[int, int] | None  # packed micro-batch [rows, row_len]
  slots: int  # the inline engine's decode slots (0: no inline engine)
  steps_per_sync: int
  state_bytes: int  # the TrainState's bytes on one device


def model_config(plan: Plan, platform: str):
  """The run's model config from `model.path` (a directory with at least config.json, or a
  preset name: `presets.PRESETS`), with `model.path` empty the preset of `model.name`, or the
  demo's tiny model (`model.build_tiny`)."""
  m = plan.model
  opts = setup.model_options(m, platform)
  opts["param_dtype"] = opts.pop("dtype")
  arch = presets.preset(m.path or m.name)
  if arch is not None:
    return arch(**opts)
  if not m.path and m.build_tiny:
    from prorl_jax.demo import tiny_base  # builds the demo's tokenizer and model (small, fast)

    path = tiny_base.build(tempfile.mkdtemp(prefix="prorl-tiny-") + "/base", seed=plan.seed)
  elif m.path and os.path.isfile(os.path.join(m.path, "config.json")):
    path = m.path  # no weights or tokenizer needed: only the architecture
  elif not m.path:
    raise ConfigError(
      f"model.path is empty and model.name={m.name!r} is no preset: pass --config.model.path= "
      f"a directory with a config.json or a preset name ({', '.join(presets.PRESETS)})"
    )
  else:
    raise ConfigError(
      f"model.path={m.path!r} is neither a directory with a config.json nor a preset name "
      f"({', '.join(presets.PRESETS)})"
    )
  return presets.ModelConfig.from_hf_dict(read_hf_config(path), **opts)


def per_device_bytes(tree) -> int:
  """Bytes of an abstract pytree (with shardings) that one device holds."""
  total = 0
  for x in jax.tree.leaves(tree):
    shape = x.sharding.shard_shape(x.shape) if getattr(x, "sharding", None) else x.shape
    total += int(jnp.dtype(x.dtype).itemsize) * int(jnp.prod(jnp.asarray(shape or (1,))))
  return total


def _abstract(tree, shardings):
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings
  )


def abstract_state(model_cfg, tx, st_sh) -> ts.TrainState:
  """The TrainState as shapes with their shardings: nothing allocated."""
  shapes = jax.eval_shape(lambda: ts._new_state(init_params(model_cfg, jax.random.PRNGKey(0)), tx))
  return _abstract(shapes, st_sh)


def programs(plan: Plan, devices) -> tuple[list[Program], Shapes]:
  """Every program of the run `plan` on `devices` (see the module docstring), in the order a
  step runs them."""
  platform = devices[0].platform
  model_cfg = model_config(plan, platform)
  try:
    mesh = sharding.make_mesh(plan.mesh.data, plan.mesh.fsdp, plan.mesh.tensor, devices=devices)
  except ValueError as e:
    raise ConfigError(str(e)) from None
  tx = plan.optimizer.make()
  st_sh = ts.state_shardings(model_cfg, tx, mesh)
  state = abstract_state(model_cfg, tx, st_sh)
  state_bytes = per_device_bytes(state)
  params_bytes = per_device_bytes(state.params)
  built = programs_lib.build(
    plan.batching, plan.loss, plan.reset.ref_reset_optimizer, model_cfg, tx, mesh, st_sh
  )
  if built.slab_shape:
    progs = _packed(built, mesh, st_sh, state)
  else:
    progs = _padded(built, state, model_cfg.attention_impl)
  progs.append(
    Program("reset_ref", built.reset, (state.params, state.replace(params=None)), "reset")
  )
  for p in progs:  # the state not passed in stays in memory beside the program
    if p.kind in ("accumulate", "logprob"):
      p.resident = state_bytes - params_bytes
  engine, engine_bytes, slots, steps = [], 0, 0, 0
  if plan.rollout.engine_spec.in_trainer:
    engine, engine_bytes, slots, steps = _inline(plan, model_cfg, mesh, state)
    for p in progs:
      p.resident += engine_bytes
    for p in engine:
      p.resident += state_bytes
  shapes = Shapes(
    model_cfg, mesh, built.rows, built.seq, built.slab_shape, slots, steps, state_bytes
  )
  return progs + engine, shapes


def _inputs(keys, shape, shardings) -> dict:
  """A batch's arrays as shapes: the float keys float32, the rest int32, in their shardings."""
  dtype = lambda k: jnp.float32 if k in ts.FLOAT_KEYS else jnp.int32  # noqa: E731
  return {k: jax.ShapeDtypeStruct(shape, dtype(k), sharding=shardings[k]) for k in keys}


def _packed(built, mesh, st_sh, state):
  """The packed update's accumulation and apply, and the packed log-prob pass."""
  step = built.packed_train_step
  slab = _inputs(ts.PACKED_KEYS, built.slab_shape, built.slab_shardings)
  rep = sharding.replicated(mesh)
  counts = (jax.ShapeDtypeStruct((), jnp.float32, sharding=rep),) * 2
  grads, metrics = jax.eval_shape(step._zeros, state.params, counts)
  acc = (_abstract(grads, st_sh.params), jax.tree.map(lambda a: _abstract(a, rep), metrics))
  model_in = {k: slab[k] for k in ts.PACKED_MODEL_KEYS}
  attn = built.packed_cfg.attention_impl
  return [
    Program("logprob", built.packed_logprobs, (state.params, model_in), "logprob", attention=attn),
    Program(
      "update/accumulate",
      step._add,
      (state.params, acc, slab, counts),
      "accumulate",
      attention=attn,
    ),
    Program("update/apply", step._apply, (state, acc, counts), "apply"),
  ]


def _padded(built, state, attn: str):
  """The padded update (micro-batches scanned in one program) and its log-prob pass."""
  batch = _inputs(ts.BATCH_KEYS, (built.rows, built.seq), built.batch_shardings)
  inputs = {k: batch[k] for k in ("tokens", "attn_mask")}
  return [
    Program("logprob", built.logprobs, (state.params, inputs), "logprob", attention=attn),
    Program("update", built.train_step, (state, batch), "update", attention=attn),
  ]


def _inline(plan: Plan, model_cfg, mesh, state):
  """The inline engine's programs as the engine describes them (`inline.abstract_programs`):
  its weight layout, the prefill of a longest prompt and a chunk of decode steps, at the run's
  slots and pages, with (programs, the engine's weights' bytes a device, slots, decode steps a
  call). The engine's weights and pages are replicated on every device (what the decode step's
  kernel reads)."""
  rep = sharding.replicated(mesh)
  sds = lambda shape, dtype=jnp.int32: jax.ShapeDtypeStruct(shape, dtype, sharding=rep)  # noqa: E731
  platform = mesh.devices.flat[0].platform
  engine = JaxEngine(**plan.workers.options)
  b = plan.batching
  calls = inline.abstract_programs(
    engine,
    model_cfg,
    state.params,
    plan.rollout.sampling,
    b.max_prompt_len,
    b.max_response_len,
    plan.rollout.n,
    "gpu" if platform in ("gpu", "cuda") else platform,
    sds,
  )
  progs = []
  for name, fn, args, kwargs in calls:
    attention = {"prefill": "dense (prompt)"}.get(name, kwargs.get("attention"))
    progs.append(Program(f"engine/{name}", fn, args, name, kwargs=kwargs, attention=attention))
  weights = next(p for p in progs if p.kind == "decode").args[0]
  return progs, per_device_bytes(weights), engine.paged["slots"], engine.paged["steps_per_sync"]


NEEDS_CUDNN = (
  "cuDNN attention cannot be compiled on a host without the cuDNN library (it is linked at "
  "compile time); the other programs compiled"
)


@dataclasses.dataclass
class CompiledProgram:
  """A compiled program's per-device bytes (the compiler's memory analysis) and what it runs."""

  program: Program
  compile_s: float
  argument_bytes: int
  output_bytes: int
  alias_bytes: int
  temp_bytes: int
  code_bytes: int
  hlo: str
  executable: Any = None
  lowered: Any = None  # what it was compiled from (a saved program's fingerprint)
  error: str = ""  # it did not compile
  oom: str = ""  # the compiler ran out of the chip's memory: temp_bytes is what it asked for

  @property
  def peak_bytes(self) -> int:
    """Arguments, outputs not aliased to them, temporaries, code, and what stays resident."""
    return (
      self.argument_bytes
      + self.output_bytes
      - self.alias_bytes
      + self.temp_bytes
      + self.code_bytes
      + self.program.resident
    )


def lower(p: Program, mesh):
  """`p` lowered at its abstract arguments, with `mesh` as the context's mesh (the Mosaic
  kernels' `shard_map` reads it)."""
  with jax.set_mesh(mesh):
    return p.jitted.lower(*p.args, **p.kwargs)


def compile_program(p: Program, mesh) -> CompiledProgram:
  """Lowers and compiles `p` for its arguments' devices; the memory analysis and the optimized
  HLO. A kernel this host cannot compile (cuDNN needs its library) is an `error`, not a crash."""
  t0 = time.perf_counter()
  try:
    lowered = lower(p, mesh)
    exe = lowered.compile()
  except Exception as e:  # noqa: BLE001 (reported per program; the rest still compile)
    msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    if "cuDNN" in msg:
      msg = f"{NEEDS_CUDNN} ({msg})"
    oom = _COMPILER_OOM.search(msg)
    if oom:  # the TPU compiler's own out-of-memory: its temporaries alone exceed the chip
      temp = int(float(oom.group(1)) * _UNITS[oom.group(2)])
      return CompiledProgram(p, time.perf_counter() - t0, 0, 0, 0, temp, 0, "", oom=msg)
    return CompiledProgram(p, time.perf_counter() - t0, 0, 0, 0, 0, 0, "", error=msg)
  m = exe.memory_analysis()
  return CompiledProgram(
    p,
    time.perf_counter() - t0,
    int(m.argument_size_in_bytes),
    int(m.output_size_in_bytes),
    int(m.alias_size_in_bytes),
    int(m.temp_size_in_bytes),
    int(m.generated_code_size_in_bytes),
    exe.as_text() or "",
    executable=exe,
    lowered=lowered,
  )


_COMPILER_OOM = re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT])\)")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SHAPE = re.compile(r"\b(?:bf16|f16|f32|s32|u32|pred|s8|u8|f8e4m3fn)\[([0-9,]+)\]")


def largest_buffer(hlo: str) -> int:
  """The element count of the largest array in an HLO text."""
  best = 0
  for dims in _SHAPE.findall(hlo):
    n = 1
    for d in dims.split(","):
      n *= int(d)
    best = max(best, n)
  return best


def kernels(hlo: str) -> dict:
  """What the program runs, from its optimized HLO: fusions, custom calls by target (Mosaic
  kernels on TPUs, cuDNN and Triton on GPUs) and collectives."""
  calls = re.findall(r'custom_call_target="([^"]+)"', hlo)
  out = {"fusions": len(re.findall(r"\bfusion\(", hlo))}
  for target in sorted(set(calls)):
    out[f"custom_call:{target}"] = calls.count(target)
  for op in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute"):
    n = len(re.findall(rf"\b{op}(?:-start)?\(", hlo))
    if n:
      out[op] = n
  return out


def square_buffers(hlo: str, t: int) -> int:
  """How many arrays of an HLO text hold a [t, t] block (two dimensions of `t`): the dense
  attention scores or mask of a row of `t` tokens."""
  return sum(1 for dims in _SHAPE.findall(hlo) if dims.split(",").count(str(t)) >= 2)
