"""A run's frozen setup: what stays fixed from its first step to its last.

`build(plan)` checks and loads everything heavy once — tokenizer, data, mesh, model, optimizer,
the jitted steps and their shapes, the probe tokens, the length-penalty schedule — and returns
`(Setup, TrainState, source)`: the frozen `Setup`, the initial train state and the training data
stream (whose cursor is loop state). What changes from step to step is the TrainState and the
`loop_state.LoopState`; `loop.run` threads both through the loop.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jax
import numpy as np

from prorl_jax.algo import shaping
from prorl_jax.config import ConfigError
from prorl_jax.data.sources import sources_for
from prorl_jax.demo import warm_start
from prorl_jax.model import load_hf, load_tokenizer
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.trainer import preflight, programs
from prorl_jax.trainer import train_step as ts
from prorl_jax.trainer.plan import Plan

log = logging.getLogger("prorl_jax.trainer.loop")


def missing_model(name: str) -> str:
  """What to do when model.path is empty: download the base model `name` (`model.name`)."""
  repo = name or "ORG/MODEL"
  return (
    f"model.path is empty: download {name or 'the base model'} on a machine with internet "
    f"(`hf download {repo} --local-dir DIR`), copy DIR here and pass --config.model.path=DIR"
  )


def resolve_model_path(plan: Plan) -> str:
  """The HF directory to start from (checked by `preflight.before_loading`); the demo builds its
  tiny base model when none is given."""
  if plan.model_path:
    return plan.model_path
  if plan.data.build_tiny:
    return warm_start.cached(seed=plan.data.seed)  # one build for every run dir
  raise ConfigError(missing_model(plan.model.name))


def attention_impl(model_cfg, platform: str | None = None) -> str:
  """`model.attention_impl`, with auto = cuDNN fused attention on NVIDIA GPUs in 16-bit compute,
  splash attention on TPUs, XLA otherwise; for `platform` (tpu | gpu | cuda | cpu), the default
  backend's when None."""
  if model_cfg.attention_impl != "auto":
    return model_cfg.attention_impl
  platform = platform or jax.default_backend()
  if platform == "tpu":
    return "splash"
  fused = platform in ("gpu", "cuda") and model_cfg.compute_dtype in ("bfloat16", "float16")
  return "cudnn" if fused else "xla"


@dataclasses.dataclass(frozen=True)
class Setup:
  """Fixed for the whole run. Legend: B = rows of a padded mini-batch, T = its token columns;
  a packed slab is [slab_shape] = [rows, row_len] (None: padded micro-batches)."""

  plan: Plan  # the config, unpacked
  path: str  # the base model's HF directory
  tok: Any
  pad_id: int
  heldout: list  # validation items
  dropped_too_long: int  # training prompts longer than rollout.max_prompt_len, dropped
  mesh: Any
  model_cfg: Any
  tx: Any  # the optax optimizer
  state_shardings: Any  # of the TrainState
  programs: programs.TrainPrograms  # the update, the log-prob passes, the reset, their shapes
  probe_tokens: list  # the version probe's token rows
  schedule: shaping.LengthPenaltySchedule

  # the programs and their shapes by name (see `programs.TrainPrograms`)
  rows = property(lambda self: self.programs.rows)
  seq = property(lambda self: self.programs.seq)
  batch_shardings = property(lambda self: self.programs.batch_shardings)
  train_step = property(lambda self: self.programs.train_step)
  logprobs = property(lambda self: self.programs.logprobs)
  slab_shape = property(lambda self: self.programs.slab_shape)
  slab_shardings = property(lambda self: self.programs.slab_shardings)
  packed_train_step = property(lambda self: self.programs.packed_train_step)
  packed_logprobs = property(lambda self: self.programs.packed_logprobs)
  reset_ref = property(lambda self: self.programs.reset_ref)


def build(plan: Plan) -> tuple[Setup, ts.TrainState, Any]:
  """(setup, initial TrainState, training source) for the run's `plan` (`Plan.from_config(cfg)`:
  nothing here reads the config); errors a user can fix come first, before the weights load."""
  path = resolve_model_path(plan)
  tok = _tokenizer(path)
  # The data and the mesh before the weights: their errors come before any heavy work.
  source, heldout, dropped = _training_data(plan.data, tok)
  preflight.check_code_sandbox(plan.workers, source.verifiers)
  mesh, model_cfg, params = _mesh_and_model(plan, path)
  tx = plan.optimizer.make()
  state_sh = ts.state_shardings(model_cfg, tx, mesh)  # computed once, given to every jit below
  state = ts.create_train_state(
    model_cfg, tx, mesh, jax.random.PRNGKey(plan.seed), params=params, shardings=state_sh
  )
  progs = programs.build(
    plan.batching, plan.loss, plan.reset.ref_reset_optimizer, model_cfg, tx, mesh, state_sh
  )
  setup = Setup(
    plan=plan,
    path=path,
    tok=tok,
    pad_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
    heldout=heldout,
    dropped_too_long=dropped,
    mesh=mesh,
    model_cfg=model_cfg,
    tx=tx,
    state_shardings=state_sh,
    programs=progs,
    probe_tokens=_probe_tokens(plan, heldout[:2] or [source.sources[0].items[0]], model_cfg),
    schedule=plan.schedule,
  )
  return setup, state, source


def _mesh_and_model(plan: Plan, path: str):
  """(mesh, model config, params on the mesh): the mesh checked against the devices first."""
  try:
    mesh = make_mesh(plan.mesh.data, plan.mesh.fsdp, plan.mesh.tensor)
  except ValueError as e:  # the mesh does not fit the devices
    raise ConfigError(str(e)) from None
  opts = model_options(plan.model)
  model_cfg, params = load_hf(path, mesh=mesh, lora_seed=plan.seed, **opts)
  return mesh, model_cfg, params


def model_options(m, platform: str | None = None) -> dict:
  """How the run runs its model (`model.*`): dtypes, rematerialisation, attention (`auto`
  resolved for `platform`, the default backend's when None)."""
  return dict(
    dtype=m.param_dtype,
    compute_dtype=m.compute_dtype,
    remat=m.remat,
    attention_impl=attention_impl(m, platform),
    attention_chunk=m.attention_chunk,
    lora_rank=m.lora_rank,
    lora_alpha=m.lora_alpha,
    lora_targets=m.lora_targets,
  )


def _tokenizer(path: str):
  try:
    return load_tokenizer(path)
  except (OSError, ValueError) as e:
    raise ConfigError(
      f"model.path={path!r}: cannot load its tokenizer ({type(e).__name__}: {str(e)[:200]})"
    ) from None


def _training_data(spec, tok) -> tuple[Any, list, int]:
  """(training source, held-out items, training prompts dropped as too long: said once)."""
  source, heldout = sources_for(spec, tok)
  dropped = sum(getattr(s, "dropped_too_long", 0) for s in source.sources)
  if dropped:
    log.warning(
      "%d training prompts are longer than rollout.max_prompt_len=%d and were dropped",
      dropped,
      spec.max_prompt_len,
    )
  return source, heldout, dropped


def _probe_tokens(plan: Plan, items, model_cfg) -> list[list[int]]:
  """The version probe's rows: an item's prompt (its last max_prompt_len tokens) and 16 random
  tokens after it, seeded by the run."""
  rng = np.random.RandomState(plan.seed)
  return [
    [int(x) for x in it.prompt_ids[-plan.batching.max_prompt_len :]]
    + [int(x) for x in rng.randint(0, model_cfg.vocab_size, 16)]
    for it in items
  ]
