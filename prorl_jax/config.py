"""Every config key with its default, and `validate(cfg)`.

`base_config()` is the one home of every default (the ProRL v2 recipe for `algo.*`);
`configs/*.py` start from it and change values. `validate` runs first in `train.run` and rejects a
bad value with one line naming the field and the allowed range. Library code never reads a config:
`train.py` unpacks it into explicit keyword arguments.
"""

from __future__ import annotations

import math

import ml_collections

from prorl_jax import rewards

ConfigDict = ml_collections.ConfigDict

ESTIMATORS = ("reinforce_pp_baseline", "reinforce_pp", "grpo", "rloo", "dr_grpo")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "k2", "k3")
IS_MODES = ("none", "tis", "icepop")
LENGTH_PENALTY_MODES = ("off", "always", "scheduled")
DTYPES = ("float32", "bfloat16")
REMAT = ("none", "full", "dots")
ATTENTION_IMPLS = ("auto", "xla", "cudnn")
ENGINES = ("jax", "vllm")


def base_config() -> ConfigDict:
  """All keys with their defaults: the ProRL v2 recipe."""
  c = ConfigDict()
  c.run_dir = "runs/prorl"
  c.seed = 0
  c.total_steps = 3000

  c.model = m = ConfigDict()
  m.path = ""  # HF directory: config.json + safetensors + tokenizer files
  m.param_dtype = "float32"  # master weights
  m.compute_dtype = "bfloat16"
  m.remat = "full"  # per-layer rematerialisation policy
  # auto: cuDNN fused attention on NVIDIA GPUs with a 16-bit compute dtype, else XLA | xla | cudnn
  m.attention_impl = "auto"
  m.build_tiny = False  # the CPU demo builds its own tiny base model in run_dir

  c.mesh = ConfigDict()
  c.mesh.data = 1
  c.mesh.fsdp = -1  # -1: all devices left over after data and tensor
  c.mesh.tensor = 1

  # Multi-host trainer (prorl_jax/dist.py): explicit coordinator flags, or JAX's own detection.
  c.dist = ConfigDict()
  c.dist.coordinator = ""  # host:port of process 0; "" = single process unless dist.auto
  c.dist.num_processes = 1
  c.dist.process_id = 0
  c.dist.auto = False  # jax.distributed.initialize() detects SLURM / Open MPI / TPU pod slices
  c.dist.timeout_s = 300.0  # how long to wait for every process to join

  c.optim = o = ConfigDict()
  o.lr = 1e-6
  o.warmup_steps = 0  # 0 = constant learning rate
  o.weight_decay = 0.01
  o.b1 = 0.9
  o.b2 = 0.999
  o.eps = 1e-8
  o.grad_clip = 1.0

  c.algo = a = ConfigDict()
  a.estimator = "reinforce_pp_baseline"
  a.adv_whiten_unbiased = False  # True: verl's Bessel-corrected batch variance
  a.adv_boost = 0.0  # +boost to the advantage of responses with score >= 1 (unofficial [FK] 0.1)
  a.clip_low = 0.2
  a.clip_high = 0.28
  a.dual_clip = 0.0  # 0 = off; otherwise the constant c > 1
  a.log_ratio_clamp = 20.0
  a.loss_agg = "token-mean"
  a.loss_agg_norm = 0.0  # C of seq-mean-token-sum-norm; 0 = max response length
  a.kl_kind = "k2"
  a.kl_coef = 1e-4  # 0 = no KL term
  a.kl_clamp = 10.0
  a.kl_in_reward = False  # True: -beta*k1 goes into the token reward (reinforce_pp)
  a.entropy_coef = 0.0
  a.is_correction = "icepop"
  a.tis_cap = 2.0
  a.icepop_low = 0.5
  a.icepop_high = 5.0
  a.dynamic_sampling = True
  a.max_gen_rounds = 10  # 0 = never give up refilling
  a.truncation_penalty = 0.1  # score multiplier for responses cut at the length limit; 1.0 = off
  a.length_penalty = "scheduled"
  a.length_penalty_min = 0.5
  a.length_penalty_max = 1.0
  a.length_penalty_on_steps = 100
  a.length_penalty_off_steps = 500
  a.overlong_buffer = 0  # DAPO soft overlong buffer length in tokens; 0 = off
  a.overlong_factor = 1.0
  a.ref_reset_every = 400  # 0 = never on a schedule
  a.ref_reset_kl_spike = 0.0  # reset when KL to ref exceeds this; 0 = off
  a.ref_reset_stall_evals = 0  # reset after this many validations without improvement; 0 = off
  a.ref_reset_optimizer = False  # True: also re-initialise the optimizer (ProRL v1)
  a.epochs = 1

  c.rollout = r = ConfigDict()
  r.n = 16
  r.prompts_per_step = 512
  r.mini_batch_prompts = 64
  r.micro_batch_size = 8  # sequences per gradient-accumulation micro-batch
  r.max_prompt_len = 1024
  r.max_response_len = 8192
  r.temperature = 1.0
  r.top_p = 1.0
  r.top_k = 0  # 0 = off
  r.max_staleness = 0  # 0 = on-policy
  r.engine = "jax"
  r.local_workers = 1  # 0 = external workers serve the exchange
  r.external_workers = 0  # workers started elsewhere (launch/*): each round's prompts are split
  # into local_workers + external_workers requests so every worker gets a share
  r.exchange = ""  # tensorstore kvstore URL; "" = <run_dir>/exchange
  r.timeout_s = 3600.0
  r.max_probe_mismatch = 0.0  # abort when a worker's probe max |Δlogp| exceeds this; 0 = off
  r.worker_python = ""  # interpreter of local workers; "" = this one (jax), .venv-vllm's (vllm)
  r.unsandboxed_code = False  # True: local workers run code rewards WITHOUT the sandbox (trusted
  # data only; logged at every start)

  c.data = d = ConfigDict()
  d.prepared = ""  # a `python -m prorl_jax.prepare` output: its files, weights and val split
  d.train_files = ""  # comma-separated JSONL/Parquet files in the verl schema
  d.val_files = ""
  # In-loop validation on benchmarks of a `prepare --suite` output (overrides val_files):
  # "NAME" or "NAME/TASK" (one Reasoning Gym task), comma-separated; eval.max_prompts caps each.
  d.val_suite = ""
  d.val_benchmarks = ""
  d.weights = ""  # comma-separated blend weights, same order as train_files
  d.chat_template = True
  d.reward_routing = ""  # extra data_source -> verifier pairs, "src:verifier,src2:verifier"

  c.eval = e = ConfigDict()
  e.every = 50  # 0 = never
  e.temperature = 0.6
  e.top_p = 0.95
  e.samples = 4
  e.pass_k = "1"
  e.heldout = 1000  # held-out prompts of a procedural task (the demo)
  e.max_prompts = 0  # per validation benchmark (data.val_benchmarks); 0 = all, else a fixed
  # seeded subset

  c.checkpoint = k = ConfigDict()
  k.every = 10
  k.dir = ""  # "" = <run_dir>/checkpoints; any Orbax path, e.g. gs://bucket/run/checkpoints
  k.keep = 3
  k.async_save = True

  c.metrics = x = ConfigDict()
  x.tensorboard = True
  x.wandb_project = ""
  return c


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
      hi is not None and (v >= hi if hi_open else v > hi))
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
  _in(cfg, "model.attention_impl", ATTENTION_IMPLS)
  if cfg.model.attention_impl == "cudnn" and cfg.model.compute_dtype == "float32":
    raise ConfigError("model.attention_impl=cudnn needs model.compute_dtype=bfloat16 (cuDNN "
                      "fused attention has no float32 kernel); use attention_impl=xla or auto")
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
    _fail("data.val_suite (a prepare --suite output) and data.val_benchmarks (its benchmarks "
          "to validate on) go together")
  ks = [s for s in str(cfg.eval.pass_k).split(",") if s.strip()]
  if not ks or not all(s.strip().isdigit() and 1 <= int(s) <= cfg.eval.samples for s in ks):
    _fail(f"eval.pass_k must be comma-separated integers in [1, eval.samples={cfg.eval.samples}], "
          f"got {cfg.eval.pass_k!r}")
  for pair in [p for p in cfg.data.reward_routing.split(",") if p.strip()]:
    if pair.count(":") != 1 or not all(s.strip() for s in pair.split(":")):
      _fail(f"data.reward_routing entries must look like source:verifier, got {pair!r}")
    if pair.split(":")[1].strip() not in rewards.verifier_names():
      _fail(f"data.reward_routing entry {pair!r} names no verifier; the verifiers are: "
            f"{', '.join(rewards.verifier_names())}")
  _range(cfg, "checkpoint.every", 0, integer=True)
  _range(cfg, "checkpoint.keep", 1, integer=True)
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
    _fail(f"rollout.n must be >= 2 for algo.estimator={cfg.algo.estimator!r} (a group baseline), "
          f"got {r.n}")
  _range(cfg, "rollout.prompts_per_step", 1, integer=True)
  _range(cfg, "rollout.mini_batch_prompts", 1, r.prompts_per_step, integer=True)
  if r.prompts_per_step % r.mini_batch_prompts:
    _fail(f"rollout.mini_batch_prompts must divide rollout.prompts_per_step={r.prompts_per_step}, "
          f"got {r.mini_batch_prompts}")
  _range(cfg, "rollout.micro_batch_size", 1, integer=True)
  seqs = r.mini_batch_prompts * r.n
  if seqs % r.micro_batch_size:
    _fail(f"rollout.micro_batch_size must divide a mini-batch of {seqs} sequences "
          f"(mini_batch_prompts*n), got {r.micro_batch_size}")
  _range(cfg, "rollout.max_prompt_len", 1, integer=True)
  _range(cfg, "rollout.max_response_len", 1, integer=True)
  _range(cfg, "rollout.temperature", 0, lo_open=True)
  _range(cfg, "rollout.top_p", 0, 1, lo_open=True)
  _range(cfg, "rollout.top_k", 0, integer=True)
  _range(cfg, "rollout.max_staleness", 0, integer=True)
  _in(cfg, "rollout.engine", ENGINES)
  _range(cfg, "rollout.local_workers", 0, integer=True)
  _range(cfg, "rollout.external_workers", 0, integer=True)
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
