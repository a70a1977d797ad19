"""Will the run fit on a topology: its programs compiled for the topology's devices (`aot`),
each program's per-device peak against the chip's HBM (what vLLM workers on the same GPUs
leave), the one line that says what does not fit and which settings change it, and the search
for the first setting that fits (`find_fit`)."""

from __future__ import annotations

import dataclasses
import os

import jax

from prorl_jax.parallel import chips
from prorl_jax.trainer import aot, estimate, saved_programs
from prorl_jax.trainer.plan import Plan


def settings(plan: Plan, platform: str) -> list[str]:
  """The settings that change a run's memory per chip, as the one line names them: only those
  that act in this run (its batching, its engine, its chips)."""
  b, spec, out = plan.batching, plan.rollout.engine_spec, []
  if b.token_budget:
    out.append(f"lower rollout.token_budget ({b.token_budget} tokens a device packs; --fit tries)")
  else:
    out.append(f"lower rollout.micro_batch_size ({b.micro_batch_size})")
  if plan.model.remat != "full":
    out.append("set model.remat=full")
  out.append("widen the slice (mesh.fsdp) or set mesh.tensor")
  if spec.in_trainer:
    e = plan.workers.options  # the inline engine's: jax_engine.*
    dtype = ", jax_engine.dtype=bfloat16" if e["dtype"] == "float32" else ""
    out.append(f"fewer jax_engine.slots ({e['slots']}) or jax_engine.pages{dtype}")
  if spec.shares_trainer_gpus and platform == "cuda":
    out.append(f"lower vllm.gpu_memory_utilization ({plan.workers.vllm_memory})")
  return out


# JAX's device_kind of a TPU -> its row of chips.CHIPS
DEVICE_KINDS = {
  "TPU v4": "v4",
  "TPU v5": "v5p",
  "TPU v5p": "v5p",
  "TPU v5 lite": "v5e",
  "TPU v5e": "v5e",
  "TPU v6 lite": "v6e",
  "TPU v6e": "v6e",
}


@dataclasses.dataclass
class Report:
  lines: list  # a dict per program
  last: dict  # the topology, whether all fit, the step estimates


def program_line(res, shapes, work, chip, hbm: int) -> dict:
  """The JSON line of one compiled program (its fields: docs/scaling.md, "Will it fit")."""
  p = res.program
  flops, nbytes, tokens = estimate.program_cost(p.kind, shapes, work)
  unknown = res.error.startswith(aot.NEEDS_CUDNN)
  line = {
    "program": p.name,
    "kind": p.kind,
    "fits": None if unknown else (not res.error and not res.oom and res.peak_bytes <= hbm),
    "attention": p.attention,
    "peak_bytes_per_chip": res.peak_bytes if not res.error else None,
    "hbm_bytes_per_chip": hbm,
    "margin_bytes": hbm - res.peak_bytes if not res.error else None,
    "compile_s": round(res.compile_s, 2),
    "argument_bytes": res.argument_bytes,
    "output_bytes": res.output_bytes,
    "alias_bytes": res.alias_bytes,
    "temp_bytes": res.temp_bytes,
    "code_bytes": res.code_bytes,
    "resident_bytes": p.resident,
    "flops_per_chip_estimate": flops,
    "bytes_per_chip_estimate": nbytes,
    "roofline_s_estimate": estimate.roofline_s(flops, nbytes, chip),
    "tokens_per_call": tokens,
    "kernels": aot.kernels(res.hlo),
    "largest_buffer_elements": aot.largest_buffer(res.hlo),
  }
  if shapes.slab_shape and p.kind in ("accumulate", "logprob"):
    line["row_len"] = shapes.slab_shape[1]
    line["tt_buffers"] = aot.square_buffers(res.hlo, shapes.slab_shape[1])
  if res.error:
    line["error"] = res.error
  if res.oom:  # a lower bound: the temporaries alone, beside what stays resident
    line["compiler_oom"] = res.oom
  return line


def trainer_hbm(plan: Plan, chip: chips.Chip) -> int:
  """The bytes a device gives the trainer's programs, by the run's own rule
  (`WorkersPlan.trainer_share`, `layout.trainer_share`): model.memory_fraction when set; on
  GPUs shared with local vLLM workers what they leave less the layout's headroom; else all of
  it (a trainer-only node, `rollout.local_workers=0`, included)."""
  share = plan.workers.memory_fraction
  if chip.platform == "cuda" and plan.rollout.engine_spec.shares_trainer_gpus:
    share = plan.workers.trainer_share()
  return int(chip.hbm_bytes * share) if share else chip.hbm_bytes


def workload(plan: Plan, mean_prompt: int = 0, mean_response: int = 0, keep_rate: float = 1.0):
  b, prompts = plan.batching, plan.rollout.prompts_per_step
  return estimate.Workload(
    responses=prompts * b.n,
    mean_prompt=mean_prompt or max(1, b.max_prompt_len // 4),
    mean_response=mean_response or max(1, b.max_response_len // 2),
    mini_batches=max(1, prompts // b.mini_batch_prompts),
    epochs=b.epochs,
    keep_rate=keep_rate,
  )


def why(line: dict, topo_name: str, fixes: list[str]) -> str:
  """The one line of a program that does not fit: its bytes, the chip's, what changes them."""
  if line.get("error"):
    return f"{line['program']} does not compile for {topo_name}: {line['error']}"
  more = "more than " if line.get("compiler_oom") else ""
  need, have = line["peak_bytes_per_chip"] / 1e9, line["hbm_bytes_per_chip"] / 1e9
  return (
    f"{line['program']} needs {more}{need:.1f} GB per chip; {topo_name} gives it {have:.1f} GB: "
    f"{'; '.join(fixes)}"
  )


def report(
  plan: Plan,
  topology: str,
  *,
  mean_prompt=0,
  mean_response=0,
  keep_rate=1.0,
  dump: str = "",
  save: str = "",
  devices=None,
  calibration: estimate.Calibration | None = None,
) -> Report:
  """Compiles every program of the run `plan` for `topology` (or `devices`, the host's own) and
  reports each with `program_line`; the last line sums up, each time as the roofline bound and
  as the expected time at `calibration` (by default the chip's, `estimate.calibration_for`)."""
  topo = chips.parse(topology)
  devices = devices or chips.compile_only_devices(topo)
  if topo.platform == "cpu":  # this host's own devices: as many as JAX was given
    topo = dataclasses.replace(topo, devices=len(devices))
  progs, shapes = aot.programs(plan, devices)
  work = workload(plan, mean_prompt, mean_response, keep_rate)
  hbm = trainer_hbm(plan, topo.chip)
  lines, times, results = [], {}, []
  for p in progs:
    res = aot.compile_program(p, shapes.mesh)
    ln = program_line(res, shapes, work, topo.chip, hbm)
    lines.append(ln)
    times[p.kind] = ln["roofline_s_estimate"]
    _dump(res, dump)
    results.append(res)
  if save:
    saved_programs.save(results, save, shapes.mesh)
  est = estimate.step_estimate(times, shapes, work, topo.chip, topo.hosts)
  est["expected"] = estimate.expected(est, calibration or estimate.calibration_for(topo.chip.kind))
  est["total_steps"] = int(plan.total_steps)
  est["total_h"] = est["step_s"] * plan.total_steps / 3600
  est["covers"] = (
    "update and log-probs, and the inline engine's generation"
    if plan.rollout.engine_spec.in_trainer
    else "update and log-probs; not generation (vLLM's, outside these programs)"
  )
  bad = [ln for ln in lines if ln["fits"] is False]
  last = {
    "topology": topology,
    "fits": not bad,
    "chip": topo.chip.kind,
    "devices": topo.devices,
    "hosts": topo.hosts,
    "mesh": dict(shapes.mesh.shape),
    "slab_shape": shapes.slab_shape,
    "engine": plan.rollout.engine,
    "assumed": dataclasses.asdict(work),
    "estimate": est,
    "estimates_are": "roofline from published peak FLOP/s and HBM bandwidth, not measured",
    "not_compiled": [ln["program"] for ln in lines if ln["fits"] is None],
  }
  if bad:
    last["why"] = why(bad[0], topology, settings(plan, topo.platform))
  return Report(lines, last)


def _dump(res, dump: str) -> None:
  if dump and res.hlo:
    os.makedirs(dump, exist_ok=True)
    with open(os.path.join(dump, res.program.name.replace("/", "-") + ".hlo.txt"), "w") as f:
      f.write(res.hlo)


def candidates(plan: Plan, platform: str = "tpu") -> list[dict]:
  """The settings `--fit` tries (config keys and values), in order, each on top of the ones
  before it: full rematerialisation, smaller packed micro-batches (never shorter than one
  sequence), the inline engine in bfloat16 and with fewer slots, more of a shared GPU for the
  trainer, tensor parallelism."""
  b, out = plan.batching, []
  if plan.model.remat != "full":
    out.append({"model.remat": "full"})
  seq = b.max_prompt_len + b.max_response_len
  floor = -(-seq // 128) * 128
  budget = b.token_budget
  while b.token_budget and budget // 2 >= floor:
    budget //= 2
    out.append({"rollout.token_budget": budget, "rollout.pack_row_len": 0})
  if b.token_budget and budget > floor:
    out.append({"rollout.token_budget": floor, "rollout.pack_row_len": 0})
  spec = plan.rollout.engine_spec
  if spec.in_trainer:
    engine = plan.workers.options  # the inline engine's options (`jax_engine.*`)
    if engine["dtype"] == "float32":
      out.append({"jax_engine.dtype": "bfloat16"})  # half the engine's weights and pages
    slots = engine["slots"]
    while slots > 8:
      slots //= 2
      out.append({"jax_engine.slots": slots, "jax_engine.pages": 0})
  if spec.shares_trainer_gpus and platform == "cuda":
    out += [{"vllm.gpu_memory_utilization": u} for u in (0.4, 0.3)]
  out += [{"mesh.tensor": t, "mesh.fsdp": -1} for t in (2, 4)]
  return out


ENGINE_KINDS = ("layout", "prefill", "decode")


def _side(change: dict) -> str:
  """Which programs a candidate setting shrinks: the engine's, the trainer's, or any."""
  if any(k.startswith("jax_engine.") for k in change):
    return "engine"
  if any(k in ("model.remat", "rollout.token_budget") for k in change):
    return "train"
  return "any"


def _failing_sides(rep: Report) -> set[str]:
  kinds = {ln["kind"] for ln in rep.lines if ln["fits"] is False}
  sides = {"engine" if k in ENGINE_KINDS else "train" for k in kinds}
  return sides | {"any"}


def find_fit(plan: Plan, topology: str, plan_for, first: Report | None = None) -> dict | None:
  """The settings of `candidates`, added one at a time, each only when it shrinks a program
  that does not fit yet (the engine's or the trainer's), until every program fits; None when
  the candidates run out. `plan`: the run as it is; `plan_for(changes)`: its Plan with the
  config settings `changes` ({"rollout.token_budget": 9216, ...}) made (the entry builds each
  from its config); `first`: `plan`'s report (compiled when not given). Each try compiles the
  run again."""
  rep = first or report(plan, topology)
  pending, changes = candidates(plan, chips.parse(topology).platform), {}
  while not rep.last["fits"]:
    step = next((c for c in pending if _side(c) in _failing_sides(rep)), None)
    if step is None:
      return None
    pending.remove(step)
    changes = {**changes, **step}
    try:
      rep = report(plan_for(changes), topology)
    except ValueError:  # e.g. a mesh the devices do not divide: try the next setting
      continue
  return changes


def fits_on_this_host(plan: Plan) -> tuple[str | None, dict]:
  """On a TPU host, the run's programs compiled for its own chips before any weight loads:
  (None when every program fits the device's memory, else the one line that says what does
  not; the trainer's programs compiled, `{name: executable}`, which the run uses in place of
  compiling them again). Elsewhere (None, {}): CPUs and GPUs shared with vLLM go their own way."""
  if jax.default_backend() != "tpu":
    return None, {}
  dev = jax.devices()[0]
  limit = (dev.memory_stats() or {}).get("bytes_limit")
  chip = chips.CHIPS.get(DEVICE_KINDS.get(dev.device_kind, ""))
  if chip is None or not limit:
    return None, {}
  chip = dataclasses.replace(chip, hbm_bytes=int(limit))
  return compiled_for(plan, jax.devices(), chip, f"this host's {dev.device_kind}")


TRAINER_KINDS = ("accumulate", "apply", "update", "logprob", "reset")


def compiled_for(plan: Plan, devices, chip, where: str) -> tuple[str | None, dict]:
  """The run's programs compiled for `devices` (chips of kind `chip`, named `where` in the
  verdict): (the first that does not fit, said in one line, or None; the trainer's programs
  compiled, `{name: executable}`, as `saved_programs.use` takes them)."""
  progs, shapes = aot.programs(plan, devices)
  work = workload(plan)
  done = {}
  for p in progs:
    res = aot.compile_program(p, shapes.mesh)
    ln = program_line(res, shapes, work, chip, trainer_hbm(plan, chip))
    if ln["fits"] is False:
      return why(ln, where, settings(plan, chip.platform)), {}
    if p.kind in TRAINER_KINDS and res.executable is not None:
      done[p.name] = res.executable
  return None, done
