"""The run's entry, in three parts over one `Run`: `start(cfg)` (trainer/start.py) checks and
builds everything (the only place below `main` that reads the ConfigDict: the rest reads
`setup.plan`), `train(run)` drives the steps, `finish(run)` validates the last weights and says
how the run ended (`Outcome`); `run(cfg)` is the three. `run_step` is one step.

One RL step: prompts -> exchange requests -> scored results (within
`rollout.max_staleness`) -> dynamic-sampling filter with refill and carry-over -> shaping ->
advantages -> old/ref log-probs -> mini-batch updates -> publish weights v+1 -> metrics ->
checkpoint -> validation -> reference reset when due.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from typing import Any

import jax

from prorl_jax.algo import dynamic_sampling
from prorl_jax.parallel import dist
from prorl_jax.trainer.collect import Collected, collect, prefetch
from prorl_jax.trainer.loop_state import LoopState, reset_reason
from prorl_jax.trainer.metrics import wall_seconds_total
from prorl_jax.trainer.preemption import Preempted, Watch
from prorl_jax.trainer.run_dir import STOPPED, SUMMARY
from prorl_jax.trainer.start import Outcome, Run, Stopped, start
from prorl_jax.trainer.update import update
from prorl_jax.trainer.versions import on_primary, prune, publish

log = logging.getLogger("prorl_jax.trainer.loop")


@dataclasses.dataclass(frozen=True)
class Step:
  """What one step returns: the new TrainState and loop state, its metrics, the length
  penalty's phase change (None or "on"/"off"). The values that steer the loop (the keep rate
  that sizes the next prefetch, the KL to the reference a KL-spike reset reads) go from the
  typed fields of `Collected` and `Updated` into the loop state."""

  state: Any
  loop: LoopState
  metrics: dict
  lp_event: str | None


@dataclasses.dataclass(frozen=True)
class Tail:
  """What follows a step's update: the TrainState and loop state after its validation (when
  due) and reference reset (when due), the validation, and its pass@1 (None without one)."""

  state: Any
  loop: LoopState
  last_val: tuple[int, dict] | None
  val_metric: float | None


def run_step(run: Run, step: int) -> Step:
  """One RL step (the module docstring) from `run.state` and `run.loop`, returning the new ones
  (`train` assigns them): when pipelined, send the next step's first rounds of prompts; collect
  this step's groups (its prefetched ones first; waiting, the rollout side stops when asked,
  serves requests inline and minds the workers, and may abandon the step by raising
  `Preempted`); update; publish weights v+1; advance the length-penalty schedule."""
  plan, t0 = run.plan, time.time()
  prefetched = run.loop.prefetch
  loop = dataclasses.replace(run.loop, prefetch=None)
  sent = {}
  if plan.rollout.pipeline and dist.is_primary() and step < plan.total_steps:
    loop, sent = _prefetch_next(run, loop, prefetched, step)
  ex = run.rollouts.ex
  got = _collected(run, step, loop.version, prefetched)
  if got.keep_rate is not None:  # sizes the next prefetches
    loop = dataclasses.replace(loop, keep_rate=got.keep_rate)
  t1 = time.time()
  metrics = dict(got.metrics, **sent, **{"data/dropped_too_long": run.setup.dropped_too_long})
  kl_ref, state = 0.0, run.state
  if got.groups:
    lp_on = run.setup.schedule.is_on(loop.length_penalty)
    u = update(run.setup, state, got.groups, step=step, length_penalty_on=lp_on)
    state, kl_ref = u.state, u.kl_ref
    metrics.update(u.metrics)
  t2 = time.time()
  publish(run.setup, state, ex, loop.version + 1, run.rollouts.inline)
  t3 = time.time()
  length_penalty, lp_event = run.setup.schedule.advance(loop.length_penalty)
  loop = dataclasses.replace(
    loop,
    step=step,
    version=loop.version + 1,
    length_penalty=length_penalty,
    kl_history=(loop.kl_history + [kl_ref])[-50:],
  )
  metrics.update(_timing(t0, t1, t2, t3, metrics.get("response/tokens", 0)))
  metrics["policy_version"] = loop.version
  if run.rollouts.restarts is not None:
    metrics["workers/restarts"] = run.rollouts.restarts
  if ex is not None:
    metrics.update({f"exchange/{k}": v for k, v in ex.stats.items()})
  return Step(state, loop, metrics, lp_event)


def _collected(run: Run, step: int, version: int, prefetched) -> Collected:
  """`collect` on the primary (the other processes serve requests meanwhile), its `Collected`
  on every process."""
  r = run.rollouts
  return Collected(
    *on_primary(
      lambda: collect(
        run.plan.rollout,
        run.source,
        run.buffer,
        r.ex,
        r.on_idle,
        step=step,
        version=version,
        prefetched=prefetched,
      ),
      r.inline,
    )
  )


def _prefetch_next(run: Run, loop: LoopState, prefetched, step: int) -> tuple[LoopState, dict]:
  """The next step's first rounds go out now, sampled with the newest weights: the workers
  generate them behind this step's own requests (whose ids sort first) and while it trains."""
  r = run.plan.rollout
  mine = prefetched.rounds if prefetched and prefetched.step == step else 0
  rounds = dynamic_sampling.prefetch_rounds(
    r.prompts_per_step,
    len(run.buffer),
    mine * r.prompts_per_step * loop.keep_rate,
    loop.keep_rate,
    r.max_gen_rounds,
  )
  pf = prefetch(r, run.source, run.rollouts.ex, step=step + 1, version=loop.version, rounds=rounds)
  return dataclasses.replace(loop, prefetch=pf), {"pipeline/prefetch_rounds": pf.rounds}


def _timing(t0: float, t1: float, t2: float, t3: float, tokens: float) -> dict:
  return {
    "time/rollout_s": t1 - t0,
    "time/update_s": t2 - t1,
    "time/publish_s": t3 - t2,
    "time/step_s": t3 - t0,
    "perf/tokens_per_s": tokens / max(t2 - t1, 1e-9),
  }


def _tail(run: Run, step: int) -> Tail:
  """What follows step `step`'s update: its validation when due, then a reference reset when
  one is due (the caller advances the run by the result only once both are done); raises
  `Preempted` when asked to stop during the validation."""
  every, state = run.plan.validation.every, run.state
  loop, val_metric, last_val = dataclasses.replace(run.loop, pending_tail=False), None, None
  if every and step % every == 0:
    val = run.validate(step=step, version=loop.version, event="validation")
    val_metric, last_val = val.get("pass@1"), (step, val)
    loop = dataclasses.replace(loop, val_history=loop.val_history + [val_metric])
  why = reset_reason(run.plan.reset, step, loop.kl_history, loop.val_history)
  if why:
    state = run.setup.reset_ref(state)
    loop = dataclasses.replace(
      loop,
      resets=loop.resets + [{"step": step, "why": why}],
      # after a stall, a fresh start for the next stall count
      val_history=loop.val_history[-1:] if why == "validation_stall" else loop.val_history,
    )
    run.writer.write(
      step,
      {"reset/optimizer_reinit": float(run.plan.reset.ref_reset_optimizer)},
      event=f"reference_reset_{why}",
    )
  return Tail(state, loop, last_val or run.last_val, val_metric)


def _advance(run: Run, tail: Tail) -> float | None:
  """The run after a step's tail; its validation's pass@1."""
  run.state, run.loop, run.last_val = tail.state, tail.loop, tail.last_val
  return tail.val_metric


def _stop(run: Run, step: int, state, host: dict, saved=False) -> Stopped:
  """Asked to stop: the checkpoint of step `step` (state and host state `host`) written and
  finished, unless it exists. Returns how the run stopped."""
  ckpt, watch = run.ckpt, run.watch
  if not saved and step not in ckpt.steps():
    ckpt.save(step, state, host)
  ckpt.wait()
  took = watch.elapsed_s()
  if took > watch.grace_s:
    log.warning(
      "the checkpoint after %s took %.0f s, past checkpoint.grace_s=%.0f: a scheduler may kill "
      "the next stop before it saves; raise its grace period and checkpoint.grace_s",
      watch.why,
      took,
      watch.grace_s,
    )
  return Stopped(step, watch.why, round(took, 3), bool(host.get("pending_tail")), saved=True)


def run(cfg, accept_config_changes: bool = False, watch: Watch | None = None) -> dict:
  """The run to `total_steps`, resumed from its checkpoints: `start`, `train`, `finish`; the
  summary it wrote (or how it stopped). `watch`: the stop requests to heed (main.py makes it
  first thing, so a SIGTERM during imports and the model load is kept too); by default one made
  here from checkpoint.on_signal / preempt_file / grace_s."""
  c = cfg.checkpoint
  own = watch is None
  watch = watch or Watch(c.on_signal, c.preempt_file, c.grace_s)
  try:  # main.py's watch stays until the process exits: a late SIGTERM cannot kill a finished run
    started = start(cfg, accept_config_changes, watch)
    if isinstance(started, Outcome):
      return started.summary
    try:
      train(started)
    except BaseException:
      started.close()
      raise
    return finish(started).summary
  finally:
    if own:
      watch.close()


def train(run: Run) -> None:
  """The steps from the loop state's to `plan.total_steps` (the validation before the first,
  and a tail left pending by a stop, come first); `run.stopped` says how a signal stopped it."""
  try:
    loop, plan = run.loop, run.plan
    if loop.pass1_start is None and plan.validation.every:
      val = run.validate(step=loop.step, version=loop.version, event="validation")
      run.loop = dataclasses.replace(loop, pass1_start=val.get("pass@1"))
    run.first = run.loop.step
    if run.loop.pending_tail:  # stopped before this step's validation and reset: they come first
      _advance(run, _tail(run, run.first))
    for step in range(run.first + 1, plan.total_steps + 1):
      if not _step_and_save(run, step):
        break
    if dist.is_primary() and sys.stdout.isatty():
      print(flush=True)  # past the progress bar
  except Preempted:  # asked to stop before the first step: nothing trained, nothing to save
    run.stopped = _stopped_unsaved(run)


def _step_and_save(run: Run, step: int) -> bool:
  """Step `step`, its tail and its checkpoint when due; False when a stop was asked (saved)."""
  before = (run.state, run.host_state())  # if the step is abandoned
  try:
    out = run_step(run, step)
  except Preempted:  # asked to stop while collecting: the step is redone on resume
    run.stopped = _stop(run, step - 1, *before)
    return False
  run.state, run.loop = out.state, out.loop
  event = f"length_penalty_{out.lp_event}" if out.lp_event else None
  run.writer.write(step, out.metrics, event=event)
  run.writer.progress(step, run.first, f"reward {out.metrics.get('reward/raw_mean', 0):.3f}")
  try:
    val_metric = _advance(run, _tail(run, step))
  except Preempted:  # during the validation: the resumed run validates this step first
    pending = dataclasses.replace(run.loop, pending_tail=True)
    run.stopped = _stop(run, step, run.state, run.host_state(pending))
    return False
  every = run.plan.checkpoint.every  # and the last step, always
  saved = (bool(every) and step % every == 0) or step == run.plan.total_steps
  if saved:
    run.ckpt.save(step, run.state, run.host_state(), val_metric)
    run.pins.saved(step, run.loop)
  prune(run.rollouts.ex, run.pins)  # weights no checkpoint needs any more
  if on_primary(run.watch.requested):
    run.stopped = _stop(run, step, run.state, run.host_state(), saved)
    return False
  return True


def _stopped_unsaved(run: Run) -> Stopped:
  w = run.watch
  return Stopped(run.loop.step, w.why, round(w.elapsed_s(), 3), run.loop.pending_tail, saved=False)


def finish(run: Run) -> Outcome:
  """The last weights validated (unless the run stopped), the run closed, and how it ended
  written: summary.json (stopped.json removed) or, stopped on a signal, stopped.json."""
  summary = {}
  try:
    if not run.stopped and run.plan.validation.every:
      summary = _final_validation(run)
  except Preempted:  # asked to stop during the final validation
    run.stopped = _stopped_unsaved(run)
  finally:
    run.close()
  primary, run_dir = dist.is_primary(), run.plan.run_dir
  if run.stopped:
    if primary:
      with open(os.path.join(run_dir, STOPPED), "w") as f:
        json.dump(run.stopped.to_json(), f)
      how = (
        f"checkpoint saved in {run.stopped.stop_s:.1f} s of the signal"
        if run.stopped.saved
        else "nothing new to save"
      )
      print(
        f"stopped by {run.watch.why} after step {run.stopped.stopped_at} ({how}); run the "
        "same command to resume",
        flush=True,
      )
    return Outcome("stopped", run.stopped.to_json())
  summary.update(
    {
      "steps": run.loop.step,
      "wall_seconds": time.time() - run.t_start,  # this session
      "wall_seconds_total": wall_seconds_total(run_dir) if primary else None,
      "model_path": run.setup.path,
      "num_params": run.setup.model_cfg.num_params,
      "resets": run.loop.resets,
      "processes": jax.process_count(),
    }
  )
  if primary:
    if os.path.exists(os.path.join(run_dir, STOPPED)):
      os.remove(os.path.join(run_dir, STOPPED))
    with open(os.path.join(run_dir, SUMMARY), "w") as f:
      json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)
  return Outcome("finished", summary)


def _final_validation(run: Run) -> dict:
  """The last weights' validation (the last step's own when it just had one) and the summary's
  pass@1 keys."""
  loop, last_val, every = run.loop, run.last_val, run.plan.validation.every
  if last_val is None and loop.step == run.first and loop.step and loop.step % every == 0:
    # resumed after the last step's validation (stopped before the summary): that one
    last_val = (loop.step, run.writer.validation(loop.step))
  if last_val and last_val[0] == loop.step:  # the last step was just validated
    val = last_val[1]
    run.writer.write(loop.step, {f"val/{k}": v for k, v in val.items()}, event="final")
  else:
    val = run.validate(step=loop.step, version=loop.version, event="final")
  return {
    "pass@1_start": loop.pass1_start,
    "pass@1_end": val.get("pass@1"),
    **{f"final/{k}": v for k, v in val.items()},
  }
