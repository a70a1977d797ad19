"""Continuous batching over a paged KV cache: a fixed number of decode slots; a sequence that ends
frees its slot and its pages at once, and the next waiting sequence takes them.

- The cache is a pool of pages of `page_size` tokens per layer (keys [P, K, Dh, page], values
  [P, K, page, Dh]); each slot has a page table. Pages are taken as a sequence grows, never
  sized for the longest. Attention runs page by page (flash-decoding: one page of every slot at
  a time, folded into a running softmax), up to the longest live sequence's last page, so no
  gathered copy of the cache is ever made; a slot past its own length reads the trash page.
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
import functools

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax.model import Qwen2, causal_mask, positions_from_mask
from prorl_jax.model.attention import NEG_SCORE
from prorl_jax.model.presets import Qwen2Config
from prorl_jax.model.qwen2 import apply_rope, rms_norm, rope_tables
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines.jax_sampler import prepare, sample_rows

BLOCK_PAGES = 4  # pages of every slot per attention block


@dataclasses.dataclass(frozen=True)
class PagedConfig:
  """The engine's shape: `slots` sequences decode together; pages of `page_size` tokens;
  `pages` in the pool (0: enough for every slot at the longest length, so admission never
  waits on memory); `steps_per_sync` decode steps per device call; `slot_groups` runs of
  slots whose attention each stops at its own longest sequence (slots are kept sorted by
  length)."""

  slots: int = 16
  page_size: int = 16
  pages: int = 0
  steps_per_sync: int = 8
  slot_groups: int = 4


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


@functools.partial(jax.jit, static_argnames=("cfg",))
def _prefill(params, tokens_1xT, length, *, cfg: Qwen2Config):
  """One prompt (right-padded to T; `length` is traced: one compile per page-rounded T): its
  keys [L, K, Dh, T], values [L, K, T, Dh] per layer stacked, and the final hidden state [D] of
  its last real token."""
  t = tokens_1xT.shape[1]
  mask = (jnp.arange(t) < length).astype(jnp.int32)[None]
  dt = jnp.dtype(cfg.compute_dtype)
  cache = (jnp.zeros((cfg.num_layers, 1, t, cfg.num_kv_heads, cfg.head_dim), dt),) * 2
  h, (k_all, v_all) = Qwen2(cfg).apply(
    {"params": params}, tokens_1xT, positions_from_mask(mask), causal_mask(mask), cache, 0
  )
  return k_all[:, 0].transpose(0, 2, 3, 1), v_all[:, 0].transpose(0, 2, 1, 3), h[0, length - 1]


@functools.partial(jax.jit, donate_argnums=(0, 1))
def _write_prompt(kpages, vpages, k_LxKxDhxT, v_LxKxTxDh, page_ids_N):
  """The prompt's keys/values into pages `page_ids_N` (T = N·page)."""
  n = page_ids_N.shape[0]
  out_k, out_v = [], []
  for layer, (kp, vp) in enumerate(zip(kpages, vpages)):
    page = kp.shape[-1]
    k = k_LxKxDhxT[layer].reshape(kp.shape[1], kp.shape[2], n, page).transpose(2, 0, 1, 3)
    v = v_LxKxTxDh[layer].reshape(vp.shape[1], n, page, vp.shape[3]).transpose(1, 0, 2, 3)
    out_k.append(kp.at[page_ids_N].set(k.astype(kp.dtype)))
    out_v.append(vp.at[page_ids_N].set(v.astype(vp.dtype)))
  return tuple(out_k), tuple(out_v)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def _copy_pages(kpages, vpages, src_N, dst_N):
  """Copy-on-write: pages src -> dst in every layer."""
  return (
    tuple(kp.at[dst_N].set(kp[src_N]) for kp in kpages),
    tuple(vp.at[dst_N].set(vp[src_N]) for vp in vpages),
  )


@functools.partial(jax.jit, static_argnames=("sp",))
def _first_tokens(head, h_D, seed_key, seq_ids_N, *, sp: SamplingParams):
  """Each of a group's sequences draws its first token after the prompt (final hidden h_D)."""
  n = seq_ids_N.shape[0]
  logits_V = h_D @ head
  logits_NxV = jnp.broadcast_to(logits_V, (n, logits_V.shape[0]))
  return sample_rows(logits_NxV, seed_key, seq_ids_N, jnp.zeros((n,), jnp.int32), sp)


def _flash_pages(q_SxKxGxDh, kp, vp, table_SxM, pos_S, active_S):
  """Attention of one query per slot over its pages up to and including pos: `BLOCK_PAGES`
  pages of every slot at a time (a gather of blocks that stay in cache), folded into a running
  softmax (flash-decoding), for as many blocks as the longest active slot uses; a slot past its
  own length reads the trash page, masked. Scores and values are multiplies and sums rather
  than batched [G, Dh] x [Dh, page] matmuls, which XLA:CPU runs as many tiny calls.
  Returns [S, K, G, Dh] (float32)."""
  s, k, g, dh = q_SxKxGxDh.shape
  page, dt = kp.shape[-1], q_SxKxGxDh.dtype
  block = min(BLOCK_PAGES, table_SxM.shape[1])  # the table's width is a multiple of it
  span = block * page

  def block_step(j, acc):
    m_run, l_run, o_run = acc  # [S, K, G], [S, K, G], [S, K, G, Dh]
    ids = jax.lax.dynamic_slice_in_dim(table_SxM, j * block, block, axis=1)  # [S, block]
    k_SxKxDhxT = kp[ids].astype(dt).transpose(0, 2, 3, 1, 4).reshape(s, k, dh, span)
    v_SxKxTxDh = vp[ids].astype(dt).transpose(0, 2, 1, 3, 4).reshape(s, k, span, dh)
    sc = jnp.sum(q_SxKxGxDh[..., None] * k_SxKxDhxT[:, :, None], axis=3).astype(jnp.float32)
    valid = j * span + jnp.arange(span)[None, :] <= pos_S[:, None]  # [S, span]
    sc = jnp.where(valid[:, None, None, :], sc, NEG_SCORE)
    m_new = jnp.maximum(m_run, sc.max(-1))
    scale = jnp.exp(m_run - m_new)
    p = jnp.exp(sc - m_new[..., None])
    l_new = l_run * scale + p.sum(-1)
    pv = jnp.sum(p.astype(dt)[..., None] * v_SxKxTxDh[:, :, None], axis=3)
    return m_new, l_new, o_run * scale[..., None] + pv

  acc = (
    jnp.full((s, k, g), NEG_SCORE, jnp.float32),
    jnp.zeros((s, k, g), jnp.float32),
    jnp.zeros((s, k, g, dh), jnp.float32),
  )
  blocks = (jnp.max(jnp.where(active_S, pos_S, -1)) + span) // span  # 0 when none is active
  _, l_run, o_run = jax.lax.fori_loop(0, blocks, block_step, acc)
  return o_run / jnp.maximum(l_run, 1e-30)[..., None]


def _attend_paged(cfg, w, x_SxD, cos, sin, kp, vp, table_SxM, pos_S, active_S, groups):
  """One layer for one new token per slot: its key/value written at (its page, pos % page),
  then attention over the slot's pages up to and including pos, in `groups` runs of adjacent
  slots, each as long as its own longest active slot (the host keeps slots sorted by length,
  so a few long sequences do not make every slot read that far)."""
  s = x_SxD.shape[0]
  h, k, dh, dt = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, x_SxD.dtype
  g, page = h // k, kp.shape[-1]
  qkv = rms_norm(x_SxD, w["input_norm"], cfg.rms_norm_eps, dt) @ w["qkv"] + w["qkv_bias"]
  q = apply_rope(qkv[:, : h * dh].reshape(s, 1, h, dh), cos, sin)
  q_SxKxGxDh = (q * jnp.asarray(dh**-0.5, dt)).reshape(s, k, g, dh)
  new_k = apply_rope(qkv[:, h * dh : (h + k) * dh].reshape(s, 1, k, dh), cos, sin).reshape(s, k, dh)
  new_v = qkv[:, (h + k) * dh :].reshape(s, k, dh)
  write_S = jnp.where(
    active_S, jnp.take_along_axis(table_SxM, (pos_S // page)[:, None], 1)[:, 0], 0
  )
  off = pos_S % page
  kp = kp.at[write_S, :, :, off].set(new_k.astype(kp.dtype))
  vp = vp.at[write_S, :, off, :].set(new_v.astype(vp.dtype))
  bounds = np.linspace(0, s, groups + 1).astype(int)
  out = jnp.concatenate(
    [
      _flash_pages(q_SxKxGxDh[a:b], kp, vp, table_SxM[a:b], pos_S[a:b], active_S[a:b])
      for a, b in zip(bounds[:-1], bounds[1:])
      if b > a
    ]
  )
  x_SxD = x_SxD + out.astype(dt).reshape(s, h * dh) @ w["o"]
  y = rms_norm(x_SxD, w["post_attn_norm"], cfg.rms_norm_eps, dt)
  x_SxD = x_SxD + (jax.nn.silu(y @ w["gate"]) * (y @ w["up"])) @ w["down"]
  return x_SxD, kp, vp


@functools.partial(jax.jit, static_argnames=("cfg", "sp", "steps", "groups"), donate_argnums=(1, 2))
def _decode(weights, kpages, vpages, table_SxM, state, seed_key, *, cfg, sp, steps, groups=1):
  """`steps` decode steps of every active slot. `state`: pos [S] (the next cache position), tok
  [S] (the last token), ngen [S] (tokens drawn so far), cap [S] (the sequence's token limit),
  active [S], seq [S] (sequence ids). `groups`: runs of adjacent slots whose attention stops at
  their own longest (`_attend_paged`).
  Returns the pages, the new state and, per step, the tokens, log-probs and which slots
  emitted [steps, S]."""
  dt = jnp.dtype(cfg.compute_dtype)
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)
  n_max = sp.max_new_tokens

  def step(carry, _):
    kps, vps, st = carry
    pos, tok, ngen, active, seq = st["pos"], st["tok"], st["ngen"], st["active"], st["seq"]
    cos, sin = rope_tables(pos[:, None], cfg.head_dim, cfg.rope_theta)
    x = weights["embed"][tok]
    new_k, new_v = [], []
    for layer in range(cfg.num_layers):
      x, kp, vp = _attend_paged(
        cfg,
        weights["layers"][layer],
        x,
        cos,
        sin,
        kps[layer],
        vps[layer],
        table_SxM,
        pos,
        active,
        groups,
      )
      new_k.append(kp)
      new_v.append(vp)
    x = rms_norm(x, weights["final_norm"], cfg.rms_norm_eps, dt)
    nxt, lp = sample_rows(x @ weights["head"], seed_key, seq, ngen, sp)
    emitted = active
    ngen = ngen + active.astype(jnp.int32)
    active = active & ~jnp.isin(nxt, stop_ids) & (ngen < jnp.minimum(st["cap"], n_max))
    st = dict(st, pos=pos + emitted.astype(jnp.int32), tok=jnp.where(emitted, nxt, tok))
    st = dict(st, ngen=ngen, active=active)
    return (tuple(new_k), tuple(new_v), st), (nxt, lp, emitted)

  (kpages, vpages, state), (toks, lps, emitted) = jax.lax.scan(
    step, (kpages, vpages, state), None, length=steps
  )
  return kpages, vpages, state, toks, lps, emitted


class PagedEngine:
  """Continuous batching over a paged KV cache for one model (see the module docstring).
  `generate(prompts, n, sampling, seed)` returns what `jax_sampler.generate` returns for the
  prompt-major rows (n per prompt); `stats` holds the last call's page and step counts."""

  def __init__(self, cfg: Qwen2Config, params, pc: PagedConfig = PagedConfig(), weights=None):
    self.cfg, self.params, self.pc = cfg, params, pc
    self.weights = prepare(cfg, params) if weights is None else weights
    self.stats: dict = {}
    self.pool: PagePool | None = None  # the last call's

  def _pool(self, max_len: int):
    pc, cfg = self.pc, self.cfg
    per_seq = -(-max_len // pc.page_size)
    pages = pc.pages or pc.slots * (per_seq + 1) + 1
    dt = jnp.dtype(cfg.compute_dtype)
    kshape = (pages, cfg.num_kv_heads, cfg.head_dim, pc.page_size)
    vshape = (pages, cfg.num_kv_heads, pc.page_size, cfg.head_dim)
    kp = tuple(jnp.zeros(kshape, dt) for _ in range(cfg.num_layers))
    vp = tuple(jnp.zeros(vshape, dt) for _ in range(cfg.num_layers))
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
  ):
    """n responses per prompt, rows prompt-major: tokens [R, N] (pad_id after the end), logprobs
    [R, N], lengths [R], finish_reason per row. `max_new`: each row's own token limit (at
    most sp.max_new_tokens; default that)."""
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("generate() needs prompts of at least one token")
    cfg, pc, page = self.cfg, self.pc, self.pc.page_size
    n_new = sp.max_new_tokens
    rows = len(prompts) * n
    max_len = max(len(p) for p in prompts) + n_new + pc.steps_per_sync
    pool, kp, vp, per_seq = self._pool(max_len)
    self.pool = pool
    seed_key = jax.random.PRNGKey(seed)
    stop = set(sp.stop_token_ids)
    out_tok = np.full((rows, n_new), pad_id, np.int32)
    out_lp = np.zeros((rows, n_new), np.float32)
    lengths = np.zeros(rows, np.int32)
    caps = np.full(rows, n_new, np.int32)
    if max_new is not None:
      caps = np.minimum(np.asarray(max_new, np.int32), n_new)
    stopped = np.zeros(rows, bool)
    s = pc.slots
    width = -(-(per_seq + 1) // BLOCK_PAGES) * BLOCK_PAGES  # whole attention blocks
    table = np.zeros((s, width), np.int32)
    held = [[] for _ in range(s)]  # pages each slot holds a reference to
    pos, tok, ngen, cap = (np.zeros(s, np.int32) for _ in range(4))
    active, seq = np.zeros(s, bool), np.zeros(s, np.int32)
    waiting = list(range(len(prompts)))  # prompts not yet prefilled
    ready: list[tuple] = []  # (row, first token, its pages, prompt length) per sequence
    steps = 0

    def emit(row, t, lp):
      i = int(lengths[row])
      out_tok[row, i], out_lp[row, i] = t, lp
      lengths[row] = i + 1
      if t in stop:
        stopped[row] = True
      return t in stop or i + 1 >= caps[row]

    def admit_group(pi):
      """Prefill prompt `pi`; its n sequences join `ready` holding its pages."""
      nonlocal kp, vp
      prompt = prompts[pi]
      length = len(prompt)
      tb = -(-length // page) * page
      toks = np.zeros((1, tb), np.int32)
      toks[0, :length] = prompt
      k_all, v_all, h = _prefill(self.params, jnp.asarray(toks), jnp.int32(length), cfg=cfg)
      ids = [pool.take() for _ in range(tb // page)]
      kp, vp = _write_prompt(kp, vp, k_all, v_all, jnp.asarray(ids, jnp.int32))
      first, first_lp = jax.device_get(
        _first_tokens(
          self.weights["head"], h, seed_key, jnp.arange(pi * n, pi * n + n, dtype=jnp.int32), sp=sp
        )
      )
      full, partial = ids[: length // page], ids[length // page :]
      for j in range(n):
        row = pi * n + j
        if emit(row, int(first[j]), float(first_lp[j])):
          continue  # done at its first token: never decodes
        mine = list(full)
        for p in full:
          pool.share(p)
        if partial:  # copy-on-write of the last, partial page
          c = pool.take()
          kp, vp = _copy_pages(kp, vp, jnp.asarray(partial, jnp.int32), jnp.asarray([c], jnp.int32))
          mine.append(c)
        ready.append((row, int(first[j]), mine, length))
      for p in ids:
        pool.release(p)

    while waiting or ready or active.any():
      for slot in np.flatnonzero(~active):  # fill every free slot
        while not ready and waiting:
          admit_group(waiting.pop(0))
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
      m = min(max(1 << (live - 1).bit_length(), BLOCK_PAGES), width)  # a few compiled widths
      state = {
        "pos": jnp.asarray(pos),
        "tok": jnp.asarray(tok),
        "ngen": jnp.asarray(ngen),
        "cap": jnp.asarray(cap),
        "active": jnp.asarray(active),
        "seq": jnp.asarray(seq),
      }
      kp, vp, state, toks, lps, emitted = _decode(
        self.weights,
        kp,
        vp,
        jnp.asarray(table[:, :m]),
        state,
        seed_key,
        cfg=cfg,
        sp=sp,
        steps=pc.steps_per_sync,
        groups=min(pc.slot_groups, s),
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
    self.stats = {
      "peak_pages": pool.peak,
      "page_bytes": 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * page * kp[0].itemsize,
      "decode_steps": steps,
    }
    return {
      "stats": dict(self.stats),
      "tokens": out_tok,
      "logprobs": out_lp,
      "lengths": lengths,
      "finish_reason": ["stop" if x else "length" for x in stopped],
    }
