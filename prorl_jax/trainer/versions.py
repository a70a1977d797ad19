"""What the loop does with a weight version: publish it to the exchange with its log-prob probe,
and validate it (pass@k on the held-out items, run by the primary and given to every process)."""

from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp

from prorl_jax.model import log_probs, lora, save_hf
from prorl_jax.parallel import dist
from prorl_jax.rollout import adapters, probe
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.weights import shard_bytes
from prorl_jax.trainer import scoring
from prorl_jax.trainer.preemption import PREEMPTED, Preempted
from prorl_jax.trainer.setup import Setup

_probe_logprobs = jax.jit(log_probs, static_argnums=0)


def write_probe(model_cfg, params, tokens: list[list[int]], path: str):
  """The version's probe (`rollout/probe.py`) from the trainer's own log-probs."""
  probe.write_probe(lambda t: _probe_logprobs(model_cfg, params, t), tokens, path)


def publish(setup: Setup, state, ex: Exchange | None, version: int, inline=None):
  """Weights `version` (the TrainState's params) -> the exchange (every process takes part in
  gathering them; the primary writes), unless no worker process reads them; and to the
  trainer's own inline engine (`rollout/inline.py`), when it has one: as they are in one
  process, a replica on each host's devices in many. A LoRA run publishing adapters writes
  only them and the probe (`_publish_adapters`)."""
  files = setup.plan.rollout.publish_files
  adapters_only = files and setup.plan.rollout.publish_adapters
  if adapters_only and inline is None:  # no engine here: the probe runs the adapted model
    model_cfg, live = setup.model_cfg, state.params  # (no merged copy of the weights made)
  else:  # with LoRA the engines get the adapters merged into the base (`lora.merged`)
    model_cfg, live = lora.merged(setup.model_cfg, state.params)
  if inline is not None and not dist.multi():
    inline.offer(version, live)
  if not (files or (inline is not None and dist.multi())):
    return
  # the whole weights on each host: a multi-host run's inline replicas and its probe forward
  # (run by the primary alone), and the files of a whole-model version
  host = dist.host_tree(live) if dist.multi() or not adapters_only else None
  if inline is not None and dist.multi():
    inline.offer(version, host)
  if not files:
    return
  probe_params = host if dist.multi() else live  # the probe's forward: on the devices in one
  if adapters_only:
    _publish_adapters(setup, state, ex, version, model_cfg, probe_params)
    return
  if not dist.is_primary():
    return
  with tempfile.TemporaryDirectory(dir=setup.plan.run_dir) as tmp:
    _save(setup, model_cfg, host, tmp)
    write_probe(model_cfg, probe_params, setup.probe_tokens, tmp)
    ex.weights.publish(version, int(state.step), tmp)


def _save(setup: Setup, model_cfg, params, out: str) -> None:
  """`params` as a HF model directory at `out`, in the published dtype, with the tokenizer."""
  dtype = setup.plan.compute_dtype
  nbytes = sum(x.size for x in jax.tree.leaves(params)) * jnp.dtype(dtype).itemsize
  save_hf(
    model_cfg,
    params,
    out,
    tokenizer_dir=setup.path,
    dtype=dtype,
    max_shard_bytes=shard_bytes(nbytes),
  )


_BASES: dict[str, str] = {}  # exchange URL -> the id of the base this process published there


def _publish_adapters(setup: Setup, state, ex, version: int, probe_cfg, probe_params) -> None:
  """A LoRA version in megabytes: its adapters (a PEFT directory) and `base.json` naming the
  frozen base, published once per exchange (`WeightStore.publish_base`), and the probe of the
  policy (`probe_params` under `probe_cfg`, adapted or merged: on the devices, or the host copy
  in a multi-host run)."""
  url = setup.plan.rollout.exchange_url
  if url not in _BASES:  # every process gathers the base once; the primary publishes it
    base_cfg, base = lora.without_adapters(setup.model_cfg, state.params)
    base = dist.host_tree(base)
    if dist.is_primary():
      with tempfile.TemporaryDirectory(dir=setup.plan.run_dir) as tmp:
        _save(setup, base_cfg, base, tmp)
        _BASES[url] = ex.weights.publish_base(tmp)
    else:
      _BASES[url] = ""
  tree = dist.host_tree(lora.adapters(state.params))
  if not dist.is_primary():
    return
  m = setup.model_cfg
  config = adapters.peft_config(m.lora_rank, m.lora_alpha, m.lora_targets, setup.plan.model.name)
  with tempfile.TemporaryDirectory(dir=setup.plan.run_dir) as tmp:
    adapters.write_version(tmp, lora.to_peft(m, tree), config, _BASES[url])
    write_probe(probe_cfg, probe_params, setup.probe_tokens, tmp)
    ex.weights.publish(version, int(state.step), tmp)


class Pins:
  """The weight versions the run's checkpoints still need on the exchange. A pipelined run's
  checkpoint holds a prefetch sampled with the weights one version behind its own; a run resumed
  from it samples that prefetch again with those weights, which the checkpoint does not hold. The
  newest two saves' are kept: the one being written and the one before it, which Orbax finishes
  before it starts the next."""

  def __init__(self):
    self._by_step: dict[int, int | None] = {}

  def saved(self, step: int, loop) -> None:
    """Checkpoint `step` holds the loop state `loop` (a restored one counts as saved)."""
    self._by_step[step] = loop.prefetch.version if loop.prefetch is not None else None
    for s in sorted(self._by_step)[:-2]:
      del self._by_step[s]

  def versions(self) -> set[int]:
    return {v for v in self._by_step.values() if v is not None}


def prune(ex: Exchange | None, pins: Pins) -> None:
  """The exchange keeps the newest two versions and the ones a checkpoint still needs."""
  if ex is not None:
    ex.weights.prune(keep=2, pinned=pins.versions())


def validate(setup: Setup, ex: Exchange, on_idle, *, version: int, tag: str) -> dict:
  """pass@k of weights `version` on the held-out items (primary only); {} without any."""
  v = setup.plan.validation
  if not setup.heldout:
    return {}
  return scoring.evaluate(
    ex,
    setup.heldout,
    samples=v.samples,
    sampling=v.sampling,
    version=version,
    ks=list(v.ks),
    timeout_s=v.timeout_s,
    tag=tag,
    seed=v.seed,
    on_idle=on_idle,
    routing=dict(v.routing),
  )


def val_line(step: int, val: dict) -> str:
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


def on_primary(fn, inline=None):
  """fn() run by the primary, its result given to every process; a wait the primary abandoned
  (`Preempted`) raises Preempted on every process. `inline`: this process's inline worker in a
  multi-host run: the other processes serve requests until the primary's fn is done."""
  out, wait = None, inline.next_wait() if inline is not None and dist.multi() else None
  if dist.is_primary():
    try:
      out = fn()
    except Preempted:
      out = PREEMPTED
    finally:
      if wait:
        inline.signal(wait)
  elif wait:
    inline.serve_until(wait)
  out = dist.broadcast(out)
  if isinstance(out, str) and out == PREEMPTED:
    raise Preempted("stop requested")
  return out


def validate_and_log(
  setup, ex, on_idle, writer, *, step: int, version: int, event: str, inline=None
) -> dict:
  """Validation of weights `version` after step `step`: run by the primary (the other processes'
  `inline` workers generating beside it), given to every process, written to the metrics and
  said on the console."""
  tag = "val-final" if event == "final" else f"val-s{step:07d}"
  val = on_primary(lambda: validate(setup, ex, on_idle, version=version, tag=tag), inline)
  writer.write(step, {f"val/{k}": v for k, v in val.items()}, event=event)
  if event != "final":
    writer.say(val_line(step, val))
  return val
