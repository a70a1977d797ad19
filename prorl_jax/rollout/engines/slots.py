"""The host side of continuous batching (`paged.PagedEngine`): the page pool's reference counts,
the slot table, the result rows and the prefill work records. Page 0 is the trash page: an idle
slot's writes land there. Legend: S slots, M pages per slot's table.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines import paged_kernels as kernels


class PagePool:
  """Host-side page accounting with reference counts (a group's shared prompt pages are held by
  each of its sequences). Page 0 is never handed out."""

  def __init__(self, pages: int):
    self.refs = np.zeros(pages, np.int32)
    self.refs[0] = 1  # the trash page
    self.free = list(range(pages - 1, 0, -1))
    self.peak = 0

  def take(self) -> int:
    if not self.free:
      raise MemoryError("the KV page pool is exhausted; give PagedConfig.pages more pages")
    p = self.free.pop()
    self.refs[p] = 1
    self.peak = max(self.peak, self.in_use)
    return p

  def share(self, p: int) -> None:
    self.refs[p] += 1

  def release(self, p: int) -> None:
    self.refs[p] -= 1
    if self.refs[p] == 0:
      self.free.append(p)

  @property
  def in_use(self) -> int:
    return len(self.refs) - 1 - len(self.free)


@dataclasses.dataclass
class Ready:
  """A sequence admitted (its prompt prefilled, its first token drawn) and waiting for a slot:
  its result row, first token, the pages it holds (the prompt's full pages shared, its own copy
  of the partial last one) and its first cache position (the prompt's length)."""

  row: int
  first: int
  pages: list[int]
  length: int


class Outputs:
  """A call's result rows (prompt-major), written token by token."""

  def __init__(self, rows: int, sp: SamplingParams, pad_id: int, max_new):
    n_new = sp.max_new_tokens
    self.tokens = np.full((rows, n_new), pad_id, np.int32)
    self.logprobs = np.zeros((rows, n_new), np.float32)
    self.versions = np.full((rows, n_new), -1, np.int32)
    self.lengths = np.zeros(rows, np.int32)
    self.stopped = np.zeros(rows, bool)
    self.caps = np.full(rows, n_new, np.int32)
    if max_new is not None:
      self.caps = np.minimum(np.asarray(max_new, np.int32), n_new)
    self.stop = set(sp.stop_token_ids)

  def emit(self, row: int, t: int, lp: float, version: int) -> bool:
    """Writes the row's next token; True when the row is done (a stop token or its cap)."""
    i = int(self.lengths[row])
    self.tokens[row, i], self.logprobs[row, i], self.versions[row, i] = t, lp, version
    self.lengths[row] = i + 1
    if t in self.stop:
      self.stopped[row] = True
    return t in self.stop or i + 1 >= self.caps[row]


class SlotState(NamedTuple):
  """The decode slots' state on the device, one [S] array each (a pytree: it crosses the jit
  boundary by field, not by string key)."""

  pos: Any  # int32: the next cache position
  tok: Any  # int32: the last token
  ngen: Any  # int32: tokens drawn so far
  cap: Any  # int32: the sequence's token limit
  active: Any  # bool: the slot decodes
  seq: Any  # int32: the sequence id (a row of the request)


class SlotTable:
  """The decode slots on the host: per slot its sequence's next cache position, last token,
  tokens drawn, token cap, whether it decodes, its row (`seq`), its page table row and the pages
  it holds a reference to."""

  FIELDS = SlotState._fields

  def __init__(self, slots: int, width: int):
    self.pos, self.tok, self.ngen, self.cap = (np.zeros(slots, np.int32) for _ in range(4))
    self.active, self.seq = np.zeros(slots, bool), np.zeros(slots, np.int32)
    self.table = np.zeros((slots, width), np.int32)
    self.held: list[list[int]] = [[] for _ in range(slots)]

  def free(self) -> np.ndarray:
    return np.flatnonzero(~self.active)

  def admit(self, slot: int, r: Ready, cap: int, pool: PagePool) -> None:
    """Sequence `r` takes `slot`: the slot's old pages go back to the pool."""
    for p in self.held[slot]:
      pool.release(p)
    self.held[slot] = r.pages
    self.table[slot] = 0
    self.table[slot, : len(r.pages)] = r.pages
    self.pos[slot], self.tok[slot], self.ngen[slot] = r.length, r.first, 1
    self.active[slot], self.seq[slot], self.cap[slot] = True, r.row, cap

  def grow(self, pool: PagePool, ahead: int, page: int) -> None:
    """Pages for every active slot's next `ahead` writes."""
    for slot in np.flatnonzero(self.active):
      need = -(-(self.pos[slot] + ahead) // page)
      while len(self.held[slot]) < need:
        p = pool.take()
        self.table[slot, len(self.held[slot])] = p
        self.held[slot].append(p)

  def order(self) -> None:
    """Longest first, idle slots last: each run of slots attends only as far as its own longest
    (slot order changes nothing else: a sequence's draws are keyed by its row)."""
    order = np.lexsort((-self.pos, ~self.active))
    for name in self.FIELDS:
      setattr(self, name, getattr(self, name)[order])
    self.table = self.table[order]
    self.held = [self.held[i] for i in order]

  def width(self) -> int:
    """Table columns a decode call reads: the longest active slot's pages, rounded up to a power
    of two of at least one attention block (a few compiled widths)."""
    live = max(len(self.held[i]) for i in np.flatnonzero(self.active))
    return min(max(1 << (live - 1).bit_length(), kernels.BLOCK_PAGES), self.table.shape[1])

  def state(self) -> SlotState:
    return SlotState(*(jnp.asarray(getattr(self, name)) for name in self.FIELDS))

  @classmethod
  def abstract_state(cls, slots: int, make) -> SlotState:
    """The decode state's shape as `state()` gives it, each field made by `make(shape, dtype)`
    (`jax.ShapeDtypeStruct` for the compile tool)."""
    return SlotState(
      *(make((slots,), bool if name == "active" else np.int32) for name in cls.FIELDS)
    )

  def update(self, st: SlotState, pool: PagePool) -> None:
    """The device's state after a decode call; finished slots give their pages back now."""
    self.pos, self.tok, self.ngen = np.array(st.pos), np.array(st.tok), np.array(st.ngen)
    self.active = np.array(st.active)
    for slot in self.free():
      for p in self.held[slot]:
        pool.release(p)
      self.held[slot] = []


@dataclasses.dataclass(frozen=True)
class PrefillWork:
  """Prompts admitted in one device call: their indices, their tokens right-padded to whole
  pages and rounded up to a few batch sizes, lengths, page ids (0, the trash page, past a
  prompt's own), the sequence ids of their samples, and the pages each took."""

  prompts: list[int]
  tokens: np.ndarray
  lengths: np.ndarray
  page_ids: np.ndarray
  seq_ids: np.ndarray
  taken: list[list[int]]

  @staticmethod
  def shapes(prompts: int, longest: int, n: int, page: int) -> dict[str, tuple[int, ...]]:
    """The arrays' shapes for `prompts` prompts of at most `longest` tokens: rows rounded up to
    a power of two (a few compiled sizes), tokens to whole pages."""
    nb, tb = 1 << (prompts - 1).bit_length(), -(-longest // page) * page
    return dict(tokens=(nb, tb), lengths=(nb,), page_ids=(nb, tb // page), seq_ids=(nb, n))

  @classmethod
  def abstract(cls, prompts: int, longest: int, n: int, page: int, make) -> tuple:
    """(tokens, lengths, page ids, sequence ids) as `make(shape)` makes them (int32 shapes for
    the compile tool): what `build` gives the prefill."""
    s = cls.shapes(prompts, longest, n, page)
    return tuple(make(s[k]) for k in ("tokens", "lengths", "page_ids", "seq_ids"))

  @classmethod
  def build(cls, pis: list[int], prompts, n: int, page: int, pool: PagePool) -> PrefillWork:
    lens = [len(prompts[pi]) for pi in pis]
    s = cls.shapes(len(pis), max(lens), n, page)
    toks, plens = np.zeros(s["tokens"], np.int32), np.ones(s["lengths"], np.int32)
    ids, seq_ids = np.zeros(s["page_ids"], np.int32), np.zeros(s["seq_ids"], np.int32)
    taken = []
    for g, (pi, length) in enumerate(zip(pis, lens)):
      taken.append([pool.take() for _ in range(-(-length // page))])
      toks[g, :length], plens[g], ids[g, : len(taken[g])] = prompts[pi], length, taken[g]
      seq_ids[g] = np.arange(pi * n, pi * n + n)
    return cls(list(pis), toks, plens, ids, seq_ids, taken)
