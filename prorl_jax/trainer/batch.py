"""One RL iteration's host-side data work: results -> groups -> shaped scores -> train batch.

Legend: P prompt groups, N responses per prompt, B = P·N rows (prompt-major), Tp prompt slots
(left-padded), Tr response slots (right-padded), T = Tp + Tr.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from flax import struct

from prorl_jax.algo import advantages, shaping
from prorl_jax.records import Group, Request, Result


def results_to_groups(rid: str, request: Request, result: Result) -> list[Group]:
  """One group per prompt of a committed request (rows are prompt-major)."""
  n = request.n
  groups = []
  for i, (prompt, meta) in enumerate(zip(request.prompts, request.meta)):
    rows = slice(i * n, (i + 1) * n)
    groups.append(
      Group(
        uid=meta.uid or f"{rid}:{i}",
        prompt_ids=np.asarray(prompt),
        data_source=meta.data_source,
        tokens=result.tokens[rows],
        gen_logp=result.logprobs[rows],
        lengths=result.lengths[rows],
        stopped=result.stopped[rows],
        raw_scores=result.scores[rows],
        verifier_failed=result.verifier_failed[rows],
        policy_version=result.policy_version,
      )
    )
  return groups


def without_failed_samples(group: Group) -> Group | None:
  """A group whose verifier failed on some samples (a fault of the verifier, not a judgement),
  with those samples dropped from the learning signal: their raw score is the mean of the
  group's other samples (so the group mean, and whether the group is informative, are those
  of the judged samples alone) and `build_batch` gives them no loss tokens. None when fewer than
  two samples were judged: no baseline to learn against."""
  failed = np.asarray(group.verifier_failed, bool)
  if not failed.any():
    return group
  if (~failed).sum() < 2:
    return None
  raw = np.asarray(group.raw_scores, np.float64).copy()
  raw[failed] = raw[~failed].mean()
  return dataclasses.replace(group, raw_scores=raw.astype(np.asarray(group.raw_scores).dtype))


def _failed_PxN(groups: list[Group]) -> np.ndarray:
  return np.stack([np.asarray(g.verifier_failed, bool) for g in groups])


def shape_scores(
  groups: list[Group],
  *,
  max_len: int,
  truncation_penalty: float,
  length_penalty_on: bool,
  lp_min: float,
  lp_max: float,
  overlong_buffer: int,
  overlong_factor: float,
) -> np.ndarray:
  """Shaped scores [P, N]: truncation penalty, then (when on) the cosine length penalty on
  correct responses, then the optional DAPO overlong term."""
  raw = np.stack([g.raw_scores for g in groups]).astype(np.float64)
  lengths = np.stack([g.lengths for g in groups])
  truncated = ~np.stack([g.stopped for g in groups])
  s = shaping.truncation_penalty(raw, truncated, truncation_penalty)
  if length_penalty_on:
    s = shaping.length_penalty(
      s, (raw >= 1.0) & ~truncated, lengths, max_len, r_min=lp_min, r_max=lp_max
    )
  if overlong_buffer:
    s = shaping.dapo_overlong(s, lengths, max_len, overlong_buffer, overlong_factor)
  failed = _failed_PxN(groups)
  for i in np.flatnonzero(failed.any(axis=1)):  # dropped samples: the judged samples' mean
    s[i, failed[i]] = s[i, ~failed[i]].mean()
  return s


@struct.dataclass
class TrainBatch:
  """One mini-batch of B rows (P·N real, prompt-major, then empty rows up to B) and T = Tp + Tr
  token columns (prompt left-padded, response right-padded), on the host. `build_batch` makes its
  layout; the update fills the log-probs and then the advantages (`replace`: a new record, never
  one that gains keys). `arrays(keys)` is the dict the compiled steps take."""

  tokens_BxT: np.ndarray  # int32
  attn_mask_BxT: np.ndarray  # int32: 1 on prompt and response tokens
  loss_mask_BxT: np.ndarray  # int32: 1 on the response tokens trained on
  gen_logp_BxT: np.ndarray  # float32: the sampling engine's log-probs
  old_logp_BxT: np.ndarray | None = None  # float32: the policy's before the update
  ref_logp_BxT: np.ndarray | None = None  # float32: the reference policy's
  entropy_BxT: np.ndarray | None = None  # float32: the policy's, before the update
  adv_BxT: np.ndarray | None = None  # float32: per-token advantages
  real_rows: int = struct.field(pytree_node=False, default=0)  # P·N

  def arrays(self, keys) -> dict[str, np.ndarray]:
    """{key: [B, T]} under the compiled steps' names ("tokens" is `tokens_BxT`)."""
    out = {k: getattr(self, f"{k}_BxT") for k in keys}
    missing = [k for k, v in out.items() if v is None]
    if missing:
      raise ValueError(f"TrainBatch has no {missing} yet: the update fills them before use")
    return out


def build_batch(
  groups: list[Group], *, prompt_len: int, response_len: int, pad_id: int, rows: int
) -> TrainBatch:
  """The token layout [B, T] of `groups` for the train step, padded with empty rows up to
  `rows`."""
  t = prompt_len + response_len
  tokens = np.full((rows, t), pad_id, np.int32)
  attn = np.zeros((rows, t), np.int32)
  loss = np.zeros((rows, t), np.int32)
  gen_logp = np.zeros((rows, t), np.float32)
  r = 0
  for g, failed in zip(groups, _failed_PxN(groups) if groups else []):
    p = g.prompt_ids[-prompt_len:]
    for j in range(len(g.lengths)):
      length = int(g.lengths[j])
      tokens[r, prompt_len - len(p) : prompt_len] = p
      attn[r, prompt_len - len(p) : prompt_len + length] = 1
      tokens[r, prompt_len : prompt_len + length] = g.tokens[j, :length]
      loss[r, prompt_len : prompt_len + length] = 0 if failed[j] else 1
      gen_logp[r, prompt_len : prompt_len + length] = g.gen_logp[j, :length]
      r += 1
  attn[r:, prompt_len - 1] = 1  # empty rows see one token: finite, never trained
  return TrainBatch(tokens, attn, loss, gen_logp, real_rows=r)


def token_advantages(
  estimator: str,
  shaped_PxN,
  loss_mask_BxT,
  *,
  kl_BxT=None,
  kl_coef: float = 0.0,
  boost: float = 0.0,
  correct_PxN=None,
  unbiased: bool = False,
):
  """Advantages on the [B, T] layout; rows beyond P·N (padding) get 0."""
  p, n = shaped_PxN.shape
  b = p * n
  adv = np.zeros(loss_mask_BxT.shape, np.float32)
  if b == 0:
    return adv
  adv[:b] = np.asarray(
    advantages.compute_advantages(
      estimator,
      shaped_PxN,
      loss_mask_BxT[:b].astype(np.float32),
      kl_BxT=None if kl_BxT is None else kl_BxT[:b],
      kl_coef=kl_coef,
      boost=boost,
      correct_PxN=correct_PxN,
      unbiased=unbiased,
    )
  )
  return adv


def group_metrics(groups: list[Group], shaped: np.ndarray) -> dict:
  """The step's reward, pass-rate, response-length and truncation metrics over the groups trained
  on (shaped: [P, N])."""
  raw = np.stack([g.raw_scores for g in groups])  # dropped samples hold their group's mean
  lengths = np.stack([g.lengths for g in groups])
  stopped = np.stack([g.stopped for g in groups])
  return {
    "reward/raw_mean": float(raw.mean()),
    "reward/shaped_mean": float(shaped.mean()),
    "reward/pass_rate": float((raw >= 1.0).mean()),
    "response/length_mean": float(lengths.mean()),
    "response/length_max": float(lengths.max()),
    "response/truncation_rate": float(1.0 - stopped.mean()),
  }
