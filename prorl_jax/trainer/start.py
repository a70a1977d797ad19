"""A run's start: `start(cfg)` checks the config and the run directory, builds the `Setup` and the
TrainState, resumes from the newest checkpoint, opens the metrics and the rollout side and
publishes the run's weights, returning the `Run` that `loop.train` advances; below it nothing
reads the ConfigDict (the steps read `setup.plan`). `Outcome` is how a run ended."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from typing import Any

import jax

from prorl_jax import config as config_lib
from prorl_jax.algo import dynamic_sampling
from prorl_jax.parallel import dist
from prorl_jax.trainer import aot, fit, placement, preflight, saved_programs
from prorl_jax.trainer import setup as setup_lib
from prorl_jax.trainer import workers as workers_lib
from prorl_jax.trainer.checkpoint import Checkpointer, abstract_like
from prorl_jax.trainer.loop_state import LoopState, loop_json, resume_loop
from prorl_jax.trainer.metrics import MetricWriter, NullWriter
from prorl_jax.trainer.plan import Plan
from prorl_jax.trainer.preemption import Watch
from prorl_jax.trainer.run_dir import finished_line, open_exchange, summarized_step
from prorl_jax.trainer.run_record import record_run
from prorl_jax.trainer.versions import Pins, on_primary, prune, publish, validate_and_log
from prorl_jax.trainer.workers import Rollouts

log = logging.getLogger("prorl_jax.trainer.loop")


@dataclasses.dataclass(frozen=True)
class Stopped:
  """How a signal stopped the run (stopped.json): after step `stopped_at`, `why` (the signal or
  the preempt file), the checkpoint written in `stop_s` seconds of it when `saved`, the step's
  validation and reset still to come when `pending_tail`."""

  stopped_at: int
  why: str
  stop_s: float
  pending_tail: bool
  saved: bool

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class Run:
  """A started run: what it was built from and what the steps advance (the TrainState, the loop
  state, the data cursor, the carry-over buffer), its checkpoints, metrics and rollout side."""

  setup: setup_lib.Setup
  state: Any  # TrainState
  source: Any  # the training source (its cursor is in every checkpoint)
  buffer: dynamic_sampling.GroupBuffer
  loop: LoopState
  ckpt: Checkpointer
  writer: Any  # MetricWriter on the primary, NullWriter elsewhere
  rollouts: Rollouts
  pins: Pins
  watch: Watch
  t_start: float
  stopped: Stopped | None = None  # how the run stopped to be requeued (a signal)
  last_val: tuple[int, dict] | None = None  # (step, validation) of the newest in-loop validation
  first: int = 0  # the step the session started after

  @property
  def plan(self) -> Plan:
    return self.setup.plan

  def validate(self, *, step: int, version: int, event: str) -> dict:
    r = self.rollouts
    return validate_and_log(
      self.setup,
      r.ex,
      r.on_idle,
      self.writer,
      step=step,
      version=version,
      event=event,
      inline=r.inline,
    )

  def host_state(self, loop: LoopState | None = None) -> dict:
    """The loop state (this one's by default) as a checkpoint stores it."""
    return loop_json(loop or self.loop, self.source, self.buffer)

  def close(self) -> None:
    self.rollouts.close()
    self.ckpt.close()
    self.writer.end_session()
    self.writer.close()


@dataclasses.dataclass(frozen=True)
class Outcome:
  """How `run` ended: `finished` (summary.json holds `summary`), `stopped` on a signal with a
  checkpoint (stopped.json holds it; the same command resumes), or `done` before (a run already
  finished: nothing loaded)."""

  kind: str  # finished | stopped | done
  summary: dict


def start(cfg, accept_config_changes: bool, watch: Watch) -> Run | Outcome:
  """The run's checks, its `Setup` and TrainState, resumed from its newest checkpoint when it
  has one, its metrics and its rollout side with the run's weights published; or the
  `Outcome` of a run that finished before (nothing loaded). The one reader of the ConfigDict
  below `main`."""
  t_start = time.time()  # wall_seconds counts everything, the demo's base model build too
  built = _checked_and_built(cfg, accept_config_changes)
  if isinstance(built, Outcome):
    return built
  setup, state, source = built
  plan, primary = setup.plan, dist.is_primary()
  c = plan.checkpoint
  ckpt = Checkpointer(c.dir, c.keep, c.async_save)
  loop = LoopState(length_penalty=setup.schedule.init_state())
  buffer, pins = dynamic_sampling.GroupBuffer(), Pins()
  restored = ckpt.restore_latest(abstract_like(state, setup.state_shardings))
  m = plan.metrics
  writer = (
    MetricWriter(cfg.run_dir, m.tensorboard, m.wandb_project, plan.total_steps, cfg.to_dict())
    if primary
    else NullWriter()
  )
  if not restored:  # a run cut before its first checkpoint starts over: so do its metrics
    writer.truncate_after(-1)
    writer.start_session(0, resumed=False, started=t_start)
  else:
    step0, state, saved = restored
    loop, buffer = resume_loop(saved, source, pins, step0)
    writer.truncate_after(step0, tail=loop.pending_tail)
    writer.start_session(step0, resumed=True, started=t_start)
    log.info("resumed from checkpoint step %d (policy version %d)", step0, loop.version)
    summarized = on_primary(lambda: summarized_step(plan.run_dir) == step0)
    if step0 >= plan.total_steps and not loop.pending_tail and summarized:
      ckpt.close()
      writer.close()
      if primary:
        print(finished_line(plan.run_dir, step0, plan.total_steps), flush=True)
      return Outcome("done", {"finished": True, "steps": step0})
  url = plan.rollout.exchange_url
  ex = open_exchange(url, loop) if primary else None  # only the primary talks to it
  rollouts = workers_lib.open_rollouts(ex, url, setup, watch)
  publish(setup, state, ex, loop.version, rollouts.inline)
  prune(ex, pins)
  workers_lib.start_local_workers(setup.plan, rollouts, url)
  return Run(setup, state, source, buffer, loop, ckpt, writer, rollouts, pins, watch, t_start)


def _saved(plan: Plan, compiled_dir: str) -> dict:
  """The executables in `compiled_dir` that match the run's programs on these devices (`plan`
  with the base model the run resolved)."""
  try:
    programs, shapes = aot.programs(plan, jax.devices())
    return saved_programs.load(programs, compiled_dir, shapes.mesh)
  except FileNotFoundError as e:
    raise config_lib.ConfigError(str(e)) from None


def _built(plan: Plan):
  """(setup, TrainState, training source): on TPUs the programs compiled for their chips before
  any weights load (refused in one line when one does not fit), and then run as compiled; with
  `compiled`, the saved executables (`prorl-compile --save`)."""
  too_big, compiled_now = fit.fits_on_this_host(plan)
  if too_big:
    raise config_lib.ConfigError(too_big)
  setup, state, source = setup_lib.build(plan)
  if plan.compiled:
    resolved = dataclasses.replace(plan, model=dataclasses.replace(plan.model, path=setup.path))
    setup = saved_programs.use(setup, _saved(resolved, plan.compiled))
  elif compiled_now:
    log.info("the pre-flight's executables run: %s (compiled once)", ", ".join(compiled_now))
    setup = saved_programs.use(setup, compiled_now)
  return setup, state, source


def _checked_and_built(cfg, accept_config_changes: bool):
  """The pre-flight checks (config, packages, inert flags, the run directory) and the build:
  (setup, TrainState, training source), or the `Outcome` of a run that finished before."""
  config_lib.validate(cfg)
  fraction = placement.jax_memory_fraction(cfg)
  if fraction is not None and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ:
    # before JAX's backend starts: trainer and local vLLM workers share the GPUs (an explicit
    # environment variable wins)
    os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(fraction)
  preflight.check_installed(cfg)
  dist.initialize(**cfg.dist)  # before anything touches a device
  log.info(
    "process %d/%d, %d local / %d global devices: %s",
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
    jax.devices(),
  )
  primary = dist.is_primary()
  if primary:
    for line in preflight.inert_flags(cfg):
      print(f"warning: {line}", file=sys.stderr, flush=True)
  preflight.check_run_dir(cfg.run_dir)
  created = not os.path.isdir(cfg.run_dir)
  os.makedirs(cfg.run_dir, exist_ok=True)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
  changes = []
  try:
    plan = Plan.from_config(cfg)  # first: the checks and the build read it
    if primary:
      finished, changes = preflight.before_loading(cfg, plan, accept_config_changes)
      if finished:
        return Outcome("done", finished)
      setup_lib.resolve_model_path(plan)  # the demo's base model is built once, by the primary
    dist.barrier("base_model")
    setup, state, source = _built(plan)
  except BaseException:  # a start that fails before writing anything leaves no empty run dir
    if created and primary and not os.listdir(cfg.run_dir):
      os.rmdir(cfg.run_dir)
    raise
  if primary:
    record_run(cfg, setup.path, changes)
  return setup, state, source
