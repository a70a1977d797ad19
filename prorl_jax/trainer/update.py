"""One RL step's update (`loop.run` drives it, after `collect`): `update` shapes the scores,
computes advantages and the old/reference log-probs and runs the mini-batch updates; `Updated`
is what it returns."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple

import numpy as np

from prorl_jax.algo import losses, packing
from prorl_jax.model import lora
from prorl_jax.parallel import dist
from prorl_jax.records import Group
from prorl_jax.trainer import batch
from prorl_jax.trainer import train_step as ts


def _packed_logprobs(setup, state, b: batch.TrainBatch, plan: packing.Plan):
  """(old, ref, entropy) [B, T] of a padded batch, computed on its packed slabs."""
  outs = []  # device arrays, fetched once after all slabs: no host sync between the passes
  ref_params = lora.reference_params(state.params, state.ref_params)
  for s in packing.slabs(plan, b.arrays(("tokens",)), ("tokens",), setup.pad_id):
    inputs = dist.global_batch({k: s[k] for k in ts.PACKED_MODEL_KEYS}, setup.slab_shardings)
    old, ent = setup.packed_logprobs(state.params, inputs)
    ref, _ = setup.packed_logprobs(ref_params, inputs)
    outs.append((old, ref, ent))
  host = dist.host_tree(outs)
  return tuple(packing.unpack(plan, np.stack([o[i] for o in host])) for i in range(3))


def _with_logprobs(setup, state, b: batch.TrainBatch, plan: packing.Plan | None):
  """`b` with the policy's and the reference's log-probs and the policy's entropy (masked to the
  trained tokens), on packed slabs when `plan` is given."""
  if plan is not None:
    old, ref, ent = _packed_logprobs(setup, state, b, plan)
  else:
    inputs = dist.global_batch(b.arrays(("tokens", "attn_mask")), setup.batch_shardings)
    old, ent = (dist.to_host(x) for x in setup.logprobs(state.params, inputs))
    ref_params = lora.reference_params(state.params, state.ref_params)
    ref = dist.to_host(setup.logprobs(ref_params, inputs)[0])
  m = b.loss_mask_BxT.astype(np.float32)
  return b.replace(old_logp_BxT=old * m, ref_logp_BxT=ref * m, entropy_BxT=ent * m)


def _reduce(pending: list[dict]) -> dict:
  """The metrics of every update of the step, fetched once (no host sync between updates) and
  reduced: *_max by max, *_min by min, actor/skipped summed, the rest averaged."""
  sums = collections.defaultdict(list)
  for m in dist.host_tree(pending):
    for k, v in m.items():
      sums[k].append(float(v))
  out = {}
  for k, v in sums.items():
    if k.endswith("_max"):
      out[k] = max(v)
    elif k.endswith("_min"):
      out[k] = min(v)
    else:
      out[k] = sum(v) if k == "actor/skipped" else float(np.mean(v))
  out["actor/updates"] = len(sums.get("actor/loss", []))
  return out


class Updated(NamedTuple):
  """One step's update: the new TrainState, its metrics, and the value that steers the loop,
  `kl_ref`: the old policy's k2 KL to the reference per trained token, before any update (the
  KL-spike reference reset reads it; the metric actor/kl_ref_old reports it)."""

  state: Any  # TrainState
  metrics: dict
  kl_ref: float


def update(setup, state, groups: list[Group], *, step: int, length_penalty_on: bool) -> Updated:
  """Shaping, advantages, old/ref log-probs and the mini-batch updates of one RL step."""
  r = setup.plan.batching
  metrics = {"length_penalty/on": float(length_penalty_on)}
  order = np.random.RandomState((r.seed, step)).permutation(len(groups))
  groups = [groups[i] for i in order]
  shaped = batch.shape_scores(
    groups, length_penalty_on=length_penalty_on, **dataclasses.asdict(setup.plan.shaping)
  )
  metrics.update(batch.group_metrics(groups, shaped))
  batches, plans = _mini_batches(setup, state, groups)
  a = setup.plan.advantages
  batches, tok_total, kl_ref = _with_advantages(a, batches, groups, shaped, metrics)
  inputs = []  # per mini-batch, made once and trained on every epoch
  if setup.slab_shape:
    metrics["packing/fill"] = float(np.mean([p.fill_fraction for p in plans]))
    metrics["packing/slabs"] = float(sum(p.slabs for p in plans))
    inputs = [_slab_inputs(setup, b, plan) for b, plan in zip(batches, plans)]
  pending = []
  for _ in range(r.epochs):
    for i, b in enumerate(batches):
      if setup.slab_shape:
        state, m = setup.packed_train_step(state, *inputs[i])
      else:
        state, m = setup.train_step(
          state, dist.global_batch(b.arrays(ts.BATCH_KEYS), setup.batch_shardings)
        )
      pending.append(m)  # fetched once after all updates: no host sync between them
  metrics.update(_reduce(pending))
  metrics["response/tokens"] = tok_total
  return Updated(state, metrics, kl_ref)


def _mini_batches(setup, state, groups: list[Group]):
  """The step's mini-batches, each with its old/ref log-probs (all before any update), and
  their packing plans (None each when the run trains on padded micro-batches)."""
  r = setup.plan.batching
  # Only as many token columns as this step needs (rounded to 16: a few compiled shapes).
  p_len = min(r.max_prompt_len, -(-max(len(g.prompt_ids) for g in groups) // 16) * 16)
  r_len = min(r.max_response_len, -(-max(int(g.lengths.max()) for g in groups) // 16) * 16)
  batches, plans = [], []
  for start in range(0, len(groups), r.mini_batch_prompts):
    b = batch.build_batch(
      groups[start : start + r.mini_batch_prompts],
      prompt_len=p_len,
      response_len=max(r_len, 1),
      pad_id=setup.pad_id,
      rows=setup.rows,
    )
    plan = None
    if setup.slab_shape:
      rows, length = setup.slab_shape
      plan = packing.plan(b.attn_mask_BxT, b.loss_mask_BxT, length=length, rows=rows)
    batches.append(_with_logprobs(setup, state, b, plan))
    plans.append(plan)
  return batches, plans


def _with_advantages(a, batches, groups: list[Group], shaped, metrics: dict):
  """The mini-batches with their per-token advantages (`a`: the run's AdvantagePlan), which use
  statistics over the whole post-filter batch; the old policy's entropy and KL to the reference
  added to `metrics`. Returns (batches, trained tokens, that KL)."""
  real = [(b, slice(0, b.real_rows)) for b in batches]
  loss_mask = np.concatenate([b.loss_mask_BxT[rows] for b, rows in real])
  kl = None
  if a.kl_in_reward:  # k1 in the token reward, by the loss's own estimator code
    kl = np.concatenate(
      [losses.kl_penalty(b.old_logp_BxT[rows], b.ref_logp_BxT[rows], "k1", a.kl_clamp, xp=np)
       for b, rows in real]
    )  # fmt: skip
  adv_all = batch.token_advantages(
    a.estimator,
    shaped,
    loss_mask,
    kl_BxT=kl,
    kl_coef=a.kl_coef,
    boost=a.adv_boost,
    correct_PxN=np.stack([g.raw_scores for g in groups]) >= 1.0,
    unbiased=a.adv_whiten_unbiased,
  )
  tok_total = max(float(loss_mask.sum()), 1.0)
  metrics["actor/entropy_old"] = float(sum(b.entropy_BxT.sum() for b in batches) / tok_total)
  kl_ref = float(
    sum(
      losses.kl_penalty(b.old_logp_BxT, b.ref_logp_BxT, "k2", a.kl_clamp, xp=np).sum()
      for b in batches
    )
    / tok_total
  )
  metrics["actor/kl_ref_old"] = kl_ref
  offsets = np.cumsum([0] + [b.real_rows for b in batches])
  out = []
  for i, b in enumerate(batches):
    adv = np.zeros_like(b.old_logp_BxT)
    adv[: b.real_rows] = adv_all[offsets[i] : offsets[i + 1]]
    out.append(b.replace(adv_BxT=adv))
  return out, tok_total, kl_ref


def _slab_inputs(setup, b: batch.TrainBatch, plan: packing.Plan):
  """A mini-batch's packed slabs on the devices and its (tokens, sequences) counts."""
  lm = b.loss_mask_BxT
  counts = (float(lm.sum()), float((lm.sum(axis=1) > 0).sum()))
  slabs = [
    dist.global_batch(s, setup.slab_shardings)
    for s in packing.slabs(plan, b.arrays(ts.PER_TOKEN_KEYS), ts.PER_TOKEN_KEYS, setup.pad_id)
  ]
  return slabs, counts
