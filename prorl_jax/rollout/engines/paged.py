"""Continuous batching over a paged KV cache: a fixed number of decode slots; a sequence that ends
frees its slot and its pages at once, and the next waiting sequence takes them.

- The cache is a pool of pages of `page_size` tokens per layer (laid out for the attention
  kind, `paged_kernels.pool_shapes`); each slot has a page table. Pages are taken as a sequence
  grows, never sized for the longest. Attention is flash-decoding over the page table
  (`paged_kernels`): with XLA a few pages of every slot at a time folded into a running
  softmax, no gathered copy of the cache, slots kept sorted by length and attended in runs,
  each only as far as its own longest active sequence (a slot past its own length reads the
  trash page); or JAX's Pallas paged-attention kernel on TPUs and GPUs.
- One prefill per prompt: the N samples of a group share its full pages; each gets its own copy
  of the last, partial page (copy-on-write), then writes its own.
- Per-sequence random streams (`sampler.stream_uniforms`): the draw for token t of sequence
  j is a function of (seed, j, t) only, the static sampler's too, so a sequence's tokens do not
  depend on its slot, its neighbours, the batching or the engine.
- The host schedules between chunks of `steps_per_sync` decode steps run on the device.

Page 0 is the trash page: an idle slot's writes land there. Legend: S slots, P pages, M pages per
slot's table, K kv heads, Dh head dim, V vocab.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model.layer import prepare
from prorl_jax.model.presets import ModelConfig
from prorl_jax.records import EngineStats, Generation, SamplingParams
from prorl_jax.rollout.engines import paged_kernels as kernels
from prorl_jax.rollout.engines.slots import Outputs, PagePool, PrefillWork, Ready, SlotTable


@dataclasses.dataclass(frozen=True)
class PagedConfig:
  """The engine's shape: `slots` sequences decode together; pages of `page_size` tokens;
  `pages` in the pool (0: enough for every slot at the longest length, so admission never
  waits on memory); `steps_per_sync` decode steps per device call; `slot_groups` runs of
  slots whose attention each stops at its own longest sequence (slots are kept sorted by
  length); `attention`: how decode attends over the pages (`paged_kernels.ATTENTION`)."""

  slots: int = 16
  page_size: int = 16
  pages: int = 0
  steps_per_sync: int = 8
  slot_groups: int = 4
  attention: str = "xla"  # paged_kernels.ATTENTION: xla | pallas | pallas_interpret

  @property
  def groups(self) -> int:
    """The slot groups a decode call runs (never more than there are slots)."""
    return min(self.slot_groups, self.slots)


@dataclasses.dataclass(frozen=True)
class PoolShape:
  """The page pool a `generate` call allocates: `pages` in all, each layer's key and value pages
  (`kshape`, `vshape`, laid out for the attention kind) and the page-table width (whole
  kernel blocks)."""

  pages: int
  width: int
  kshape: tuple
  vshape: tuple


def pool_shape(pc: PagedConfig, model_cfg, max_len: int) -> PoolShape:
  """The pool for sequences of up to `max_len` tokens (prompt and response) under `pc`: the
  engine allocates it, the compile tool compiles against it."""
  per_seq = -(-(max_len + pc.steps_per_sync) // pc.page_size)
  pages = pc.pages or pc.slots * (per_seq + 1) + 1
  kshape, vshape = kernels.pool_shapes(
    pc.attention, pages, model_cfg.num_kv_heads, model_cfg.head_dim, pc.page_size
  )
  width = -(-(per_seq + 1) // kernels.BLOCK_PAGES) * kernels.BLOCK_PAGES  # whole blocks
  return PoolShape(pages, width, tuple(kshape), tuple(vshape))


def call_settings(pc: PagedConfig, model_cfg, sp: SamplingParams) -> tuple[dict, dict]:
  """The static settings of the engine's prefill and decode calls (`kernels.admit`,
  `kernels.decode`)."""
  prefill = dict(model_cfg=model_cfg, sp=sp, attention=pc.attention)
  return prefill, dict(prefill, steps=pc.steps_per_sync, groups=pc.groups)


def abstract_calls(
  pc: PagedConfig, model_cfg, params, weights, sp, max_prompt: int, max_new: int, n: int, make
) -> list[tuple]:
  """The engine's device calls for prompts of up to `max_prompt` tokens and `max_new` new ones,
  as shapes: [(name, kernel, args, static settings)] for the prefill of one longest prompt and
  a decode chunk over the whole pool. `params` and `weights` (their decode layout) are given as
  shapes; `make(shape, dtype=int32)` makes every other argument."""
  shape = pool_shape(pc, model_cfg, max_prompt + max_new)
  dt = jnp.dtype(model_cfg.compute_dtype)
  kp = tuple(make(shape.kshape, dt) for _ in range(model_cfg.num_layers))
  vp = tuple(make(shape.vshape, dt) for _ in range(model_cfg.num_layers))
  key = make((2,), jnp.uint32)  # jax.random.PRNGKey's
  tokens, lengths, page_ids, seq_ids = PrefillWork.abstract(1, max_prompt, n, pc.page_size, make)
  state = SlotTable.abstract_state(pc.slots, make)
  prefill_kw, decode_kw = call_settings(pc, model_cfg, sp)
  return [
    (
      "prefill",
      kernels.admit,
      (params, weights.head, kp, vp, tokens, lengths, page_ids, key, seq_ids),
      prefill_kw,
    ),
    (
      "decode",
      kernels.decode,
      (weights, kp, vp, make((pc.slots, shape.width)), state, key),
      decode_kw,
    ),
  ]


@dataclasses.dataclass
class Call:
  """One `generate` call's state: its requests, the page pool and pages, the slot table, the
  result rows, the prompts waiting for a prefill, the sequences waiting for a slot, and the
  counts."""

  prompts: list[list[int]]
  n: int
  sp: SamplingParams
  seed_key: jax.Array
  pool: PagePool
  kp: tuple
  vp: tuple
  slots: SlotTable
  out: Outputs
  version: int
  waiting: list[int]
  ready: list[Ready] = dataclasses.field(default_factory=list)
  steps: int = 0
  swaps: int = 0

  def pending(self) -> bool:
    return bool(self.waiting or self.ready or self.slots.active.any())


class PagedEngine:
  """Continuous batching over a paged KV cache for one model (see the module docstring), built
  once per worker (`set_weights` for each new version). `generate(prompts, n, sampling, seed)`
  returns what `jax_sampler.generate` returns for the prompt-major rows (n per prompt); `stats`
  holds the last call's page and step counts."""

  def __init__(self, model_cfg: ModelConfig, params, pc: PagedConfig = PagedConfig(), weights=None):
    self.model_cfg, self.pc = model_cfg, pc
    self.set_weights(params, weights)
    self.stats = EngineStats()
    self.pool: PagePool | None = None  # the last call's

  def set_weights(self, params, weights=None) -> None:
    """Generates with `params` (`weights`: their decode layout, `layer.prepare`d if None)."""
    self.params = params
    self.weights = prepare(self.model_cfg, params) if weights is None else weights

  def _start(self, prompts, n, sp, seed, max_new, pad_id, version) -> Call:
    pc, model_cfg = self.pc, self.model_cfg
    shape = pool_shape(pc, model_cfg, max(len(p) for p in prompts) + sp.max_new_tokens)
    dt = jnp.dtype(model_cfg.compute_dtype)
    self.pool = PagePool(shape.pages)
    return Call(
      prompts=prompts,
      n=n,
      sp=sp,
      seed_key=jax.random.PRNGKey(seed),
      pool=self.pool,
      kp=tuple(jnp.zeros(shape.kshape, dt) for _ in range(model_cfg.num_layers)),
      vp=tuple(jnp.zeros(shape.vshape, dt) for _ in range(model_cfg.num_layers)),
      slots=SlotTable(pc.slots, shape.width),
      out=Outputs(len(prompts) * n, sp, pad_id, max_new),
      version=version,
      waiting=list(range(len(prompts))),
    )

  def _prefill(self, call: Call, work: PrefillWork):
    call.kp, call.vp, first, first_lp = kernels.admit(
      self.params,
      self.weights.head,
      call.kp,
      call.vp,
      jnp.asarray(work.tokens),
      jnp.asarray(work.lengths),
      jnp.asarray(work.page_ids),
      call.seed_key,
      jnp.asarray(work.seq_ids),
      **call_settings(self.pc, self.model_cfg, call.sp)[0],
    )
    return jax.device_get((first, first_lp))

  def _admit(self, call: Call, pis: list[int]) -> None:
    """Prefills prompts `pis` in one device call; their sequences join `ready` holding their
    prompt's full pages (shared) and a copy of its partial last page (copy-on-write)."""
    page, pool = self.pc.page_size, call.pool
    work = PrefillWork.build(pis, call.prompts, call.n, page, pool)
    first, first_lp = self._prefill(call, work)
    src, dst = [], []
    for g, pi in enumerate(work.prompts):
      length = int(work.lengths[g])
      full, partial = work.taken[g][: length // page], work.taken[g][length // page :]
      for j in range(call.n):
        row = pi * call.n + j
        if call.out.emit(row, int(first[g, j]), float(first_lp[g, j]), call.version):
          continue  # done at its first token: never decodes
        mine = list(full)
        for p in full:
          pool.share(p)
        if partial:  # copy-on-write of the last, partial page
          src.append(partial[0])
          mine.append(pool.take())
          dst.append(mine[-1])
        call.ready.append(Ready(row, int(first[g, j]), mine, length))
      for p in work.taken[g]:
        pool.release(p)
    if src:
      call.kp, call.vp = kernels.copy_pages(
        call.kp,
        call.vp,
        jnp.asarray(src, jnp.int32),
        jnp.asarray(dst, jnp.int32),
        self.pc.attention,
      )

  def _refill(self, call: Call) -> None:
    """Prefills enough waiting prompts for every free slot (in one call), then fills the free
    slots from the sequences ready."""
    free = call.slots.free()
    if len(free) > len(call.ready) and call.waiting:
      take = min(len(call.waiting), -(-(len(free) - len(call.ready)) // call.n))
      self._admit(call, call.waiting[:take])
      del call.waiting[:take]
    for slot in free:
      if not call.ready:
        break
      r = call.ready.pop(0)
      call.slots.admit(slot, r, call.out.caps[r.row], call.pool)

  def _decode(self, call: Call) -> None:
    """`steps_per_sync` decode steps of every active slot in one device call."""
    pc, slots = self.pc, call.slots
    slots.grow(call.pool, pc.steps_per_sync, pc.page_size)
    slots.order()
    call.kp, call.vp, state, toks, lps, emitted = kernels.decode(
      self.weights,
      call.kp,
      call.vp,
      jnp.asarray(slots.table[:, : slots.width()]),
      slots.state(),
      call.seed_key,
      **call_settings(pc, self.model_cfg, call.sp)[1],
    )
    call.steps += pc.steps_per_sync
    toks, lps, emitted, st = jax.device_get((toks, lps, emitted, state))
    for t in range(toks.shape[0]):
      for slot in np.flatnonzero(emitted[t]):
        call.out.emit(int(slots.seq[slot]), int(toks[t, slot]), float(lps[t, slot]), call.version)
    slots.update(st, call.pool)

  def _swap(self, call: Call, between_chunks) -> None:
    """An in-flight update: later tokens come from the weights `between_chunks()` returns."""
    newer = between_chunks() if between_chunks is not None else None
    if newer is not None:
      call.version, params, *prepared = newer
      self.set_weights(params, prepared[0] if prepared else None)
      call.swaps += 1

  def generate(
    self,
    prompts: list[list[int]],
    n: int,
    sp: SamplingParams,
    *,
    seed: int,
    max_new=None,
    pad_id: int = 0,
    version: int = 0,
    between_chunks=None,
  ):
    """n responses per prompt as a `records.Generation`, rows prompt-major: tokens (pad_id after
    the end), log-probs, lengths, stopped, versions (the weights version that drew each token;
    -1 after the end) and the call's page and step counts. `max_new`: each row's own token
    limit (at most sp.max_new_tokens; default that).

    In-flight weight updates: `between_chunks()` runs before every device call and returns None
    or `(version, params[, prepared weights])`, the weights to continue with; live sequences
    keep their cache (their earlier keys and values stay those of the weights that computed
    them) and every later token, prefill included, is drawn by the new weights, under their
    version."""
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("generate() needs prompts of at least one token")
    call = self._start(prompts, n, sp, seed, max_new, pad_id, version)
    while call.pending():
      self._swap(call, between_chunks)
      self._refill(call)
      if call.slots.active.any():
        self._decode(call)
    self.stats = self._stats(call)
    out = call.out
    return Generation.of(
      out.tokens, out.logprobs, out.lengths, out.stopped, out.versions, self.stats
    )

  def _stats(self, call: Call) -> EngineStats:
    c = self.model_cfg
    page_bytes = 2 * c.num_layers * c.num_kv_heads * c.head_dim * self.pc.page_size
    return EngineStats(
      peak_pages=int(call.pool.peak),
      page_bytes=int(page_bytes * call.kp[0].itemsize),
      decode_steps=int(call.steps),
      weight_swaps=int(call.swaps),
    )
