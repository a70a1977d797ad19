"""The trainer's steps compiled for a mesh: each `jax.jit` with its input and output shardings
(the update over padded micro-batches, the packed update's pieces, the log-prob passes, the
reference reset), built once per run by `setup`."""

from __future__ import annotations

import functools

import jax
from jax.sharding import NamedSharding

from prorl_jax.model import param_shardings
from prorl_jax.model.presets import ModelConfig
from prorl_jax.parallel import sharding
from prorl_jax.trainer.train_step import (
  BATCH_KEYS,
  PACKED_MODEL_KEYS,
  LossConfig,
  TrainState,
  logprob_step,
  packed_shardings,
  reset_reference,
  state_shardings,
  token_logprobs,
  train_step,
)


def jit_packed_logprob_step(
  model_cfg: ModelConfig, mesh, slab_shape, *, temperature, logit_chunk=256
):
  """(ℓ, entropy) [R, L] of one slab's tokens under `params`."""
  p_sh = param_shardings(model_cfg, mesh)
  sh = packed_shardings(mesh, slab_shape)

  def fn(params, slab):
    params = jax.lax.stop_gradient(params)
    return token_logprobs(model_cfg, params, slab, temperature, logit_chunk, mesh)

  return jax.jit(
    fn,
    in_shardings=(p_sh, {k: sh[k] for k in PACKED_MODEL_KEYS}),
    out_shardings=(sh["tokens"], sh["tokens"]),
  )


def batch_shardings(mesh, batch_shape):
  spec = sharding.batch_spec(batch_shape, mesh)
  return {k: NamedSharding(mesh, spec) for k in BATCH_KEYS}


def jit_train_step(
  model_cfg: ModelConfig,
  tx,
  lc: LossConfig,
  mesh,
  batch_shape,
  *,
  shardings: TrainState | None = None,
):
  """train_step jitted once: state and batch in their shardings, state donated. `shardings` are
  the state's (`state_shardings`; computed here when not given)."""
  st_sh = state_shardings(model_cfg, tx, mesh) if shardings is None else shardings
  fn = functools.partial(train_step, model_cfg=model_cfg, tx=tx, lc=lc, mesh=mesh)
  return jax.jit(
    fn,
    in_shardings=(st_sh, batch_shardings(mesh, batch_shape)),
    out_shardings=(st_sh, sharding.replicated(mesh)),
    donate_argnums=(0,),
  )


def jit_logprob_step(
  model_cfg: ModelConfig,
  mesh,
  batch_shape,
  *,
  temperature: float,
  micro_batches: int = 1,
  logit_chunk: int = 256,
):
  """The jitted log-prob pass over a padded batch of `batch_shape` [B, T] on `mesh`: (token
  log-probs at `temperature`, entropies), both [B, T]."""
  p_sh = param_shardings(model_cfg, mesh)
  b_sh = batch_shardings(mesh, batch_shape)
  fn = functools.partial(
    logprob_step,
    model_cfg=model_cfg,
    temperature=temperature,
    micro_batches=micro_batches,
    logit_chunk=logit_chunk,
    mesh=mesh,
  )
  out = b_sh["tokens"]
  return jax.jit(
    fn, in_shardings=(p_sh, {"tokens": out, "attn_mask": out}), out_shardings=(out, out)
  )


def jit_reset_reference(
  model_cfg: ModelConfig, tx, mesh, reinit_optimizer: bool, *, shardings: TrainState | None = None
):
  """`reset_reference` jitted once on the state's `shardings` (computed when not given): the
  state donated but for its params, which the inline engine may be generating with (it is
  offered the trainer's own arrays); the reset leaves them valid, at the cost of writing the
  new state's params as a copy (one params-sized buffer more while the reset runs)."""
  jitted = reset_reference_jit(model_cfg, tx, mesh, reinit_optimizer, shardings=shardings)
  return lambda state: jitted(state.params, state.replace(params=None))


def reset_reference_jit(model_cfg, tx, mesh, reinit_optimizer: bool, *, shardings=None):
  """The jitted program of `jit_reset_reference`: (params, the state without them) -> state."""
  st_sh = state_shardings(model_cfg, tx, mesh) if shardings is None else shardings

  def reset(params, rest: TrainState) -> TrainState:
    return reset_reference(rest.replace(params=params), tx, reinit_optimizer)

  return jax.jit(
    reset,
    in_shardings=(st_sh.params, st_sh.replace(params=None)),
    out_shardings=st_sh,
    donate_argnums=(1,),
  )
