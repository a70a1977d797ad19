"""Packed sequences: whole sequences of a padded [B, T] batch laid into fixed [M, R, L] slabs.

A mini-batch is built padded first (prompt left-padded, response right-padded: `trainer.batch`); a
`Plan` then places each sequence's real tokens (prompt + response, contiguous) into rows of L
tokens by first-fit decreasing. R rows make one slab, one micro-batch of the trainer: R is the
number of devices the batch is split over, so L is each device's token budget. Only the number
of slabs M changes from step to step, never their shape.

Inside a row each sequence gets its segment id (1, 2, ... ; 0 is padding) and positions from 0,
so RoPE restarts and attention stays inside the sequence (`model.attention`). Per-token arrays
move between the layouts with `pack` / `unpack`; `seq_tokens` gives every token the number of
trained tokens of its sequence, which is what the sequence-mean losses need.

Legend: B padded rows, T padded width, M slabs (the micro-batches), R rows per slab, L tokens
per row.
"""

from __future__ import annotations

import dataclasses

import numpy as np


class PackingError(ValueError):
  pass


def first_fit_decreasing(lengths, capacity: int) -> list[list[int]]:
  """Bins (lists of indices into `lengths`) of total length <= capacity: longest first, each
  into the first bin with room. Uses at most 11/9·OPT + 6/9 bins."""
  order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
  bins: list[list[int]] = []
  room: list[int] = []
  for i in order:
    n = int(lengths[i])
    if n > capacity:
      raise PackingError(f"a sequence of {n} tokens does not fit a row of {capacity}")
    for j, free in enumerate(room):
      if n <= free:
        bins[j].append(i)
        room[j] -= n
        break
    else:
      bins.append([i])
      room.append(capacity - n)
  return bins


@dataclasses.dataclass(frozen=True)
class Plan:
  """Where every real token of a padded [B, T] batch goes in [M, R, L] slabs."""

  padded_shape: tuple[int, int]
  slabs: int
  rows: int
  length: int
  src: tuple[np.ndarray, np.ndarray]  # (row, column) in the padded batch, one per token
  dst: tuple[np.ndarray, np.ndarray, np.ndarray]  # (slab, row, column) in the slabs
  segment_ids: np.ndarray  # [M, R, L] int32
  positions: np.ndarray  # [M, R, L] int32
  seq_tokens: np.ndarray  # [M, R, L] float32: trained tokens of the token's sequence (1 on pads)

  @property
  def real_tokens(self) -> int:
    return len(self.src[0])

  @property
  def fill_fraction(self) -> float:
    """Fraction of slab slots holding a real token."""
    return self.real_tokens / max(self.slabs * self.rows * self.length, 1)


def plan(attn_mask_BxT, loss_mask_BxT, *, length: int, rows: int) -> Plan:
  """A packing of the rows that have trained tokens (rows without any are left out: they add
  nothing to any loss). Each row's real tokens must be contiguous (left/right-padded rows)."""
  attn = np.asarray(attn_mask_BxT) > 0
  loss = np.asarray(loss_mask_BxT) > 0
  b, t = attn.shape
  keep = np.nonzero(loss.any(axis=1))[0]
  lens = attn[keep].sum(axis=1)
  starts = attn[keep].argmax(axis=1)
  for i, r in enumerate(keep):
    if not attn[r, starts[i] : starts[i] + lens[i]].all():
      raise PackingError(f"row {r} of the padded batch has a gap in its tokens")
  try:
    bins = first_fit_decreasing(lens, length)
  except PackingError as e:
    raise PackingError(f"{e}: raise rollout.token_budget to at least {int(lens.max())}") from None
  s = max(1, -(-len(bins) // rows))
  seg = np.zeros((s, rows, length), np.int32)
  pos = np.zeros((s, rows, length), np.int32)
  seq_tok = np.ones((s, rows, length), np.float32)
  src_r, src_c, dst_s, dst_r, dst_c = [], [], [], [], []
  for j, members in enumerate(bins):
    slab, row = divmod(j, rows)
    at = 0
    for k, i in enumerate(members):
      n, r, c0 = int(lens[i]), int(keep[i]), int(starts[i])
      seg[slab, row, at : at + n] = k + 1
      pos[slab, row, at : at + n] = np.arange(n)
      seq_tok[slab, row, at : at + n] = max(int(loss[r].sum()), 1)
      src_r.append(np.full(n, r))
      src_c.append(np.arange(c0, c0 + n))
      dst_s.append(np.full(n, slab))
      dst_r.append(np.full(n, row))
      dst_c.append(np.arange(at, at + n))
      at += n
  cat = lambda xs: np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)  # noqa: E731
  return Plan(
    (b, t),
    s,
    rows,
    length,
    (cat(src_r), cat(src_c)),
    (cat(dst_s), cat(dst_r), cat(dst_c)),
    seg,
    pos,
    seq_tok,
  )


def pack(p: Plan, x_BxT, pad_value=0) -> np.ndarray:
  """[B, T] per-token values -> [M, R, L] (slots without a token hold `pad_value`)."""
  x = np.asarray(x_BxT)
  out = np.full((p.slabs, p.rows, p.length), pad_value, x.dtype)
  out[p.dst] = x[p.src]
  return out


def unpack(p: Plan, y_MxRxL, pad_value=0) -> np.ndarray:
  """[M, R, L] -> [B, T] (padding and left-out rows hold `pad_value`)."""
  y = np.asarray(y_MxRxL)
  out = np.full(p.padded_shape, pad_value, y.dtype)
  out[p.src] = y[p.dst]
  return out


MODEL_KEYS = ("tokens", "positions", "segment_ids")


def slabs(p: Plan, batch: dict, keys, pad_id: int = 0) -> list[dict]:
  """The packed micro-batches: one dict of [R, L] arrays per slab, with `keys` of the padded
  batch packed and positions, segment ids and seq_tokens added."""
  packed = {k: pack(p, batch[k], pad_id if k == "tokens" else 0) for k in keys if k in batch}
  packed.update(positions=p.positions, segment_ids=p.segment_ids, seq_tokens=p.seq_tokens)
  return [{k: v[i] for k, v in packed.items()} for i in range(p.slabs)]
