"""Generation in the trainer's own process (`rollout.engine=inline`): the TPU-only and the
single-device path.

`InlineWorker` is a rollout worker that lives in the trainer: it serves requests from the same
exchange queue (claims, leases, checked commits: the trainer reads its results as any worker's),
scores them in its own verifier pool (processes: model text is never judged in the trainer), and
generates with the JAX engine on the trainer's devices with the trainer's parameters, in their
shardings: no weight file is written or read, no second process holds the chip. The trainer
`offer`s each new version as it publishes and calls `serve` while it waits for results, so
generation runs between updates. External workers on the same exchange serve requests beside
it; the trainer then still publishes weight files for them.

In a multi-host run every trainer process is an inline worker: each holds a replica of the
version on its own chips (gathered as a publish gathers them, sharded over the host's local
devices) and serves requests from the exchange while the primary waits for results
(`serve_until`); the primary says when the wait is over with a marker on the exchange
(`signal`), so every host generates and scores its share and no collective runs meanwhile.

A version's parameters are rounded to the published dtype and generated with in the engine's
dtype (`jax_engine.dtype`), as a worker does with the files it loads: for the same request the
inline engine returns a worker's rows.
"""

from __future__ import annotations

import functools
import logging
import time

import jax
import jax.numpy as jnp

from prorl_jax.model.presets import ModelConfig
from prorl_jax.model.tokenizer import load_tokenizer
from prorl_jax.records import Request
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout.engines import jax_sampler, paged
from prorl_jax.rollout.engines.jax_engine import JaxEngine
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.worker import Worker

log = logging.getLogger("prorl_jax.inline")

WORKER_ID = "inline"
CONTROL = "control/"  # the primary's markers that a wait is over (multi-host runs)


def worker_config(model_cfg: ModelConfig, dtype: str = "float32") -> ModelConfig:
  """The model config a JAX worker of `dtype` reads back from a published version's config.json
  (parameters and compute in `dtype`, the default attention): the inline engine generates with
  the same."""
  return ModelConfig.from_hf_dict(
    model_cfg.to_hf_dict(),
    param_dtype=dtype,
    compute_dtype=dtype,
    remat="none",
    attention_impl="xla",
    attention_chunk=1024,
  )


@functools.partial(jax.jit, static_argnames=("published", "engine"))
def _as_published(params, *, published: str, engine: str):
  """`params` rounded to the `published` dtype and cast to the `engine`'s: the values a worker
  loads from the version's files, computed where the params live."""
  return jax.tree.map(lambda x: x.astype(published).astype(engine), params)


def abstract_programs(
  engine: JaxEngine, model_cfg, params, sp, max_prompt: int, max_new: int, n: int, backend, make
) -> list[tuple]:
  """The inline engine's device programs for the trainer's `params` given as shapes, as
  [(name, function, args, static settings)]: the decode layout of an offered version (in the
  engine's dtype, as `offer` makes it), then the prefill of one longest prompt and a chunk of
  decode steps (`paged.abstract_calls`), for `backend`'s chips. `make(shape, dtype=int32)`
  makes the engine's own arrays (the compile tool's replicated `jax.ShapeDtypeStruct`s)."""
  wcfg = worker_config(model_cfg, engine.dtype)
  dtype = jnp.dtype(engine.dtype)
  published = jax.tree.map(
    lambda a: jax.ShapeDtypeStruct(a.shape, dtype, sharding=a.sharding), params
  )
  layout = jax.jit(functools.partial(jax_sampler.prepare, wcfg))
  weights = jax.tree.map(lambda a: make(a.shape, a.dtype), jax.eval_shape(layout, published))
  pc = engine.paged_config(wcfg.head_dim, backend)
  sp = sp.stopping_at(wcfg.eos_token_id)
  calls = paged.abstract_calls(pc, wcfg, published, weights, sp, max_prompt, max_new, n, make)
  return [("layout", layout, (published,), {}), *calls]


class OfferedWeights:
  """The inline worker's weight source: the trainer offers each version (`InlineWorker.offer`)
  as its own parameters, so nothing is fetched and there is no transfer to check."""

  def reload(self, worker, min_version: int = 0, max_version: int | None = None) -> bool:
    return False


class InlineWorker(Worker):
  """The trainer's own rollout worker (see the module docstring). `engine`: a `JaxEngine`;
  `tokenizer_dir`: the base model's directory (its tokenizer decodes responses for scoring)."""

  def __init__(
    self,
    exchange: Exchange,
    engine: JaxEngine,
    tokenizer_dir: str,
    model_cfg: ModelConfig,
    publish_dtype: str,
    pool: VerifierPool,
    worker_id: str = WORKER_ID,
    local_shardings=None,
    session: str = "",
  ):
    """`local_shardings`: where a version given as host arrays goes (a multi-host run's
    replica on this host's devices); `session`: this run's name for its wait markers."""
    super().__init__(
      exchange, engine, cache_dir="", worker_id=worker_id, pool=pool, weights=OfferedWeights()
    )
    self.local_shardings, self.session, self.waits = local_shardings, session, 0
    self.tokenizer = load_tokenizer(tokenizer_dir)
    self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
    self.model_cfg = worker_config(model_cfg, engine.dtype)
    self.publish_dtype = publish_dtype

  def offer(self, version: int, params) -> None:
    """Weights `version` are the trainer's `params` (any sharding): generate with them from now
    on. Only the rounded copy in the engine's dtype is made (none when the params, the
    published dtype and the engine's are one dtype) and the decode layout; nothing leaves the
    devices."""
    if version == self.version:
      return
    if self.local_shardings is not None:
      params = jax.device_put(params, self.local_shardings)
    dtypes = {self.publish_dtype, self.engine.dtype} | {
      x.dtype.name for x in jax.tree.leaves(params)
    }
    if len(dtypes) > 1:  # else the params are used as they are
      params = _as_published(params, published=self.publish_dtype, engine=self.engine.dtype)
    self.engine.set_params(self.model_cfg, params, self.pad)
    self.version = version
    log.info("inline engine: generating with weights v%d", version)

  def _fits(self, request: Request) -> bool:
    hi = request.max_version
    return request.min_version <= self.version and (hi is None or self.version <= hi)

  def serve(self) -> bool:
    """Claims one open request that the offered version may serve and serves it (generate,
    score, commit); False when there was none. What `interrupt` raises between the engine's
    device calls abandons the request (its lease released) and propagates."""
    if self.version < 0:
      return False
    claim = self.ex.queue.claim(self.id, accept=self._fits)
    if claim is None:
      return False
    self.weights_wait_s = 0.0
    try:
      if self.serve_one(claim):
        self.done += 1
    except BaseException:  # abandoned (a stop asked mid-request): free it for anyone at once
      self.ex.queue.release(self.id)
      raise
    return True

  def next_wait(self) -> str:
    """The name of the next wait of the primary (every process counts its waits alike)."""
    self.waits += 1
    return f"{CONTROL}{self.session}-{self.waits:08d}"

  def signal(self, wait: str) -> None:
    """The primary: wait `wait` is over (earlier markers are removed: every process has seen
    them before this wait began)."""
    for key in self.ex.store.list(CONTROL):
      self.ex.store.write(key, None)
    self.ex.store.write(wait, b"done")

  def serve_until(self, wait: str) -> None:
    """Another process: serves requests until the primary's wait `wait` is over."""
    while self.ex.store.read(wait)[0] is None:
      if not self.serve():
        time.sleep(self.poll_s)


def close(worker: InlineWorker | None) -> None:
  if worker is not None:
    worker.pool.close()
