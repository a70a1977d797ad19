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
- Per-sequence random streams (`jax_sampler.stream_uniforms`): the draw for token t of sequence
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

from prorl_jax.model.presets import Qwen2Config
from prorl_jax.records import EngineStats, Generation, SamplingParams
from prorl_jax.rollout.engines import paged_kernels as kernels
from prorl_jax.rollout.engines.jax_sampler import prepare


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


class PagedEngine:
  """Continuous batching over a paged KV cache for one model (see the module docstring).
  `generate(prompts, n, sampling, seed)` returns what `jax_sampler.generate` returns for the
  prompt-major rows (n per prompt); `stats` holds the last call's page and step counts."""

  def __init__(self, model_cfg: Qwen2Config, params, pc: PagedConfig = PagedConfig(), weights=None):
    self.model_cfg, self.params, self.pc = model_cfg, params, pc
    self.weights = prepare(model_cfg, params) if weights is None else weights
    self.stats = EngineStats()
    self.pool: PagePool | None = None  # the last call's

  def _pool(self, max_len: int):
    pc, model_cfg = self.pc, self.model_cfg
    per_seq = -(-max_len // pc.page_size)
    pages = pc.pages or pc.slots * (per_seq + 1) + 1
    dt = jnp.dtype(model_cfg.compute_dtype)
    kshape, vshape = kernels.pool_shapes(
      pc.attention, pages, model_cfg.num_kv_heads, model_cfg.head_dim, pc.page_size
    )
    kp = tuple(jnp.zeros(kshape, dt) for _ in range(model_cfg.num_layers))
    vp = tuple(jnp.zeros(vshape, dt) for _ in range(model_cfg.num_layers))
    return PagePool(pages), kp, vp, per_seq

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
    model_cfg, pc, page = self.model_cfg, self.pc, self.pc.page_size
    n_new = sp.max_new_tokens
    rows = len(prompts) * n
    max_len = max(len(p) for p in prompts) + n_new + pc.steps_per_sync
    pool, kp, vp, per_seq = self._pool(max_len)
    self.pool = pool
    seed_key = jax.random.PRNGKey(seed)
    stop = set(sp.stop_token_ids)
    out_tok = np.full((rows, n_new), pad_id, np.int32)
    out_lp = np.zeros((rows, n_new), np.float32)
    out_ver = np.full((rows, n_new), -1, np.int32)
    swaps = 0
    lengths = np.zeros(rows, np.int32)
    caps = np.full(rows, n_new, np.int32)
    if max_new is not None:
      caps = np.minimum(np.asarray(max_new, np.int32), n_new)
    stopped = np.zeros(rows, bool)
    s = pc.slots
    width = -(-(per_seq + 1) // kernels.BLOCK_PAGES) * kernels.BLOCK_PAGES  # whole attention blocks
    table = np.zeros((s, width), np.int32)
    held = [[] for _ in range(s)]  # pages each slot holds a reference to
    pos, tok, ngen, cap = (np.zeros(s, np.int32) for _ in range(4))
    active, seq = np.zeros(s, bool), np.zeros(s, np.int32)
    waiting = list(range(len(prompts)))  # prompts not yet prefilled
    ready: list[tuple] = []  # (row, first token, its pages, prompt length) per sequence
    steps = 0

    def emit(row, t, lp):
      i = int(lengths[row])
      out_tok[row, i], out_lp[row, i], out_ver[row, i] = t, lp, version
      lengths[row] = i + 1
      if t in stop:
        stopped[row] = True
      return t in stop or i + 1 >= caps[row]

    def admit(pis):
      """Prefills prompts `pis` in one device call; their sequences join `ready` holding their
      prompt's full pages (shared) and a copy of its partial last page (copy-on-write)."""
      nonlocal kp, vp
      lens = [len(prompts[pi]) for pi in pis]
      nb = 1 << (len(pis) - 1).bit_length()  # a few compiled batch sizes
      tb = -(-max(lens) // page) * page
      toks, plens = np.zeros((nb, tb), np.int32), np.ones(nb, np.int32)
      ids, seq_ids = np.zeros((nb, tb // page), np.int32), np.zeros((nb, n), np.int32)
      taken = []  # each prompt's own pages (the rest of its row of `ids` is the trash page)
      for g, (pi, length) in enumerate(zip(pis, lens)):
        taken.append([pool.take() for _ in range(-(-length // page))])
        toks[g, :length], plens[g], ids[g, : len(taken[g])] = prompts[pi], length, taken[g]
        seq_ids[g] = np.arange(pi * n, pi * n + n)
      kp, vp, first, first_lp = kernels.admit(
        self.params,
        self.weights.head,
        kp,
        vp,
        jnp.asarray(toks),
        jnp.asarray(plens),
        jnp.asarray(ids),
        seed_key,
        jnp.asarray(seq_ids),
        model_cfg=model_cfg,
        sp=sp,
        attention=pc.attention,
      )
      first, first_lp = jax.device_get((first, first_lp))
      src, dst = [], []
      for g, (pi, length) in enumerate(zip(pis, lens)):
        full, partial = taken[g][: length // page], taken[g][length // page :]
        for j in range(n):
          row = pi * n + j
          if emit(row, int(first[g, j]), float(first_lp[g, j])):
            continue  # done at its first token: never decodes
          mine = list(full)
          for p in full:
            pool.share(p)
          if partial:  # copy-on-write of the last, partial page
            src.append(partial[0])
            mine.append(pool.take())
            dst.append(mine[-1])
          ready.append((row, int(first[g, j]), mine, length))
        for p in taken[g]:
          pool.release(p)
      if src:
        kp, vp = kernels.copy_pages(
          kp, vp, jnp.asarray(src, jnp.int32), jnp.asarray(dst, jnp.int32), pc.attention
        )

    while waiting or ready or active.any():
      newer = between_chunks() if between_chunks is not None else None
      if newer is not None:  # an in-flight update: later tokens come from these weights
        version, params, *prepared = newer
        self.params = params
        self.weights = prepared[0] if prepared else prepare(model_cfg, params)
        swaps += 1
      free = np.flatnonzero(~active)
      if len(free) > len(ready) and waiting:  # enough groups for every free slot, in one call
        take = min(len(waiting), -(-(len(free) - len(ready)) // n))
        admit(waiting[:take])
        del waiting[:take]
      for slot in free:  # fill every free slot
        if not ready:
          break
        row, first, mine, length = ready.pop(0)
        for p in held[slot]:
          pool.release(p)
        held[slot] = mine
        table[slot] = 0
        table[slot, : len(mine)] = mine
        pos[slot], tok[slot], ngen[slot], active[slot], seq[slot] = length, first, 1, True, row
        cap[slot] = caps[row]
      if not active.any():
        continue
      for slot in np.flatnonzero(active):  # pages for the next chunk's writes
        need = -(-(pos[slot] + pc.steps_per_sync) // page)
        while len(held[slot]) < need:
          p = pool.take()
          table[slot, len(held[slot])] = p
          held[slot].append(p)
      # Longest first, idle slots last: each run of slots attends only as far as its own
      # longest (slot order changes nothing else: a sequence's draws are keyed by its row).
      order = np.lexsort((-pos, ~active))
      pos, tok, ngen, cap, active, seq, table = (
        x[order] for x in (pos, tok, ngen, cap, active, seq, table)
      )
      held = [held[i] for i in order]
      live = max(len(held[i]) for i in np.flatnonzero(active))
      m = min(
        max(1 << (live - 1).bit_length(), kernels.BLOCK_PAGES), width
      )  # a few compiled widths
      state = {
        "pos": jnp.asarray(pos),
        "tok": jnp.asarray(tok),
        "ngen": jnp.asarray(ngen),
        "cap": jnp.asarray(cap),
        "active": jnp.asarray(active),
        "seq": jnp.asarray(seq),
      }
      kp, vp, state, toks, lps, emitted = kernels.decode(
        self.weights,
        kp,
        vp,
        jnp.asarray(table[:, :m]),
        state,
        seed_key,
        model_cfg=model_cfg,
        sp=sp,
        steps=pc.steps_per_sync,
        groups=min(pc.slot_groups, s),
        attention=pc.attention,
      )
      steps += pc.steps_per_sync
      toks, lps, emitted, st = jax.device_get((toks, lps, emitted, state))
      for t in range(toks.shape[0]):
        for slot in np.flatnonzero(emitted[t]):
          emit(int(seq[slot]), int(toks[t, slot]), float(lps[t, slot]))
      pos, tok, ngen = (np.array(st[k]) for k in ("pos", "tok", "ngen"))
      active = np.array(st["active"])
      for slot in np.flatnonzero(~active):  # finished: pages back to the pool now
        for p in held[slot]:
          pool.release(p)
        held[slot] = []
    self.stats = EngineStats(
      peak_pages=int(pool.peak),
      page_bytes=int(
        2
        * model_cfg.num_layers
        * model_cfg.num_kv_heads
        * model_cfg.head_dim
        * page
        * kp[0].itemsize
      ),
      decode_steps=int(steps),
      weight_swaps=int(swaps),
    )
    return Generation.of(out_tok, out_lp, lengths, stopped, out_ver, self.stats)
