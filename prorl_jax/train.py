"""`run(cfg)`: the only reader of the config. Sets up the run and drives the RL loop.

One RL step: prompts -> exchange requests -> scored results (within
`rollout.max_staleness`) -> dynamic-sampling filter with refill and carry-over -> shaping ->
advantages -> old/ref log-probs -> mini-batch updates -> publish weights v+1 -> metrics ->
checkpoint -> validation -> reference reset when due.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from prorl_jax import config as config_lib
from prorl_jax import dist, dynamic_sampling
from prorl_jax import eval as eval_lib
from prorl_jax import train_step as ts
from prorl_jax.algo import shaping
from prorl_jax.checkpoint import Checkpointer, abstract_like
from prorl_jax.export import RUN_RECORD
from prorl_jax.loop_state import LoopState, reset_reason
from prorl_jax.metrics import MetricWriter, NullWriter
from prorl_jax.model import forward, load_hf, load_tokenizer, save_hf
from prorl_jax.rewards import sandbox
from prorl_jax.rollout import probe
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.local import LocalWorkers, check_worker_python, worker_python
from prorl_jax.rollout.store import InvalidExchange, open_store
from prorl_jax.rollout.weights import shard_bytes
from prorl_jax.run_record import check_resume_config, latest_local_step, record_run
from prorl_jax.sharding import make_mesh
from prorl_jax.sources import precheck, sources_for
from prorl_jax.step import collect, prefetch, sampling, update

log = logging.getLogger("prorl_jax.train")

R1_DISTILL_HINT = (
  "model.path is empty: download DeepSeek-R1-Distill-Qwen-1.5B on a machine with internet "
  "(`huggingface-cli download deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B --local-dir DIR`), "
  "copy DIR here and pass --config.model.path=DIR"
)


def resolve_model_path(cfg) -> str:
  """The HF directory to start from; the demo builds its tiny base model when none is given."""
  if cfg.model.path:
    if not os.path.isfile(os.path.join(cfg.model.path, "config.json")):
      raise config_lib.ConfigError(
        f"model.path={cfg.model.path!r} has no config.json; point it "
        "at a Hugging Face model directory"
      )
    return cfg.model.path
  if cfg.model.build_tiny:
    from prorl_jax.demo import warm_start

    return warm_start.build(os.path.join(cfg.run_dir, "base"), seed=cfg.seed)
  raise config_lib.ConfigError(R1_DISTILL_HINT)


def attention_impl(model_cfg) -> str:
  """`model.attention_impl`, with auto = cuDNN fused attention on NVIDIA GPUs in 16-bit compute,
  splash attention on TPUs, XLA otherwise."""
  if model_cfg.attention_impl != "auto":
    return model_cfg.attention_impl
  if jax.default_backend() == "tpu":
    return "splash"
  fused = jax.default_backend() == "gpu" and model_cfg.compute_dtype in ("bfloat16", "float16")
  return "cudnn" if fused else "xla"


def packed_row_len(r) -> int:
  """Tokens per packed row: rollout.pack_row_len, or the whole per-device budget when 0."""
  return r.pack_row_len or r.token_budget


def loss_config(cfg) -> ts.LossConfig:
  a, r = cfg.algo, cfg.rollout
  return ts.LossConfig(
    temperature=r.temperature,
    clip_low=a.clip_low,
    clip_high=a.clip_high,
    dual_clip=a.dual_clip,
    log_ratio_clamp=a.log_ratio_clamp,
    agg=a.loss_agg,
    norm_const=a.loss_agg_norm or float(r.max_response_len),
    kl_kind=a.kl_kind,
    kl_coef=0.0 if a.kl_in_reward else a.kl_coef,
    kl_clamp=a.kl_clamp,
    entropy_coef=a.entropy_coef,
    is_correction=a.is_correction,
    tis_cap=a.tis_cap,
    icepop_low=a.icepop_low,
    icepop_high=a.icepop_high,
    micro_batches=(r.mini_batch_prompts * r.n) // r.micro_batch_size,
  )


class Trainer:
  """A run's setup (config, mesh, model, jitted steps, data, schedule) and its state: `state`
  (the TrainState) and `loop` (a LoopState; `loop_json()` is what a checkpoint stores beside it)."""

  def __init__(self, cfg):
    self.cfg = cfg
    c = cfg
    self.path = resolve_model_path(c)
    try:
      self.tok = load_tokenizer(self.path)
    except (OSError, ValueError) as e:
      raise config_lib.ConfigError(
        f"model.path={self.path!r}: cannot load its tokenizer ({type(e).__name__}: {str(e)[:200]})"
      ) from None
    self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
    # The data and the mesh before the weights: their errors come before any heavy work.
    self.source, self.heldout = sources_for(c, self.tok)
    # Prompts longer than rollout.max_prompt_len, dropped when the files were read (logged).
    self.dropped_too_long = sum(getattr(s, "dropped_too_long", 0) for s in self.source.sources)
    if self.dropped_too_long:
      log.warning(
        "%d training prompts are longer than rollout.max_prompt_len=%d and were dropped",
        self.dropped_too_long,
        c.rollout.max_prompt_len,
      )
    check_code_sandbox(c, self.source.verifiers)
    try:
      self.mesh = make_mesh(c.mesh.data, c.mesh.fsdp, c.mesh.tensor)
    except ValueError as e:  # the mesh does not fit the devices
      raise config_lib.ConfigError(str(e)) from None
    self.model_cfg, params = load_hf(
      self.path,
      dtype=c.model.param_dtype,
      mesh=self.mesh,
      compute_dtype=c.model.compute_dtype,
      remat=c.model.remat,
      attention_impl=attention_impl(c.model),
      attention_chunk=c.model.attention_chunk,
    )
    self.tx = ts.make_optimizer(
      c.optim.lr,
      warmup_steps=c.optim.warmup_steps,
      weight_decay=c.optim.weight_decay,
      b1=c.optim.b1,
      b2=c.optim.b2,
      eps=c.optim.eps,
      grad_clip=c.optim.grad_clip,
    )
    self.state = ts.create_train_state(
      self.model_cfg, self.tx, self.mesh, jax.random.PRNGKey(c.seed), params=params
    )
    self.rows = c.rollout.mini_batch_prompts * c.rollout.n
    self.seq = c.rollout.max_prompt_len + c.rollout.max_response_len
    self.batch_shardings = ts.batch_shardings(self.mesh, (self.rows, self.seq))
    self.train_step = ts.jit_train_step(
      self.model_cfg, self.tx, loss_config(c), self.mesh, (self.rows, self.seq)
    )
    self.logprobs = ts.jit_logprob_step(
      self.model_cfg,
      self.mesh,
      (self.rows, self.seq),
      temperature=c.rollout.temperature,
      micro_batches=loss_config(c).micro_batches,
    )
    # Packed layout: micro-batches of [slab_rows, row_len] (token_budget per device).
    self.slab_shape = None
    if c.rollout.token_budget:
      shards = self.mesh.shape["data"] * self.mesh.shape["fsdp"]
      row_len = packed_row_len(c.rollout)
      self.slab_shape = (shards * (c.rollout.token_budget // row_len), row_len)
      self.slab_shardings = ts.packed_shardings(self.mesh, self.slab_shape)
      self.packed_train_step = ts.PackedTrainStep(
        self.model_cfg, self.tx, loss_config(c), self.mesh, self.slab_shape
      )
      self.packed_logprobs = ts.jit_packed_logprob_step(
        self.model_cfg, self.mesh, self.slab_shape, temperature=c.rollout.temperature
      )
    self.reset_ref = ts.jit_reset_reference(
      self.model_cfg, self.tx, self.mesh, c.algo.ref_reset_optimizer
    )
    rng = np.random.RandomState(c.seed)
    probe_items = self.heldout[:2] or [self.source.sources[0].items[0]]
    self.probe_tokens = [
      [int(x) for x in it["prompt_ids"][-c.rollout.max_prompt_len :]]
      + [int(x) for x in rng.randint(0, self.model_cfg.vocab_size, 16)]
      for it in probe_items
    ]
    self.buffer = dynamic_sampling.GroupBuffer()
    self.schedule = shaping.LengthPenaltySchedule(
      c.algo.length_penalty, c.algo.length_penalty_on_steps, c.algo.length_penalty_off_steps
    )
    self.loop = LoopState(length_penalty=self.schedule.init_state())

  def loop_json(self) -> dict:
    """The loop state with the data cursor and carry-over buffer, as a checkpoint stores it."""
    self.loop.data, self.loop.buffer = self.source.state(), self.buffer.state()
    return self.loop.to_json()

  def load_loop(self, d: dict):
    self.loop = LoopState.from_json(d)
    self.source.load_state(self.loop.data)
    self.buffer = dynamic_sampling.GroupBuffer.from_state(self.loop.buffer)


def check_code_sandbox(cfg, verifiers: set[str]):
  """Local workers score code in the bubblewrap sandbox: when the data needs it and it cannot
  run here, stop now with its one-line fix (or run unsandboxed on explicit request, logged)."""
  if "code" not in verifiers or not cfg.rollout.local_workers:
    return
  if cfg.rollout.unsandboxed_code:
    log.warning(
      "!!! rollout.unsandboxed_code=True: local workers run code rewards WITHOUT a "
      "sandbox; use only with trusted data"
    )
    return
  err = sandbox.check()
  if err:
    raise config_lib.ConfigError(f"{err} (or set rollout.unsandboxed_code=True for trusted data)")


@functools.partial(jax.jit, static_argnums=0)
def _probe_logprobs(model_cfg, params, tokens_BxT):
  return jax.nn.log_softmax(forward(model_cfg, params, tokens_BxT), -1)


def write_probe(model_cfg, params, tokens: list[list[int]], path: str):
  """The version's probe (`rollout/probe.py`) from the trainer's own log-probs."""
  probe.write_probe(lambda t: _probe_logprobs(model_cfg, params, t), tokens, path)


def publish(trainer: Trainer, ex: Exchange | None, version: int):
  """Weights v -> the exchange. Every process takes part in gathering them; the primary writes."""
  params = dist.host_tree(trainer.state.params)
  if not dist.is_primary():
    return
  with tempfile.TemporaryDirectory(dir=trainer.cfg.run_dir) as tmp:
    dtype = trainer.cfg.model.compute_dtype
    nbytes = sum(x.size for x in jax.tree.leaves(params)) * jnp.dtype(dtype).itemsize
    save_hf(
      trainer.model_cfg,
      params,
      tmp,
      tokenizer_dir=trainer.path,
      dtype=dtype,
      max_shard_bytes=shard_bytes(nbytes),
    )
    # The probe forward runs on the trainer's devices (the host copy in a multi-host run).
    write_probe(
      trainer.model_cfg, params if dist.multi() else trainer.state.params, trainer.probe_tokens, tmp
    )
    ex.weights.publish(version, int(trainer.state.step), tmp)
  ex.weights.prune(keep=2)


def validate_now(trainer: Trainer, ex: Exchange, workers, tag: str) -> dict:
  c = trainer.cfg
  if not trainer.heldout:
    return {}
  ks = config_lib.pass_ks(c)
  return eval_lib.evaluate(
    ex,
    trainer.heldout,
    samples=c.eval.samples,
    sampling=sampling(c, eval_mode=True),
    version=trainer.loop.version,
    ks=ks,
    timeout_s=c.rollout.timeout_s,
    tag=tag,
    seed=c.seed,
    on_idle=workers.check if workers else None,
    routing=config_lib.routing_table(c),
  )


def _val_line(step: int, val: dict) -> str:
  """One line of a validation's results, rounded: overall and per benchmark (pass@1)."""
  parts = [f"pass@1 {val['pass@1']:.4f}"] if "pass@1" in val else []
  parts += [
    f"{k[: -len('/pass@1')]} {v:.4f}" for k, v in sorted(val.items()) if k.endswith("/pass@1")
  ]
  fails = val.get("verifier_failures", 0)
  return (
    f"validation at step {step}: "
    + " | ".join(parts)
    + (f" ({fails} verifier failures)" if fails else "")
  )


def run(cfg, accept_config_changes: bool = False) -> dict:
  t_start = time.time()  # wall_seconds counts everything, the demo's base model build too
  config_lib.validate(cfg)
  dist.initialize(cfg.dist)
  primary = dist.is_primary()
  os.makedirs(cfg.run_dir, exist_ok=True)
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
  changes = []
  if primary:
    log.info("run %s: its config goes to %s", cfg.run_dir, os.path.join(cfg.run_dir, RUN_RECORD))
    changes = check_resume_config(cfg, accept_config_changes)
    last = latest_local_step(cfg)
    if last is not None and last >= cfg.total_steps and jax.process_count() == 1:
      print(
        f"{cfg.run_dir} is finished: step {last} of total_steps={cfg.total_steps}; raise "
        "--config.total_steps to train on",
        flush=True,
      )
      return {"finished": True, "steps": last}
    precheck(cfg)  # before any heavy work: are the data files there?
    try:  # ... and can the exchange be opened?
      open_store(cfg.rollout.exchange or os.path.join(os.path.abspath(cfg.run_dir), "exchange"))
    except InvalidExchange as e:
      raise config_lib.ConfigError(f"rollout.exchange: {e}") from None
    if cfg.rollout.local_workers:  # before any heavy work: can the workers run at all?
      check_worker_python(
        worker_python(cfg.rollout.engine, cfg.rollout.worker_python), cfg.rollout.engine
      )
    resolve_model_path(cfg)  # the demo's base model is built once, by the primary
  dist.barrier("base_model")
  trainer = Trainer(cfg)
  if primary:
    record_run(cfg, trainer.path, changes)
  ckpt = Checkpointer(
    cfg.checkpoint.dir or os.path.join(cfg.run_dir, "checkpoints"),
    cfg.checkpoint.keep,
    cfg.checkpoint.async_save,
  )
  restored = ckpt.restore_latest(
    abstract_like(trainer.state, ts.state_shardings(trainer.model_cfg, trainer.tx, trainer.mesh))
  )
  writer = (
    MetricWriter(
      cfg.run_dir,
      cfg.metrics.tensorboard,
      cfg.metrics.wandb_project,
      cfg.total_steps,
      cfg.to_dict(),
    )
    if primary
    else NullWriter()
  )
  if restored:
    step0, trainer.state, loop = restored
    trainer.load_loop(loop)
    writer.truncate_after(step0)
    log.info("resumed from checkpoint step %d (policy version %d)", step0, trainer.loop.version)
    if step0 >= cfg.total_steps:
      ckpt.close()
      writer.close()
      msg = (
        f"{cfg.run_dir} is finished: step {step0} of total_steps={cfg.total_steps}; "
        "raise --config.total_steps to train on"
      )
      if primary:
        print(msg, flush=True)
      return {"finished": True, "steps": step0}
  url = cfg.rollout.exchange or os.path.join(os.path.abspath(cfg.run_dir), "exchange")
  ex = Exchange(url, lease_seconds=60) if primary else None  # only the primary talks to it
  if primary:
    for rid in ex.queue.ids():  # requests of an interrupted run are redone deterministically
      ex.queue.retire(rid)
    for v in ex.weights.versions():
      if v > trainer.loop.version:  # published after the checkpoint we resumed from: redone
        ex.weights.delete(v)
  publish(trainer, ex, trainer.loop.version)
  workers = None
  if cfg.rollout.local_workers and primary:
    workers = LocalWorkers(
      url,
      cfg.rollout.local_workers,
      cfg.rollout.engine,
      os.path.join(cfg.run_dir, "workers"),
      unsandboxed_code=cfg.rollout.unsandboxed_code,
      python=worker_python(cfg.rollout.engine, cfg.rollout.worker_python),
      vllm_options=config_lib.vllm_options(cfg),
    )
  summary = {}
  try:
    if trainer.loop.pass1_start is None and cfg.eval.every:
      val = dist.broadcast(
        validate_now(trainer, ex, workers, f"val-s{trainer.loop.step:07d}") if primary else None
      )
      trainer.loop.pass1_start = val.get("pass@1")
      writer.write(trainer.loop.step, {f"val/{k}": v for k, v in val.items()}, event="validation")
      writer.say(_val_line(trainer.loop.step, val))
    first = trainer.loop.step
    last_val = None  # (step, validation) of the newest in-loop validation
    for step in range(first + 1, cfg.total_steps + 1):
      t0 = time.time()
      groups, info = dist.broadcast(collect(trainer, ex, workers, step) if primary else None)
      if cfg.rollout.pipeline and primary and step < cfg.total_steps:
        # the workers generate the next step while this one trains
        prefetch(trainer, ex, step + 1, rounds=int(info["pipeline/rounds_used"]))
      t1 = time.time()
      metrics = dict(info)
      metrics["data/dropped_too_long"] = trainer.dropped_too_long
      if groups:
        metrics.update(update(trainer, groups, step))
      t2 = time.time()
      trainer.loop.version += 1
      publish(trainer, ex, trainer.loop.version)
      t3 = time.time()
      trainer.loop.length_penalty, lp_event = trainer.schedule.advance(trainer.loop.length_penalty)
      trainer.loop.step = step
      trainer.loop.kl_history = (trainer.loop.kl_history + [metrics.get("actor/kl_ref_old", 0.0)])[
        -50:
      ]
      metrics.update(
        {
          "time/rollout_s": t1 - t0,
          "time/update_s": t2 - t1,
          "time/publish_s": t3 - t2,
          "time/step_s": t3 - t0,
          "perf/tokens_per_s": metrics.get("response/tokens", 0) / max(t2 - t1, 1e-9),
          "policy_version": trainer.loop.version,
        }
      )
      if workers:
        metrics["workers/restarts"] = workers.restarts
      if ex is not None:
        metrics.update({f"exchange/{k}": v for k, v in ex.stats.items()})
      writer.write(step, metrics, event=f"length_penalty_{lp_event}" if lp_event else None)
      writer.progress(step, first, f"reward {metrics.get('reward/raw_mean', 0):.3f}")
      val_metric = None
      if cfg.eval.every and step % cfg.eval.every == 0:
        val = dist.broadcast(
          validate_now(trainer, ex, workers, f"val-s{step:07d}") if primary else None
        )
        val_metric = val.get("pass@1")
        last_val = (step, val)
        trainer.loop.val_history.append(val_metric)
        writer.write(step, {f"val/{k}": v for k, v in val.items()}, event="validation")
        writer.say(_val_line(step, val))
      why = reset_reason(cfg.algo, step, trainer.loop.kl_history, trainer.loop.val_history)
      if why == "validation_stall":
        trainer.loop.val_history = trainer.loop.val_history[
          -1:
        ]  # a fresh start for the next stall count
      if why:
        trainer.state = trainer.reset_ref(trainer.state)
        trainer.loop.resets.append({"step": step, "why": why})
        writer.write(
          step,
          {"reset/optimizer_reinit": float(cfg.algo.ref_reset_optimizer)},
          event=f"reference_reset_{why}",
        )
      if cfg.checkpoint.every and (step % cfg.checkpoint.every == 0 or step == cfg.total_steps):
        ckpt.save(step, trainer.state, trainer.loop_json(), val_metric)
    if primary and sys.stdout.isatty():
      print(flush=True)  # past the progress bar
    if cfg.eval.every:
      if last_val and last_val[0] == trainer.loop.step:  # the last step was just validated
        val = last_val[1]
      else:
        val = dist.broadcast(validate_now(trainer, ex, workers, "val-final") if primary else None)
      writer.write(trainer.loop.step, {f"val/{k}": v for k, v in val.items()}, event="final")
      summary = {
        "pass@1_start": trainer.loop.pass1_start,
        "pass@1_end": val.get("pass@1"),
        **{f"final/{k}": v for k, v in val.items()},
      }
  finally:
    if workers:
      workers.stop()
    ckpt.close()
    writer.close()
  summary.update(
    {
      "steps": trainer.loop.step,
      "wall_seconds": time.time() - t_start,
      "model_path": trainer.path,
      "num_params": trainer.model_cfg.num_params,
      "resets": trainer.loop.resets,
      "processes": jax.process_count(),
    }
  )
  if primary:
    with open(os.path.join(cfg.run_dir, "summary.json"), "w") as f:
      json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)
  return summary
