"""`run(cfg)`: checks the config, builds the frozen `setup.Setup`, restores or starts the
TrainState and `LoopState`, and drives the RL loop; `run_step` is one step.

One RL step: prompts -> exchange requests -> scored results (within
`rollout.max_staleness`) -> dynamic-sampling filter with refill and carry-over -> shaping ->
advantages -> old/ref log-probs -> mini-batch updates -> publish weights v+1 -> metrics ->
checkpoint -> validation -> reference reset when due.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import sys
import time

import jax

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.parallel import dist
from prorl_jax.rollout import inline as inline_lib
from prorl_jax.trainer import placement, preflight
from prorl_jax.trainer import setup as setup_lib
from prorl_jax.trainer import workers as workers_lib
from prorl_jax.trainer.checkpoint import Checkpointer, abstract_like
from prorl_jax.trainer.collect import collect, prefetch
from prorl_jax.trainer.loop_state import LoopState, reset_reason
from prorl_jax.trainer.metrics import MetricWriter, NullWriter, wall_seconds_total
from prorl_jax.trainer.preemption import Preempted, Watch
from prorl_jax.trainer.run_dir import (
  STOPPED,
  SUMMARY,
  check_before_loading,
  exchange_url,
  finished_line,
  loop_json,
  open_exchange,
  resume_loop,
  summarized_step,
)
from prorl_jax.trainer.run_record import record_run
from prorl_jax.trainer.update import update
from prorl_jax.trainer.versions import Pins, on_primary, prune, publish, validate_and_log

log = logging.getLogger("prorl_jax.trainer.loop")


def run_step(
  setup, state, loop: LoopState, source, buffer, ex, workers, step: int, on_idle=None, inline=None
):
  """One RL step: when pipelined, send the next step's first rounds of prompts; collect this
  step's groups (its prefetched ones first; `on_idle` runs while it waits, serves requests with
  the `inline` engine when there is one, and may abandon the step by raising `Preempted`);
  update; publish weights v+1; advance the length-penalty schedule. Returns (state, loop,
  metrics, length-penalty event)."""
  plan, primary = setup.plan, dist.is_primary()
  t0 = time.time()
  prefetched, loop = loop.prefetch, dataclasses.replace(loop, prefetch=None)
  sent = {}
  if plan.rollout.pipeline and primary and step < plan.total_steps:
    # The next step's first rounds go out now, sampled with the newest weights: the workers
    # generate them behind this step's own requests (whose ids sort first) and while it trains.
    r = plan.rollout
    rounds = dynamic_sampling.prefetch_rounds(
      r.prompts_per_step,
      len(buffer),
      (prefetched.rounds if prefetched and prefetched.step == step else 0)
      * r.prompts_per_step
      * loop.keep_rate,
      loop.keep_rate,
      r.max_gen_rounds,
    )
    pf = prefetch(r, source, ex, step=step + 1, version=loop.version, rounds=rounds)
    loop = dataclasses.replace(loop, prefetch=pf)
    sent["pipeline/prefetch_rounds"] = pf.rounds
  groups, info = on_primary(
    lambda: collect(
      plan.rollout,
      source,
      buffer,
      ex,
      on_idle,
      step=step,
      version=loop.version,
      prefetched=prefetched,
    ),
    inline,
  )
  if "sampling/keep_rate_all" in info:
    loop = dataclasses.replace(loop, keep_rate=info["sampling/keep_rate_all"])
  t1 = time.time()
  metrics = dict(info, **sent, **{"data/dropped_too_long": setup.dropped_too_long})
  if groups:
    lp_on = setup.schedule.is_on(loop.length_penalty)
    state, m = update(setup, state, groups, step=step, length_penalty_on=lp_on)
    metrics.update(m)
  t2 = time.time()
  publish(setup, state, ex, loop.version + 1, inline)
  t3 = time.time()
  length_penalty, lp_event = setup.schedule.advance(loop.length_penalty)
  loop = dataclasses.replace(
    loop,
    step=step,
    version=loop.version + 1,
    length_penalty=length_penalty,
    kl_history=(loop.kl_history + [metrics.get("actor/kl_ref_old", 0.0)])[-50:],
  )
  metrics.update(
    {
      "time/rollout_s": t1 - t0,
      "time/update_s": t2 - t1,
      "time/publish_s": t3 - t2,
      "time/step_s": t3 - t0,
      "perf/tokens_per_s": metrics.get("response/tokens", 0) / max(t2 - t1, 1e-9),
      "policy_version": loop.version,
    }
  )
  if workers:
    metrics["workers/restarts"] = workers.restarts
  if ex is not None:
    metrics.update({f"exchange/{k}": v for k, v in ex.stats.items()})
  return state, loop, metrics, lp_event


def _tail(setup, state, loop: LoopState, log_val, writer, step: int, last_val=None):
  """What follows step `step`'s update: its validation when due, then a reference reset when
  one is due. Returns (state, loop, validation pass@1 or None, (step, validation) of the newest
  validation); raises `Preempted` when asked to stop during the validation."""
  every = setup.plan.validation.every
  loop, val_metric = dataclasses.replace(loop, pending_tail=False), None
  if every and step % every == 0:
    val = log_val(step=step, version=loop.version, event="validation")
    val_metric, last_val = val.get("pass@1"), (step, val)
    loop = dataclasses.replace(loop, val_history=loop.val_history + [val_metric])
  why = reset_reason(setup.plan.reset, step, loop.kl_history, loop.val_history)
  if why:
    state = setup.reset_ref(state)
    loop = dataclasses.replace(
      loop,
      resets=loop.resets + [{"step": step, "why": why}],
      # after a stall, a fresh start for the next stall count
      val_history=loop.val_history[-1:] if why == "validation_stall" else loop.val_history,
    )
    writer.write(
      step,
      {"reset/optimizer_reinit": float(setup.plan.reset.ref_reset_optimizer)},
      event=f"reference_reset_{why}",
    )
  return state, loop, val_metric, last_val


def _stop(ckpt: Checkpointer, watch: Watch, step: int, state, host: dict, saved=False) -> dict:
  """Asked to stop: the checkpoint of step `step` (state and host state `host`) written and
  finished, unless it exists. Returns how the run stopped."""
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
  return {
    "stopped_at": step,
    "why": watch.why,
    "stop_s": round(took, 3),
    "pending_tail": bool(host.get("pending_tail")),
    "saved": True,
  }


def run(cfg, accept_config_changes: bool = False, watch: Watch | None = None) -> dict:
  """The run to `total_steps`, resumed from its checkpoints. `watch`: the stop requests to
  heed (main.py makes it first thing, so a SIGTERM during imports and the model load is kept
  too); by default one made here from checkpoint.on_signal / preempt_file / grace_s."""
  c = cfg.checkpoint
  own = watch is None
  watch = watch or Watch(c.on_signal, c.preempt_file, c.grace_s)
  try:  # main.py's watch stays until the process exits: a late SIGTERM cannot kill a finished run
    return _run(cfg, accept_config_changes, watch)
  finally:
    if own:
      watch.close()


def _run(cfg, accept_config_changes: bool, watch: Watch) -> dict:
  t_start = time.time()  # wall_seconds counts everything, the demo's base model build too
  config_lib.validate(cfg)
  preflight.check_installed(cfg)
  dist.initialize(**cfg.dist)
  primary = dist.is_primary()
  if primary:
    for line in preflight.inert_flags(cfg):
      print(f"warning: {line}", file=sys.stderr, flush=True)
  created = not os.path.isdir(cfg.run_dir)
  os.makedirs(cfg.run_dir, exist_ok=True)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
  changes = []
  try:
    if primary:
      finished, changes = check_before_loading(cfg, accept_config_changes)
      if finished:
        return finished
    dist.barrier("base_model")
    setup, state, source = setup_lib.build(cfg)
  except BaseException:  # a start that fails before writing anything leaves no empty run dir
    if created and primary and not os.listdir(cfg.run_dir):
      os.rmdir(cfg.run_dir)
    raise
  if primary:
    record_run(cfg, setup.path, changes)
  ckpt = Checkpointer(
    cfg.checkpoint.dir or os.path.join(cfg.run_dir, "checkpoints"),
    cfg.checkpoint.keep,
    cfg.checkpoint.async_save,
  )
  loop = LoopState(length_penalty=setup.schedule.init_state())
  buffer = dynamic_sampling.GroupBuffer()
  pins = Pins()  # the weights the checkpoints' prefetches need
  restored = ckpt.restore_latest(abstract_like(state, setup.state_shardings))
  writer = (
    MetricWriter(
      cfg.run_dir,
      cfg.metrics.tensorboard,
      cfg.metrics.wandb_project,
      cfg.total_steps,
      cfg.to_dict(),
    )
    if primary
    else NullWriter()
  )
  if not restored:  # a run cut before its first checkpoint starts over: so do its metrics
    writer.truncate_after(-1)
    writer.start_session(0, resumed=False, started=t_start)
  if restored:
    step0, state, saved = restored
    loop, buffer = resume_loop(saved, source)
    pins.saved(step0, loop)
    writer.truncate_after(step0, tail=loop.pending_tail)
    writer.start_session(step0, resumed=True, started=t_start)
    log.info("resumed from checkpoint step %d (policy version %d)", step0, loop.version)
    summarized = on_primary(lambda: summarized_step(cfg) == step0)
    if step0 >= cfg.total_steps and not loop.pending_tail and summarized:
      ckpt.close()
      writer.close()
      if primary:
        print(finished_line(cfg, step0), flush=True)
      return {"finished": True, "steps": step0}
  ex = open_exchange(cfg, loop) if primary else None  # only the primary talks to it
  inline = workers_lib.inline_worker(cfg, ex, exchange_url(cfg), setup.path, setup.model_cfg)
  if inline is not None and primary:  # a stop asked mid-request abandons it (continuous batching)
    inline.interrupt = watch.check
  publish(setup, state, ex, loop.version, inline)
  prune(ex, pins)
  workers, placed = None, placement.layout(cfg, hosts=jax.process_count())
  if primary:
    print(placed.describe(), flush=True)
    for line in placed.warnings:
      print(f"warning: {line}", file=sys.stderr, flush=True)
    workers, _ = workers_lib.local_workers(
      cfg,
      exchange_url(cfg),
      os.path.join(cfg.run_dir, "workers"),
      ex.queue.release,
      hosts=jax.process_count(),
      check=False,
    )
  summary, stopped = {}, None  # stopped: how the run stopped to be requeued (a signal)

  def on_idle():  # while the primary waits: stop when asked, generate, mind the workers
    watch.check()
    if inline is not None:
      inline.serve()
    return workers.check() if workers else ""

  log_val = functools.partial(validate_and_log, setup, ex, on_idle, writer, inline=inline)
  try:
    if loop.pass1_start is None and cfg.eval.every:
      val = log_val(step=loop.step, version=loop.version, event="validation")
      loop = dataclasses.replace(loop, pass1_start=val.get("pass@1"))
    first = loop.step
    last_val = None  # (step, validation) of the newest in-loop validation
    if loop.pending_tail:  # stopped before this step's validation and reset: they come first
      state, loop, _, last_val = _tail(setup, state, loop, log_val, writer, first)
    for step in range(first + 1, cfg.total_steps + 1):
      before = (state, loop_json(loop, source, buffer))  # if the step is abandoned
      try:
        state, loop, metrics, lp_event = run_step(
          setup, state, loop, source, buffer, ex, workers, step, on_idle, inline
        )
      except Preempted:  # asked to stop while collecting: the step is redone on resume
        stopped = _stop(ckpt, watch, step - 1, *before)
        break
      writer.write(step, metrics, event=f"length_penalty_{lp_event}" if lp_event else None)
      writer.progress(step, first, f"reward {metrics.get('reward/raw_mean', 0):.3f}")
      try:
        state, loop, val_metric, last_val = _tail(
          setup, state, loop, log_val, writer, step, last_val
        )
      except Preempted:  # during the validation: the resumed run validates this step first
        pending = dataclasses.replace(loop, pending_tail=True)
        stopped = _stop(ckpt, watch, step, state, loop_json(pending, source, buffer))
        break
      every = cfg.checkpoint.every  # and the last step, always
      saved = (bool(every) and step % every == 0) or step == cfg.total_steps
      if saved:
        ckpt.save(step, state, loop_json(loop, source, buffer), val_metric)
        pins.saved(step, loop)
      prune(ex, pins)  # weights no checkpoint needs any more
      if on_primary(watch.requested):
        stopped = _stop(ckpt, watch, step, state, loop_json(loop, source, buffer), saved)
        break
    if primary and sys.stdout.isatty():
      print(flush=True)  # past the progress bar
    if cfg.eval.every and not stopped:
      if last_val is None and loop.step == first and loop.step and loop.step % cfg.eval.every == 0:
        # resumed after the last step's validation (stopped before the summary): that one
        last_val = (loop.step, writer.validation(loop.step))
      if last_val and last_val[0] == loop.step:  # the last step was just validated
        val = last_val[1]
        writer.write(loop.step, {f"val/{k}": v for k, v in val.items()}, event="final")
      else:
        val = log_val(step=loop.step, version=loop.version, event="final")
      summary = {
        "pass@1_start": loop.pass1_start,
        "pass@1_end": val.get("pass@1"),
        **{f"final/{k}": v for k, v in val.items()},
      }
  except Preempted:  # asked to stop before the first step: nothing trained, nothing to save
    stopped = {
      "stopped_at": loop.step,
      "why": watch.why,
      "stop_s": round(watch.elapsed_s(), 3),
      "pending_tail": loop.pending_tail,
      "saved": False,
    }
  finally:
    if workers:
      workers.stop()
    inline_lib.close(inline)
    ckpt.close()
    writer.end_session()
    writer.close()
  if stopped:
    summary = stopped
    if primary:
      with open(os.path.join(cfg.run_dir, STOPPED), "w") as f:
        json.dump(summary, f)
      how = (
        f"checkpoint saved in {stopped['stop_s']:.1f} s of the signal"
        if stopped["saved"]
        else "nothing new to save"
      )
      print(
        f"stopped by {watch.why} after step {stopped['stopped_at']} ({how}); run the same "
        "command to resume",
        flush=True,
      )
    return summary
  summary.update(
    {
      "steps": loop.step,
      "wall_seconds": time.time() - t_start,  # this session
      "wall_seconds_total": wall_seconds_total(cfg.run_dir) if primary else None,
      "model_path": setup.path,
      "num_params": setup.model_cfg.num_params,
      "resets": loop.resets,
      "processes": jax.process_count(),
    }
  )
  if primary:
    if os.path.exists(os.path.join(cfg.run_dir, STOPPED)):
      os.remove(os.path.join(cfg.run_dir, STOPPED))
    with open(os.path.join(cfg.run_dir, SUMMARY), "w") as f:
      json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)
  return summary
