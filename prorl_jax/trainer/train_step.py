"""The trainer's core: `train_step(state, batch) -> (state, metrics)` and `logprob_step`.

Pure functions, jitted once with in/out shardings and donation on any (data, fsdp, tensor) mesh.
A mini-batch of B sequences is split into M micro-batches (gradient accumulation with
`lax.scan`); the loss normaliser is the global token (and sequence) count of the whole
mini-batch, fixed before accumulation, so M never changes the update.

Batch layout (all [B, T], prompt left-padded then response right-padded, T = prompt + response):
  tokens      int32 token ids
  attn_mask   1 on real tokens (prompt and response)
  loss_mask   1 on response tokens that are trained on
  old_logp    ℓold of tokens[t] (recomputed by `logprob_step`), 0 elsewhere
  ref_logp    ℓref of tokens[t]
  gen_logp    the inference engine's log-prob of tokens[t] (for TIS / ICE-POP)
  adv         token advantages
Per-token arrays hold at index t the value for token t (predicted from position t−1).

Packed layout (`packing`): micro-batches are fixed [R, L] slabs of whole sequences with
`positions`, `segment_ids` and `seq_tokens` instead of `attn_mask`; `packed_train_step` runs
one jitted accumulation per slab and one jitted update, so the number of slabs may vary.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from prorl_jax.algo import losses
from prorl_jax.model import head_weight, hidden_states, init_params, lora, param_shardings
from prorl_jax.model.presets import ModelConfig
from prorl_jax.parallel import sharding

BATCH_KEYS = ("tokens", "attn_mask", "loss_mask", "old_logp", "ref_logp", "gen_logp", "adv")
PER_TOKEN_KEYS = ("tokens", "loss_mask", "old_logp", "ref_logp", "gen_logp", "adv")
PACKED_KEYS = PER_TOKEN_KEYS + ("positions", "segment_ids", "seq_tokens")
PACKED_MODEL_KEYS = ("tokens", "positions", "segment_ids")
FLOAT_KEYS = ("old_logp", "ref_logp", "gen_logp", "adv", "seq_tokens")  # the rest are int32


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # optimizer updates done
  params: Any
  opt_state: Any
  ref_params: Any
  skipped: jax.Array  # updates skipped for a non-finite loss or gradient


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Everything `train_step` needs besides the model: explicit values, no config object."""

  temperature: float = 1.0
  clip_low: float = 0.2
  clip_high: float = 0.28
  dual_clip: float = 0.0
  log_ratio_clamp: float = 20.0
  agg: str = "token-mean"
  norm_const: float = 0.0
  kl_kind: str = "k2"
  kl_coef: float = 1e-4
  kl_clamp: float = 10.0
  entropy_coef: float = 0.0
  is_correction: str = "icepop"
  tis_cap: float = 2.0
  icepop_low: float = 0.5
  icepop_high: float = 5.0
  micro_batches: int = 1
  logit_chunk: int = 256


def make_optimizer(
  lr: float,
  *,
  warmup_steps: int = 0,
  weight_decay: float = 0.01,
  b1: float = 0.9,
  b2: float = 0.999,
  eps: float = 1e-8,
  grad_clip: float = 1.0,
) -> optax.GradientTransformation:
  """Global-norm clip -> AdamW; constant learning rate, or linear warm-up then constant."""
  schedule = (
    lr
    if warmup_steps == 0
    else optax.join_schedules(
      [optax.linear_schedule(0.0, lr, warmup_steps), optax.constant_schedule(lr)], [warmup_steps]
    )
  )
  return optax.chain(
    optax.clip_by_global_norm(grad_clip),
    optax.adamw(schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay),
  )


# ----------------------------------------------------------------------------- shardings


def state_shardings(model_cfg: ModelConfig, tx, mesh) -> TrainState:
  """The shardings of a `TrainState` on `mesh`: params by their logical axes, the optimizer state
  like its params, the scalars replicated."""
  p_sh = param_shardings(model_cfg, mesh)
  abstract_params = jax.eval_shape(lambda: init_params(model_cfg, jax.random.PRNGKey(0)))
  abstract_opt = jax.eval_shape(tx.init, abstract_params)
  rep = sharding.replicated(mesh)
  masked = lambda x: isinstance(x, optax.MaskedNode)  # noqa: E731 (the frozen base, with LoRA)
  opt_sh = optax.tree_map_params(
    tx,
    lambda x, s: x if masked(x) else s,
    abstract_opt,
    p_sh,
    transform_non_params=lambda _: rep,
    is_leaf=masked,
  )
  ref_sh = lora.reference(p_sh)
  return TrainState(step=rep, params=p_sh, opt_state=opt_sh, ref_params=ref_sh, skipped=rep)


def _new_state(params, tx):
  return TrainState(
    step=jnp.zeros((), jnp.int32),
    params=params,
    opt_state=tx.init(params),
    ref_params=lora.reference(params),
    skipped=jnp.zeros((), jnp.int32),
  )


def create_train_state(
  model_cfg: ModelConfig, tx, mesh, rng, params=None, *, shardings: TrainState | None = None
) -> TrainState:
  """A sharded TrainState; random params are created in place, given params are re-laid out.

  `rng` seeds the random params (unused when params are given). The reference policy starts
  equal to the policy (a separate buffer). `shardings`: `state_shardings(...)` when not given.
  """
  sh = state_shardings(model_cfg, tx, mesh) if shardings is None else shardings
  if params is None:
    init = lambda r: _new_state(init_params(model_cfg, r), tx)  # noqa: E731
    return jax.jit(init, out_shardings=sh)(rng)
  return jax.jit(lambda p: _new_state(p, tx), in_shardings=(sh.params,), out_shardings=sh)(params)


# ----------------------------------------------------------------------------- the step


def token_logprobs(model_cfg, params, batch, temperature, chunk, mesh):
  """ℓ and entropy of tokens[t] for t >= 1 (index 0 is 0), from logits/temperature."""
  if "segment_ids" in batch:
    h_BxTxD = hidden_states(
      model_cfg,
      params,
      batch["tokens"],
      mesh=mesh,
      segment_ids_BxT=batch["segment_ids"],
      positions_BxT=batch["positions"],
    )
  else:
    h_BxTxD = hidden_states(model_cfg, params, batch["tokens"], batch["attn_mask"], mesh)
  lp, ent = losses.token_logprobs(
    h_BxTxD[:, :-1], head_weight(model_cfg, params), batch["tokens"][:, 1:], temperature, chunk
  )
  pad = lambda x: jnp.pad(x, ((0, 0), (1, 0)))  # noqa: E731
  return pad(lp), pad(ent)


def _micro_loss(params, mb, counts, model_cfg, lc: LossConfig, mesh):
  logp, ent = token_logprobs(model_cfg, params, mb, lc.temperature, lc.logit_chunk, mesh)
  mask = mb["loss_mask"].astype(jnp.float32)
  num_tokens, num_seqs = counts
  is_w, is_metrics = losses.importance_weights(
    mb["old_logp"],
    mb["gen_logp"],
    mask,
    lc.is_correction,
    cap=lc.tis_cap,
    low=lc.icepop_low,
    high=lc.icepop_high,
    num_tokens=num_tokens,
  )
  loss, metrics = losses.rl_loss(
    logp,
    ent,
    mb["old_logp"],
    mb["ref_logp"],
    mb["adv"],
    mask,
    clip_low=lc.clip_low,
    clip_high=lc.clip_high,
    dual_clip=lc.dual_clip or None,
    agg=lc.agg,
    is_weights=None if lc.is_correction == "none" else is_w,
    num_tokens=num_tokens,
    num_seqs=num_seqs,
    norm_const=lc.norm_const or None,
    seq_tokens=mb.get("seq_tokens"),
    log_ratio_clamp=lc.log_ratio_clamp,
    kl_kind=lc.kl_kind,
    kl_coef=lc.kl_coef,
    kl_clamp=lc.kl_clamp,
    entropy_coef=lc.entropy_coef,
  )
  metrics.update(is_metrics)
  return loss, metrics


_METRIC_INIT = {"max": -jnp.inf, "min": jnp.inf}  # metrics named *_max / *_min reduce so


def _reduce_metrics(acc, new):
  def combine(k, a, b):
    if k.endswith("_max"):
      return jnp.maximum(a, b)
    if k.endswith("_min"):
      return jnp.minimum(a, b)
    return a + b

  return {k: combine(k, acc[k], new[k]) for k in acc}


def split_micro(x_BxT, m: int, mesh=None):
  """[B, ...] -> [M, B/M, ...]: micro-batch i takes rows i, i+M, ...; each stays device-spread."""
  b = x_BxT.shape[0]
  if b % m:
    raise ValueError(f"mini-batch of {b} sequences is not divisible into {m} micro-batches")
  out = x_BxT.reshape((b // m, m) + x_BxT.shape[1:]).swapaxes(0, 1)
  if mesh is not None:
    spec = P(None, *sharding.batch_spec(out.shape[1:], mesh))
    out = jax.lax.with_sharding_constraint(out, NamedSharding(mesh, spec))
  return out


def train_step(
  state: TrainState, batch: dict, *, model_cfg: ModelConfig, tx, lc: LossConfig, mesh=None
) -> tuple[TrainState, dict]:
  """One optimizer update on a mini-batch; a non-finite loss or gradient skips it."""
  mask = batch["loss_mask"].astype(jnp.float32)
  counts = (jnp.sum(mask), jnp.sum(jnp.sum(mask, axis=-1) > 0).astype(jnp.float32))
  micro = {k: split_micro(batch[k], lc.micro_batches, mesh) for k in BATCH_KEYS}
  grad_fn = jax.value_and_grad(_micro_loss, has_aux=True)

  def body(carry, mb):
    g_acc, m_acc = carry
    (_, metrics), g = grad_fn(state.params, mb, counts, model_cfg, lc, mesh)
    return (jax.tree.map(jnp.add, g_acc, g), _reduce_metrics(m_acc, metrics)), None

  shapes = jax.eval_shape(
    lambda mb: grad_fn(state.params, mb, counts, model_cfg, lc, mesh)[0][1],
    jax.tree.map(lambda x: x[0], micro),
  )
  m0 = {
    k: jnp.full(v.shape, _METRIC_INIT.get(k.rsplit("_", 1)[-1], 0.0), v.dtype)
    for k, v in shapes.items()
  }
  g0 = jax.tree.map(jnp.zeros_like, state.params)
  (grads, metrics), _ = jax.lax.scan(body, (g0, m0), micro)
  return apply_grads(state, (grads, metrics), counts, tx=tx)


def apply_grads(state: TrainState, acc, counts, *, tx) -> tuple[TrainState, dict]:
  """The optimizer update from accumulated (grads, metrics); skipped when not finite."""
  grads, metrics = acc
  metrics = dict(metrics)
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(metrics["actor/loss"]) & jnp.isfinite(grad_norm)
  updates, new_opt = tx.update(grads, state.opt_state, state.params)
  new_params = optax.apply_updates(state.params, updates)
  keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
  new_state = state.replace(
    step=state.step + finite.astype(jnp.int32),
    params=keep(new_params, state.params),
    opt_state=keep(new_opt, state.opt_state),
    skipped=state.skipped + (1 - finite.astype(jnp.int32)),
  )
  metrics.update(
    {
      "actor/grad_norm": grad_norm,
      "actor/skipped": 1.0 - finite.astype(jnp.float32),
      "actor/tokens": counts[0],
      "actor/seqs": counts[1],
    }
  )
  return new_state, metrics


def accumulate_slab(
  params, acc, slab: dict, counts, *, model_cfg: ModelConfig, lc: LossConfig, mesh
):
  """acc + (gradient, metrics) of one packed micro-batch; counts are the mini-batch's."""
  (_, metrics), g = jax.value_and_grad(_micro_loss, has_aux=True)(
    params, slab, counts, model_cfg, lc, mesh
  )
  g_acc, m_acc = acc
  return jax.tree.map(jnp.add, g_acc, g), _reduce_metrics(m_acc, metrics)


def empty_acc(params, slab_shapes: dict, counts, *, model_cfg, lc, mesh):
  """Zero gradients and the metrics' neutral values, for `accumulate_slab`."""
  shapes = jax.eval_shape(
    lambda p, s: _micro_loss(p, s, counts, model_cfg, lc, mesh)[1], params, slab_shapes
  )
  m0 = {
    k: jnp.full(v.shape, _METRIC_INIT.get(k.rsplit("_", 1)[-1], 0.0), v.dtype)
    for k, v in shapes.items()
  }
  return jax.tree.map(jnp.zeros_like, params), m0


def packed_shardings(mesh, slab_shape) -> dict:
  spec = sharding.batch_spec(slab_shape, mesh)
  return {k: NamedSharding(mesh, spec) for k in PACKED_KEYS}


class PackedTrainStep:
  """`(state, slabs, counts) -> (state, metrics)`: one update over a mini-batch given as any
  number of [R, L] slabs. Three compiled functions of fixed shapes (zero accumulators, add one
  slab, apply) — a new slab count never recompiles. counts = (trained tokens, sequences) of the
  whole mini-batch, so the result equals the padded step's."""

  def __init__(
    self, model_cfg: ModelConfig, tx, lc: LossConfig, mesh, slab_shape, *, shardings=None
  ):
    st_sh = state_shardings(model_cfg, tx, mesh) if shardings is None else shardings
    self.slab_sh = packed_shardings(mesh, slab_shape)
    rep = sharding.replicated(mesh)
    kw = dict(model_cfg=model_cfg, lc=lc, mesh=mesh)
    slab_shapes = {
      k: jax.ShapeDtypeStruct(slab_shape, jnp.float32 if k in FLOAT_KEYS else jnp.int32)
      for k in PACKED_KEYS
    }
    acc_sh = (st_sh.params, rep)
    self._zeros = jax.jit(
      lambda p, c: empty_acc(p, slab_shapes, c, **kw),
      in_shardings=(st_sh.params, rep),
      out_shardings=acc_sh,
    )
    self._add = jax.jit(
      functools.partial(accumulate_slab, **kw),
      in_shardings=(st_sh.params, acc_sh, self.slab_sh, rep),
      out_shardings=acc_sh,
      donate_argnums=(1,),
    )
    self._apply = jax.jit(
      functools.partial(apply_grads, tx=tx),
      in_shardings=(st_sh, acc_sh, rep),
      out_shardings=(st_sh, rep),
      donate_argnums=(0,),
    )

  def __call__(self, state: TrainState, slabs: list[dict], counts) -> tuple[TrainState, dict]:
    counts = tuple(jnp.asarray(c, jnp.float32) for c in counts)
    acc = self._zeros(state.params, counts)
    for s in slabs:
      acc = self._add(state.params, acc, {k: s[k] for k in PACKED_KEYS}, counts)
    return self._apply(state, acc, counts)


def logprob_step(
  params,
  batch: dict,
  *,
  model_cfg: ModelConfig,
  temperature: float,
  micro_batches: int = 1,
  logit_chunk: int = 256,
  mesh=None,
):
  """(ℓ, entropy) [B, T] of the batch's tokens under `params` at `temperature`; no gradient."""
  keys = ("tokens", "attn_mask")
  micro = {k: split_micro(batch[k], micro_batches, mesh) for k in keys}
  params = jax.lax.stop_gradient(params)
  lp, ent = jax.lax.map(
    lambda mb: token_logprobs(model_cfg, params, mb, temperature, logit_chunk, mesh), micro
  )
  unsplit = lambda x: x.swapaxes(0, 1).reshape(batch["tokens"].shape)  # noqa: E731
  return unsplit(lp), unsplit(ent)


def reset_reference(state: TrainState, tx, reinit_optimizer: bool = False) -> TrainState:
  """ref ← current policy (with LoRA: its adapters; the base is shared); the optimizer state is
  kept (ProRL v2) or re-initialised (v1)."""
  state = state.replace(ref_params=lora.reference(state.params))
  if reinit_optimizer:
    state = state.replace(opt_state=tx.init(state.params))
  return state


# ----------------------------------------------------------------------------- jit helpers
