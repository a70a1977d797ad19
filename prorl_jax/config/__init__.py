"""Every config key with its default, and `validate(cfg)`.

`base_config()` is the one home of every default (the ProRL v2 recipe for `algo.*`);
`configs/*.py` start from it and change values. `validate` runs first in `trainer.loop.run` and
rejects a bad value with one line naming the field and the allowed range. The keys themselves, with
their defaults and meanings, are `config.fields.FIELDS`.
"""

from __future__ import annotations

import math

import ml_collections

from prorl_jax import rewards
from prorl_jax.config import engines
from prorl_jax.config.fields import (  # noqa: F401 (the choices are part of the config API)
  AGG_MODES,
  ATTENTION_IMPLS,
  DTYPES,
  ESTIMATORS,
  FIELDS,
  IS_MODES,
  KL_KINDS,
  LENGTH_PENALTY_MODES,
  REMAT,
  VLLM_LORA,
)
from prorl_jax.records import SamplingParams

ConfigDict = ml_collections.ConfigDict


def _build(fields: dict) -> ConfigDict:
  c = ConfigDict()
  for key, spec in fields.items():
    c[key] = _build(spec) if isinstance(spec, dict) else spec[0]
  return c


def base_config() -> ConfigDict:
  """All keys with their defaults: the ProRL v2 recipe (see FIELDS)."""
  return _build(FIELDS)


def describe(path: str) -> str:
  """The one-line meaning of a config key ("algo.clip_high")."""
  node = FIELDS
  for part in path.split("."):
    node = node[part]
  return node[1]


def flat(cfg, prefix: str = "", fields: dict = FIELDS) -> dict:
  """{"a.b": value} of every leaf of a config, in FIELDS' order."""
  out = {}
  for k, spec in fields.items():
    if isinstance(spec, dict):
      out.update(flat(cfg[k], f"{prefix}{k}.", spec))
    else:
      out[f"{prefix}{k}"] = cfg[k]
  return out


def leaves(tree, prefix: str = "") -> dict:
  """{"a.b": value} of every leaf of any nested mapping (a run record's config, whose keys may
  differ from today's)."""
  out = {}
  for k, v in tree.items():
    if hasattr(v, "items"):
      out.update(leaves(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def sections(fields: dict = FIELDS, prefix: str = "") -> dict[str, str]:
  """{"algo": "algo.estimator", ...}: every section with one of its fields (for messages)."""
  out = {}
  for k, spec in fields.items():
    if isinstance(spec, dict):
      out[f"{prefix}{k}"] = f"{prefix}{k}.{next(iter(spec))}"
      out.update(sections(spec, f"{prefix}{k}."))
  return out


class ConfigError(ValueError):
  """A user-fixable problem with the config or the files it names; main prints it as one line."""


def _fail(msg: str):
  raise ConfigError(msg)


def _in(cfg, path: str, choices):
  v = _get(cfg, path)
  if v not in choices:
    _fail(f"{path} must be one of {', '.join(map(str, choices))}, got {v!r}")


def _range(cfg, path, lo=None, hi=None, lo_open=False, hi_open=False, integer=False):
  v = _get(cfg, path)
  if integer and (not isinstance(v, int) or isinstance(v, bool)):
    _fail(f"{path} must be an integer, got {v!r}")
  if not isinstance(v, (int, float)) or isinstance(v, bool):
    _fail(f"{path} must be a number, got {v!r}")
  if not math.isfinite(v):
    _fail(f"{path} must be a finite number, got {v!r}")
  bad = (lo is not None and (v <= lo if lo_open else v < lo)) or (
    hi is not None and (v >= hi if hi_open else v > hi)
  )
  if bad:
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    lo_s = "-inf" if lo is None else f"{lo:g}"
    hi_s = "inf" if hi is None else f"{hi:g}"
    _fail(f"{path} must be in {left}{lo_s}, {hi_s}{right}, got {v!r}")


def _get(cfg, path: str):
  node = cfg
  for part in path.split("."):
    node = node[part]
  return node


def validate(cfg: ConfigDict) -> ConfigDict:
  """Checks every field; raises ValueError with one line naming the field and the allowed range."""
  known = base_config()
  _check_keys(known, cfg, "")
  _check_finite(cfg, "")
  _range(cfg, "seed", 0, integer=True)
  _range(cfg, "total_steps", 0, integer=True)
  _in(cfg, "model.param_dtype", DTYPES)
  _in(cfg, "model.compute_dtype", DTYPES)
  _in(cfg, "model.remat", REMAT)
  _range(cfg, "lora.rank", 0, integer=True)
  _range(cfg, "lora.alpha", 0, lo_open=True)
  _in(cfg, "lora.publish", ("adapters", "merged"))
  if cfg.lora.dropout != 0:
    _fail(
      f"lora.dropout must be 0, got {cfg.lora.dropout!r}: a dropped input changes the "
      "policy's log-probs between passes"
    )
  if cfg.lora.rank and not items(cfg.lora.targets):
    _fail("lora.targets is empty: name the projections that get adapters (lora.rank > 0)")
  _in(cfg, "model.attention_impl", ATTENTION_IMPLS)
  if cfg.model.attention_impl == "cudnn" and cfg.model.compute_dtype == "float32":
    raise ConfigError(
      "model.attention_impl=cudnn needs model.compute_dtype=bfloat16 (cuDNN "
      "fused attention has no float32 kernel); use attention_impl=xla or auto"
    )
  for ax in ("data", "tensor"):
    _range(cfg, f"mesh.{ax}", 1, integer=True)
  if cfg.mesh.fsdp != -1:
    _range(cfg, "mesh.fsdp", 1, integer=True)
  _range(cfg, "dist.num_processes", 1, integer=True)
  _range(cfg, "dist.process_id", 0, cfg.dist.num_processes - 1, integer=True)
  _range(cfg, "dist.timeout_s", 0, lo_open=True)
  if cfg.dist.coordinator and ":" not in cfg.dist.coordinator:
    _fail(f"dist.coordinator must be host:port, got {cfg.dist.coordinator!r}")
  if cfg.dist.coordinator and cfg.dist.auto:
    _fail("set either dist.coordinator (explicit) or dist.auto=True (detected), not both")
  _range(cfg, "optim.lr", 0, 1, lo_open=True)
  _range(cfg, "optim.warmup_steps", 0, integer=True)
  _range(cfg, "optim.weight_decay", 0, 1)
  _range(cfg, "optim.b1", 0, 1, hi_open=True)
  _range(cfg, "optim.b2", 0, 1, hi_open=True)
  _range(cfg, "optim.eps", 0, lo_open=True)
  _range(cfg, "optim.grad_clip", 0, lo_open=True)
  _validate_algo(cfg)
  _validate_rollout(cfg)
  _range(cfg, "eval.every", 0, integer=True)
  _range(cfg, "eval.temperature", 0)  # 0 = greedy
  _range(cfg, "eval.top_p", 0, 1, lo_open=True)
  _range(cfg, "eval.samples", 1, integer=True)
  _range(cfg, "eval.heldout", 1, integer=True)
  _range(cfg, "eval.max_prompts", 0, integer=True)
  if bool(cfg.data.val_suite) != bool(cfg.data.val_benchmarks.strip(", ")):
    _fail(
      "data.val_suite (a prepare --suite output) and data.val_benchmarks (its benchmarks "
      "to validate on) go together"
    )
  ks = items(str(cfg.eval.pass_k))
  if not ks or not all(s.isdigit() and 1 <= int(s) <= cfg.eval.samples for s in ks):
    _fail(
      f"eval.pass_k must be comma-separated integers in [1, eval.samples={cfg.eval.samples}], "
      f"got {cfg.eval.pass_k!r}"
    )
  for pair in items(cfg.data.reward_routing):
    if pair.count(":") != 1 or not all(s.strip() for s in pair.split(":")):
      _fail(f"data.reward_routing entries must look like source:verifier, got {pair!r}")
    if pair.split(":")[1].strip() not in rewards.verifier_names():
      _fail(
        f"data.reward_routing entry {pair!r} names no verifier; the verifiers are: "
        f"{', '.join(rewards.verifier_names())}"
      )
  _range(cfg, "checkpoint.every", 0, integer=True)
  _range(cfg, "checkpoint.keep", 1, integer=True)
  _range(cfg, "checkpoint.grace_s", 0, lo_open=True)
  if cfg.rollout.pipeline and cfg.rollout.max_staleness < 1:
    _fail(
      "rollout.pipeline=True samples each step's first round with the previous weights: set "
      "rollout.max_staleness >= 1"
    )
  if cfg.rollout.pipeline and engines.spec(cfg.rollout.engine).in_trainer:
    _fail(
      "rollout.pipeline=True overlaps generation with training in worker processes; "
      "rollout.engine=inline generates in the trainer between updates: set rollout.pipeline=False "
      "(or use workers: rollout.engine=jax|vllm)"
    )
  _range(cfg, "model.memory_fraction", 0, 1, hi_open=True)
  _range(cfg, "model.attention_chunk", 0, integer=True)
  r = cfg.rollout
  _range(cfg, "rollout.token_budget", 0, integer=True)
  _range(cfg, "rollout.pack_row_len", 0, integer=True)
  if r.token_budget:
    row = r.pack_row_len or r.token_budget
    longest = r.max_prompt_len + r.max_response_len
    if row < longest:
      _fail(
        f"rollout.pack_row_len={row} (0 = token_budget) cannot hold the longest sequence "
        f"(max_prompt_len + max_response_len = {longest}); raise it to at least {longest}"
      )
    if row > r.token_budget:
      _fail(f"rollout.pack_row_len={row} is larger than rollout.token_budget={r.token_budget}")
  _in(cfg, "jax_engine.batching", ("static", "continuous"))
  _in(cfg, "jax_engine.attention", ("auto", "xla", "pallas"))
  _in(cfg, "jax_engine.dtype", DTYPES)
  if cfg.rollout.inflight_updates and (
    not engines.spec(cfg.rollout.engine).swaps_in_flight or cfg.jax_engine.batching != "continuous"
  ):
    _fail(
      "rollout.inflight_updates needs rollout.engine=jax with jax_engine.batching=continuous "
      f"(got engine={cfg.rollout.engine}, batching={cfg.jax_engine.batching})"
    )
  for key in ("slots", "page_size", "steps_per_sync"):
    _range(cfg, f"jax_engine.{key}", 1, integer=True)
  _range(cfg, "jax_engine.pages", 0, integer=True)
  _range(cfg, "vllm.gpu_memory_utilization", 0, 1, lo_open=True)
  _range(cfg, "vllm.tensor_parallel", 1, integer=True)
  _range(cfg, "vllm.max_num_seqs", 1, integer=True)
  _in(cfg, "vllm.enforce_eager", ("auto", "true", "false"))
  _in(cfg, "vllm.lora", VLLM_LORA)
  return cfg


def _validate_algo(cfg):
  a = cfg.algo
  _in(cfg, "algo.estimator", ESTIMATORS)
  _range(cfg, "algo.adv_boost", 0)
  _range(cfg, "algo.clip_low", 0, 1, lo_open=True, hi_open=True)
  _range(cfg, "algo.clip_high", 0, lo_open=True)
  if a.dual_clip != 0.0:
    _range(cfg, "algo.dual_clip", 1, lo_open=True)
  _range(cfg, "algo.log_ratio_clamp", 0, lo_open=True)
  _in(cfg, "algo.loss_agg", AGG_MODES)
  _range(cfg, "algo.loss_agg_norm", 0)
  _in(cfg, "algo.kl_kind", KL_KINDS)
  _range(cfg, "algo.kl_coef", 0)
  _range(cfg, "algo.kl_clamp", 0, lo_open=True)
  if a.kl_in_reward and a.estimator != "reinforce_pp":
    _fail(f"algo.kl_in_reward=True needs algo.estimator='reinforce_pp', got {a.estimator!r}")
  _range(cfg, "algo.entropy_coef", 0)
  _in(cfg, "algo.is_correction", IS_MODES)
  _range(cfg, "algo.tis_cap", 1)
  _range(cfg, "algo.icepop_low", 0, 1, lo_open=True)
  _range(cfg, "algo.icepop_high", 1)
  _range(cfg, "algo.max_gen_rounds", 0, integer=True)
  _range(cfg, "algo.truncation_penalty", 0, 1)
  _in(cfg, "algo.length_penalty", LENGTH_PENALTY_MODES)
  _range(cfg, "algo.length_penalty_min", 0, 1)
  _range(cfg, "algo.length_penalty_max", a.length_penalty_min, 1)
  _range(cfg, "algo.length_penalty_on_steps", 1, integer=True)
  _range(cfg, "algo.length_penalty_off_steps", 0, integer=True)
  _range(cfg, "algo.overlong_buffer", 0, cfg.rollout.max_response_len - 1, integer=True)
  _range(cfg, "algo.overlong_factor", 0)
  _range(cfg, "algo.ref_reset_every", 0, integer=True)
  _range(cfg, "algo.ref_reset_kl_spike", 0)
  _range(cfg, "algo.ref_reset_stall_evals", 0, integer=True)
  _range(cfg, "algo.epochs", 1, integer=True)


def _validate_rollout(cfg):
  r = cfg.rollout
  _range(cfg, "rollout.n", 1, integer=True)
  if cfg.algo.estimator in ("grpo", "rloo", "dr_grpo", "reinforce_pp_baseline") and r.n < 2:
    _fail(
      f"rollout.n must be >= 2 for algo.estimator={cfg.algo.estimator!r} (a group baseline), "
      f"got {r.n}"
    )
  _range(cfg, "rollout.prompts_per_step", 1, integer=True)
  _range(cfg, "rollout.mini_batch_prompts", 1, r.prompts_per_step, integer=True)
  if r.prompts_per_step % r.mini_batch_prompts:
    _fail(
      f"rollout.mini_batch_prompts must divide rollout.prompts_per_step={r.prompts_per_step}, "
      f"got {r.mini_batch_prompts}"
    )
  _range(cfg, "rollout.micro_batch_size", 1, integer=True)
  seqs = r.mini_batch_prompts * r.n
  if not r.token_budget and seqs % r.micro_batch_size:
    _fail(
      f"rollout.micro_batch_size must divide a mini-batch of {seqs} sequences "
      f"(mini_batch_prompts*n), got {r.micro_batch_size}"
    )
  _range(cfg, "rollout.max_prompt_len", 1, integer=True)
  _range(cfg, "rollout.max_response_len", 1, integer=True)
  _range(cfg, "rollout.temperature", 0, lo_open=True)
  _range(cfg, "rollout.top_p", 0, 1, lo_open=True)
  _range(cfg, "rollout.top_k", 0, integer=True)
  _range(cfg, "rollout.max_staleness", 0, integer=True)
  _in(cfg, "rollout.engine", tuple(engines.ENGINES))
  if not (cfg.rollout.local_workers == "auto" or str(cfg.rollout.local_workers).isdigit()):
    _fail(f"rollout.local_workers={cfg.rollout.local_workers!r}: want auto or a count (0 or more)")
  _range(cfg, "rollout.external_workers", 0, integer=True)
  _range(cfg, "rollout.verifier_processes", 1, integer=True)
  _range(cfg, "rollout.timeout_s", 0, lo_open=True)
  _range(cfg, "rollout.max_probe_mismatch", 0)


def _check_finite(cfg, prefix):
  """NaN and inf are never a setting: every float field must be finite."""
  for key in cfg.keys():
    v = cfg[key]
    if isinstance(v, ConfigDict):
      _check_finite(v, f"{prefix}{key}.")
    elif isinstance(v, float) and not math.isfinite(v):
      _fail(f"{prefix}{key} must be a finite number, got {v!r}")


def _check_keys(known, cfg, prefix):
  for key in cfg.keys():
    if key not in known:
      _fail(f"{prefix}{key} is not a config field; the fields here are: {', '.join(known.keys())}")
    if isinstance(known[key], ConfigDict):
      if not isinstance(cfg[key], ConfigDict):
        _fail(f"{prefix}{key} must be a section, got {cfg[key]!r}")
      _check_keys(known[key], cfg[key], f"{prefix}{key}.")


def items(value: str) -> list[str]:
  """The one parser of comma-separated keys (data.train_files, ...): stripped, no empty ones."""
  return [x.strip() for x in str(value).split(",") if x.strip()]


def sampling_params(cfg, eval_mode: bool = False) -> SamplingParams:
  """The sampling settings of training rollouts (`rollout.*`) or, `eval_mode`, of validation and
  `prorl-eval` on a config (`eval.*`; no top-k)."""
  r, e = cfg.rollout, cfg.eval
  return SamplingParams(
    max_new_tokens=r.max_response_len,
    temperature=e.temperature if eval_mode else r.temperature,
    top_p=e.top_p if eval_mode else r.top_p,
    top_k=0 if eval_mode else r.top_k,
  )


def pass_ks(cfg) -> list[int]:
  """eval.pass_k as integers (validated by `validate`)."""
  return [int(k) for k in items(cfg.eval.pass_k)]


def sandbox_limits(cfg) -> dict:
  """The code sandboxes' run-wide ceilings for LocalWorkers."""
  r = cfg.rollout
  return {"memory_bytes": int(r.sandbox_memory_gib * (1 << 30)), "pids": int(r.sandbox_pids)}


def routing_table(cfg) -> dict[str, str]:
  """data.reward_routing as {data_source: verifier} (validated by `validate`)."""
  return {k.strip(): v.strip() for k, v in (p.split(":") for p in items(cfg.data.reward_routing))}


def _value(v) -> str:
  return repr(v) if isinstance(v, str) else str(v)


def listing(cfg=None, markdown: bool = False) -> str:
  """Every key with its value (of `cfg`), default and meaning: a text table or Markdown."""
  base = flat(base_config())
  now = flat(cfg) if cfg is not None else base
  if markdown:
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [
      f"| `{k}` | `{_value(d)}` | {describe(k).replace('|', chr(92) + '|')} |"
      for k, d in base.items()
    ]
    return "\n".join(lines) + "\n"
  width = max(map(len, base))
  lines = []
  for k, d in base.items():
    v = now.get(k, d)
    changed = "" if v == d else f"   (default {_value(d)})"
    lines.append(f"{k:<{width}}  {_value(v)}{changed}\n{'':<{width}}  # {describe(k)}")
  return "\n".join(lines) + "\n"
