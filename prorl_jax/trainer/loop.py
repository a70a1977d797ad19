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
import tempfile
import time

import jax
import jax.numpy as jnp

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.config.workers import local_workers
from prorl_jax.data.sources import precheck
from prorl_jax.evaluation import scoring
from prorl_jax.evaluation.export import RUN_RECORD
from prorl_jax.model import log_probs, save_hf
from prorl_jax.parallel import dist
from prorl_jax.rollout import layout, probe
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.local import check_worker_python, worker_python
from prorl_jax.rollout.store import InvalidExchange, open_store
from prorl_jax.rollout.weights import shard_bytes
from prorl_jax.trainer import preflight
from prorl_jax.trainer import setup as setup_lib
from prorl_jax.trainer import train_step as ts
from prorl_jax.trainer.checkpoint import Checkpointer, abstract_like
from prorl_jax.trainer.loop_state import LoopState, reset_reason
from prorl_jax.trainer.metrics import MetricWriter, NullWriter, wall_seconds_total
from prorl_jax.trainer.preemption import PREEMPTED, Preempted, Watch
from prorl_jax.trainer.run_record import check_resume_config, latest_local_step, record_run
from prorl_jax.trainer.setup import Setup, resolve_model_path
from prorl_jax.trainer.update import collect, prefetch, sampling, update

log = logging.getLogger("prorl_jax.trainer.loop")
STOPPED = "stopped.json"  # in run_dir: the last stop on a signal (a finished run removes it)
SUMMARY = "summary.json"  # in run_dir: written last; a run is finished when it names the last step


_probe_logprobs = jax.jit(log_probs, static_argnums=0)


def write_probe(model_cfg, params, tokens: list[list[int]], path: str):
  """The version's probe (`rollout/probe.py`) from the trainer's own log-probs."""
  probe.write_probe(lambda t: _probe_logprobs(model_cfg, params, t), tokens, path)


def publish(setup: Setup, state, ex: Exchange | None, version: int):
  """Weights `version` (the TrainState's params) -> the exchange. Every process takes part in
  gathering them; the primary writes."""
  params = dist.host_tree(state.params)
  if not dist.is_primary():
    return
  with tempfile.TemporaryDirectory(dir=setup.cfg.run_dir) as tmp:
    dtype = setup.cfg.model.compute_dtype
    nbytes = sum(x.size for x in jax.tree.leaves(params)) * jnp.dtype(dtype).itemsize
    save_hf(
      setup.model_cfg,
      params,
      tmp,
      tokenizer_dir=setup.path,
      dtype=dtype,
      max_shard_bytes=shard_bytes(nbytes),
    )
    # The probe forward runs on the trainer's devices (the host copy in a multi-host run).
    write_probe(setup.model_cfg, params if dist.multi() else state.params, setup.probe_tokens, tmp)
    ex.weights.publish(version, int(state.step), tmp)
  ex.weights.prune(keep=2)


def validate(setup: Setup, ex: Exchange, on_idle, *, version: int, tag: str) -> dict:
  """pass@k of weights `version` on the held-out items (primary only); {} without any."""
  c = setup.cfg
  if not setup.heldout:
    return {}
  ks = config_lib.pass_ks(c)
  return scoring.evaluate(
    ex,
    setup.heldout,
    samples=c.eval.samples,
    sampling=sampling(c, eval_mode=True),
    version=version,
    ks=ks,
    timeout_s=c.rollout.timeout_s,
    tag=tag,
    seed=c.seed,
    on_idle=on_idle,
    routing=config_lib.routing_table(c),
  )


def _val_line(step: int, val: dict) -> str:
  """One line of a validation's results, rounded: overall and per benchmark (pass@1)."""
  parts = [f"pass@1 {val['pass@1']:.4f}"] if "pass@1" in val else []
  parts += [
    f"{k[: -len('/pass@1')]} {v:.4f}" for k, v in sorted(val.items()) if k.endswith("/pass@1")
  ]
  fails = val.get("verifier_failures", 0)
  return (
    f"validation at step {step}: "
    + " | ".join(parts)
    + (f" ({fails} verifier failures)" if fails else "")
  )


def on_primary(fn):
  """fn() run by the primary, its result given to every process; a wait the primary abandoned
  (`Preempted`) raises Preempted on every process."""
  out = None
  if dist.is_primary():
    try:
      out = fn()
    except Preempted:
      out = PREEMPTED
  out = dist.broadcast(out)
  if isinstance(out, str) and out == PREEMPTED:
    raise Preempted("stop requested")
  return out


def _validate_and_log(setup, ex, on_idle, writer, *, step: int, version: int, event: str) -> dict:
  """Validation of weights `version` after step `step`: run by the primary, given to every
  process, written to the metrics and said on the console."""
  tag = "val-final" if event == "final" else f"val-s{step:07d}"
  val = on_primary(lambda: validate(setup, ex, on_idle, version=version, tag=tag))
  writer.write(step, {f"val/{k}": v for k, v in val.items()}, event=event)
  if event != "final":
    writer.say(_val_line(step, val))
  return val


def loop_json(loop: LoopState, source, buffer) -> dict:
  """The loop state with the data cursor and carry-over buffer, as a checkpoint stores it."""
  return dataclasses.replace(loop, data=source.state(), buffer=buffer.state()).to_json()


def resume_loop(d: dict, source) -> tuple[LoopState, dynamic_sampling.GroupBuffer]:
  """The loop state of a checkpoint; `source` is moved to its cursor."""
  loop = LoopState.from_json(d)
  source.load_state(loop.data)
  return loop, dynamic_sampling.GroupBuffer.from_state(loop.buffer)


def run_step(setup, state, loop: LoopState, source, buffer, ex, workers, step: int, on_idle=None):
  """One RL step: when pipelined, send the next step's first rounds of prompts; collect this
  step's groups (its prefetched ones first; `on_idle` runs while it waits, and may abandon the
  step by raising `Preempted`); update; publish weights v+1; advance the length-penalty
  schedule. Returns (state, loop, metrics, length-penalty event)."""
  cfg, primary = setup.cfg, dist.is_primary()
  t0 = time.time()
  prefetched, loop = loop.prefetch, dataclasses.replace(loop, prefetch=None)
  sent = {}
  if cfg.rollout.pipeline and primary and step < cfg.total_steps:
    # The next step's first rounds go out now, sampled with the newest weights: the workers
    # generate them behind this step's own requests (whose ids sort first) and while it trains.
    r = cfg.rollout
    rounds = dynamic_sampling.prefetch_rounds(
      r.prompts_per_step,
      len(buffer),
      (prefetched["rounds"] if prefetched and prefetched["step"] == step else 0)
      * r.prompts_per_step
      * loop.keep_rate,
      loop.keep_rate,
      cfg.algo.max_gen_rounds,
    )
    pf = prefetch(cfg, source, ex, step=step + 1, version=loop.version, rounds=rounds)
    loop = dataclasses.replace(loop, prefetch=pf)
    sent["pipeline/prefetch_rounds"] = pf["rounds"]
  groups, info = on_primary(
    lambda: collect(
      cfg, source, buffer, ex, on_idle, step=step, version=loop.version, prefetched=prefetched
    )
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
  publish(setup, state, ex, loop.version + 1)
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
  cfg = setup.cfg
  loop, val_metric = dataclasses.replace(loop, pending_tail=False), None
  if cfg.eval.every and step % cfg.eval.every == 0:
    val = log_val(step=step, version=loop.version, event="validation")
    val_metric, last_val = val.get("pass@1"), (step, val)
    loop = dataclasses.replace(loop, val_history=loop.val_history + [val_metric])
  why = reset_reason(cfg.algo, step, loop.kl_history, loop.val_history)
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
      {"reset/optimizer_reinit": float(cfg.algo.ref_reset_optimizer)},
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


def summarized_step(cfg) -> int | None:
  """The step `RUN_DIR/summary.json` says the run finished at (None: no summary). A run whose
  last checkpoint is at total_steps but has no summary of that step was stopped after its last
  update (before its final validation or its summary): its resumption does those."""
  try:
    with open(os.path.join(cfg.run_dir, SUMMARY)) as f:
      return int(json.load(f)["steps"])
  except (OSError, ValueError, KeyError, TypeError):
    return None


def stopped_before(cfg) -> dict:
  """How the run in `cfg.run_dir` last stopped to be requeued ({} if it did not)."""
  try:
    with open(os.path.join(cfg.run_dir, STOPPED)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def advice(cfg) -> list[str]:
  """Settings that run but learn less than a close alternative, each with that alternative."""
  out = []
  if cfg.rollout.pipeline and cfg.algo.is_correction == "icepop":
    out.append(
      "rollout.pipeline=True with algo.is_correction=icepop: ICE-POP's band also drops the tokens "
      "the policy moved most between the sampling version and the trained one; "
      "algo.is_correction=tis keeps them with a capped weight and learns more with the pipeline "
      "(docs/algorithm.md, section 8)"
    )
  return out


def _check_before_loading(cfg, accept_config_changes: bool):
  """The primary's checks before any heavy work: (summary of a finished run or None, the config
  changes a resumed run accepts)."""
  log.info("run %s: its config goes to %s", cfg.run_dir, os.path.join(cfg.run_dir, RUN_RECORD))
  for line in advice(cfg):
    log.warning(line)
  changes = check_resume_config(cfg, accept_config_changes)
  last = latest_local_step(cfg)
  stop = stopped_before(cfg)  # stopped before the last step's validation: not finished
  pending = bool(stop.get("pending_tail")) and stop.get("stopped_at") == last
  done = last is not None and last >= cfg.total_steps and summarized_step(cfg) == last
  if done and jax.process_count() == 1 and not pending:
    print(_finished(cfg, last), flush=True)
    return {"finished": True, "steps": last}, changes
  setup_lib.check_model_path(cfg)  # is the model there, and are the data files and rows?
  precheck(cfg)
  try:  # ... and can the exchange be opened?
    open_store(exchange_url(cfg))
  except InvalidExchange as e:
    raise config_lib.ConfigError(f"rollout.exchange: {e}") from None
  if layout.worker_count(cfg):  # can the workers run at all?
    check_worker_python(
      worker_python(cfg.rollout.engine, cfg.rollout.worker_python), cfg.rollout.engine
    )
  resolve_model_path(cfg)  # the demo's base model is built once, by the primary
  return None, changes


def _finished(cfg, step: int) -> str:
  return (
    f"{cfg.run_dir} is finished: step {step} of total_steps={cfg.total_steps}; raise "
    "--config.total_steps to train on"
  )


def exchange_url(cfg) -> str:
  return cfg.rollout.exchange or os.path.join(os.path.abspath(cfg.run_dir), "exchange")


def _open_exchange(cfg, loop: LoopState) -> Exchange:
  """The primary's exchange as the loop state `loop` expects it: weights newer than its version
  deleted (published after the checkpoint: redone), the requests of its prefetch record pending
  or with their results (put again where missing or torn), and every other request, lease and
  result of an interrupted run retired (`RequestQueue.reconcile`)."""
  ex = Exchange(exchange_url(cfg), lease_seconds=60)
  for v in ex.weights.versions():
    if v > loop.version:
      ex.weights.delete(v)
  pf = loop.prefetch
  keep = pf is not None and pf["version"] in ex.weights.versions()
  ex.queue.reconcile(pf["requests"] if keep else {})
  return ex


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
  dist.initialize(cfg.dist)
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
      finished, changes = _check_before_loading(cfg, accept_config_changes)
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
  restored = ckpt.restore_latest(
    abstract_like(state, ts.state_shardings(setup.model_cfg, setup.tx, setup.mesh))
  )
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
    writer.truncate_after(step0, tail=loop.pending_tail)
    writer.start_session(step0, resumed=True, started=t_start)
    log.info("resumed from checkpoint step %d (policy version %d)", step0, loop.version)
    summarized = on_primary(lambda: summarized_step(cfg) == step0)
    if step0 >= cfg.total_steps and not loop.pending_tail and summarized:
      ckpt.close()
      writer.close()
      if primary:
        print(_finished(cfg, step0), flush=True)
      return {"finished": True, "steps": step0}
  ex = _open_exchange(cfg, loop) if primary else None  # only the primary talks to it
  publish(setup, state, ex, loop.version)
  workers, placed = None, layout.for_config(cfg, hosts=jax.process_count())
  if primary:
    print(placed.describe(), flush=True)
    for line in placed.warnings:
      print(f"warning: {line}", file=sys.stderr, flush=True)
    workers, _ = local_workers(
      cfg,
      exchange_url(cfg),
      os.path.join(cfg.run_dir, "workers"),
      ex.queue.release,
      hosts=jax.process_count(),
      check=False,
    )
  summary, stopped = {}, None  # stopped: how the run stopped to be requeued (a signal)

  def on_idle():  # while the primary waits: stop when asked, and mind the workers
    watch.check()
    return workers.check() if workers else ""

  log_val = functools.partial(_validate_and_log, setup, ex, on_idle, writer)
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
          setup, state, loop, source, buffer, ex, workers, step, on_idle
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
