"""base_config / validate: defaults, each rule's one-line error, the shipped configs."""

import importlib.util
import os
import pathlib

import pytest

from prorl_jax.config import ConfigError, base_config, validate

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(name):
  spec = importlib.util.spec_from_file_location(name, ROOT / "configs" / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_defaults_are_the_prorl_v2_decision_table():
  c = validate(base_config())
  a = c.algo
  assert (a.estimator, a.clip_low, a.clip_high, a.loss_agg) == (
    "reinforce_pp_baseline",
    0.2,
    0.28,
    "token-mean",
  )
  assert (a.kl_kind, a.kl_coef, a.kl_clamp, a.kl_in_reward) == ("k2", 1e-4, 10.0, False)
  assert (a.truncation_penalty, a.length_penalty, a.length_penalty_min) == (0.1, "scheduled", 0.5)
  assert (a.length_penalty_on_steps, a.length_penalty_off_steps) == (100, 500)
  assert (a.ref_reset_every, a.ref_reset_optimizer, a.is_correction) == (400, False, "icepop")
  assert (c.optim.lr, c.optim.weight_decay, c.optim.grad_clip, c.optim.warmup_steps) == (
    1e-6,
    0.01,
    1.0,
    0,
  )
  r = c.rollout
  assert (r.n, r.prompts_per_step, r.mini_batch_prompts, r.temperature, r.top_p, r.top_k) == (
    16,
    512,
    64,
    1.0,
    1.0,
    0,
  )
  assert (c.eval.temperature, c.eval.top_p) == (0.6, 0.95)


SHIPPED = sorted(p.stem for p in (ROOT / "configs").glob("*.py"))


@pytest.mark.parametrize("variant", ["", "smoke"])
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_validate(name, variant):
  """Every file of configs/, found on disk (a new config is checked with no list to extend)."""
  validate(_load(name).get_config(variant or None))


def test_every_shipped_config_is_checked():
  assert {"tiny", "qwen15b", "qwen3"} <= set(SHIPPED)


def test_unknown_variant_is_an_error():
  with pytest.raises(ValueError, match="unknown variant"):
    _load("qwen15b").get_config("huge")


BAD = [
  ("algo.clip_low", 1.5, r"algo.clip_low must be in \(0, 1\), got 1.5"),
  ("algo.clip_high", 0.0, r"algo.clip_high must be in \(0, inf\]"),
  ("algo.dual_clip", 0.5, r"algo.dual_clip must be in \(1, inf\]"),
  ("algo.estimator", "ppo", r"algo.estimator must be one of reinforce_pp_baseline"),
  ("algo.loss_agg", "mean", r"algo.loss_agg must be one of token-mean"),
  ("algo.kl_kind", "k4", r"algo.kl_kind must be one of k1, k2, k3"),
  ("algo.kl_coef", -1.0, r"algo.kl_coef must be in \[0, inf\]"),
  ("algo.is_correction", "mis", r"algo.is_correction must be one of none, tis, icepop"),
  ("algo.icepop_low", 1.5, r"algo.icepop_low must be in \(0, 1\]"),
  ("algo.truncation_penalty", 2.0, r"algo.truncation_penalty must be in \[0, 1\]"),
  ("algo.length_penalty", "cyclic", r"algo.length_penalty must be one of off, always"),
  ("algo.length_penalty_min", 1.5, r"algo.length_penalty_min must be in \[0, 1\]"),
  ("algo.ref_reset_every", -5, r"algo.ref_reset_every must be in \[0, inf\]"),
  ("algo.epochs", 0, r"algo.epochs must be in \[1, inf\]"),
  ("optim.lr", 0.0, r"optim.lr must be in \(0, 1\]"),
  ("optim.grad_clip", 0.0, r"optim.grad_clip must be in \(0, inf\]"),
  ("rollout.n", 0, r"rollout.n must be in \[1, inf\]"),
  ("rollout.n", 1, r"rollout.n must be >= 2 for algo.estimator='reinforce_pp_baseline'"),
  ("rollout.mini_batch_prompts", 100, r"rollout.mini_batch_prompts must divide"),
  ("rollout.token_budget", 4096, r"rollout.pack_row_len=4096 \(0 = token_budget\) cannot hold"),
  ("rollout.pack_row_len", 32768, r"rollout.pack_row_len=32768 is larger than rollout.token_b"),
  ("rollout.token_budget", -1, r"rollout.token_budget must be in \[0, inf\]"),
  ("rollout.temperature", 0.0, r"rollout.temperature must be in \(0, inf\]"),
  ("rollout.top_p", 1.5, r"rollout.top_p must be in \(0, 1\]"),
  ("rollout.engine", "sglang", r"rollout.engine must be one of jax, vllm"),
  ("model.compute_dtype", "float16", r"model.compute_dtype must be one of float32, bfloat16"),
  ("model.remat", "some", r"model.remat must be one of none, full, dots"),
  ("model.attention_impl", "flash", r"model.attention_impl must be one of auto, xla, cudnn, spl"),
  ("dist.process_id", 2, r"dist.process_id must be in \[0, 0\]"),
  ("dist.num_processes", 0, r"dist.num_processes must be in \[1, inf\]"),
  ("dist.coordinator", "node0", r"dist.coordinator must be host:port"),
  ("mesh.tensor", 0, r"mesh.tensor must be in \[1, inf\]"),
  ("mesh.fsdp", 0, r"mesh.fsdp must be in \[1, inf\]"),
  ("eval.pass_k", "1,64", r"eval.pass_k must be comma-separated integers in \[1, eval.samples"),
  ("checkpoint.keep", 0, r"checkpoint.keep must be in \[1, inf\]"),
  ("seed", 1.5, r"seed must be an integer"),
  ("jax_engine.batching", "dynamic", r"jax_engine.batching must be one of static, continuous"),
  ("vllm.lora", "lora", r"vllm.lora must be one of merge, adapter"),
  ("jax_engine.attention", "flash", r"jax_engine.attention must be one of auto, xla, pallas"),
  ("jax_engine.slots", 0, r"jax_engine.slots must be in \[1, inf\]"),
  ("jax_engine.page_size", 2.5, r"jax_engine.page_size must be an integer"),
  ("jax_engine.pages", -1, r"jax_engine.pages must be in \[0, inf\]"),
  ("jax_engine.steps_per_sync", 0, r"jax_engine.steps_per_sync must be in \[1, inf\]"),
  (
    "rollout.inflight_updates",
    True,
    r"rollout.inflight_updates needs rollout.engine=jax with jax_engine.batching=continuous "
    r"\(got engine=jax, batching=static\)",
  ),
]


def test_micro_batch_size_must_divide_the_padded_mini_batch():
  c = base_config()
  c.rollout.token_budget = 0
  c.rollout.micro_batch_size = 7
  with pytest.raises(
    ConfigError, match="rollout.micro_batch_size must divide a mini-batch of 1024"
  ):
    validate(c)
  c.rollout.token_budget = 16384  # packed: micro_batch_size is not used
  validate(c)


@pytest.mark.parametrize("path,value,msg", BAD, ids=[f"{p}={v}" for p, v, _ in BAD])
def test_each_rule_rejects_with_one_line(path, value, msg):
  c = base_config()
  section, _, key = path.rpartition(".")
  node = c[section] if section else c
  with node.ignore_type():
    node[key] = value
  with pytest.raises(ConfigError, match=msg) as e:
    validate(c)
  assert "\n" not in str(e.value)


def test_cudnn_attention_needs_16_bit_compute_and_auto_resolves_per_backend():
  from prorl_jax.trainer.setup import attention_impl

  c = base_config()
  c.model.attention_impl = "cudnn"
  c.model.compute_dtype = "float32"
  with pytest.raises(ConfigError, match="attention_impl=cudnn needs model.compute_dtype=bfloat16"):
    validate(c)
  c.model.compute_dtype = "bfloat16"
  validate(c)
  assert attention_impl(c.model) == "cudnn"
  c.model.attention_impl = "auto"
  assert attention_impl(c.model) == "xla"  # the tests run on CPU


def test_kl_in_reward_needs_reinforce_pp():
  c = base_config()
  c.algo.kl_in_reward = True
  with pytest.raises(ConfigError, match="kl_in_reward=True needs algo.estimator='reinforce_pp'"):
    validate(c)
  c.algo.estimator = "reinforce_pp"
  validate(c)


def test_unknown_field_is_rejected():
  c = base_config()
  with c.algo.ignore_type():
    c.algo.unlock()
    c.algo.clip_hgih = 0.3
  with pytest.raises(ConfigError, match="algo.clip_hgih is not a config field"):
    validate(c)


def _float_keys(cfg, prefix=""):
  for key in cfg.keys():
    v = cfg[key]
    if hasattr(v, "keys"):
      yield from _float_keys(v, f"{prefix}{key}.")
    elif isinstance(v, float):
      yield f"{prefix}{key}"


FLOAT_KEYS = sorted(_float_keys(base_config()))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_nan_and_inf_are_rejected_for_every_float_key(key, value):
  c = base_config()
  section, name = key.rsplit(".", 1) if "." in key else ("", key)
  node = c
  for part in filter(None, section.split(".")):
    node = node[part]
  node[name] = value
  with pytest.raises(ConfigError, match=f"{key.replace('.', '[.]')} must be a finite number"):
    validate(c)


def test_float_keys_cover_the_known_nan_traps():
  assert {"optim.lr", "rollout.timeout_s", "algo.clip_high", "algo.kl_coef"} <= set(FLOAT_KEYS)


def test_reward_routing_must_name_a_verifier():
  c = base_config()
  c.data.reward_routing = "my_math:math,my_code:kode"
  with pytest.raises(ConfigError, match="'my_code:kode' names no verifier; the verifiers are: "):
    validate(c)
  c.data.reward_routing = "my_math:math,my_code:code"
  validate(c)


def test_every_key_has_a_meaning_and_the_listing_shows_values_beside_defaults():
  from prorl_jax import config as config_lib

  keys = config_lib.flat(base_config())
  assert len(keys) > 90 and all(len(config_lib.describe(k)) > 10 for k in keys)
  c = base_config()
  c.algo.clip_high = 0.3
  text = config_lib.listing(c)
  assert "algo.clip_high" in text and "0.3   (default 0.28)" in text
  assert "# PPO ratio clip above: 1 + clip_high (clip-higher)" in text
  assert text.count("(default ") == 1


def test_docs_config_table_is_the_generated_one():
  from prorl_jax import config as config_lib

  doc = open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "config.md")).read()
  assert config_lib.listing(markdown=True) in doc, (
    "docs/config.md is stale: regenerate its table with python -m prorl_jax.cli.config --markdown"
  )


def test_the_inline_engine_is_refused_with_the_pipeline_and_in_flight_updates():
  c = base_config()
  c.rollout.engine = "inline"
  validate(c)
  c.rollout.pipeline, c.rollout.max_staleness = True, 1
  with pytest.raises(ConfigError, match="rollout.engine=inline generates in the trainer between"):
    validate(c)
  c.rollout.pipeline, c.jax_engine.batching = False, "continuous"
  c.rollout.inflight_updates = True
  with pytest.raises(ConfigError, match="inflight_updates needs rollout.engine=jax"):
    validate(c)


@pytest.mark.parametrize(
  "engine, local, external, want",
  [
    ("jax", "auto", 0, (1, 1, True)),  # one local JAX worker
    ("inline", "auto", 0, (0, 1, False)),  # the trainer alone: no weight files
    ("inline", "auto", 2, (0, 3, True)),  # and two external workers, which read files
    ("inline", "1", 0, (1, 2, True)),  # and a local JAX worker
  ],
)
def test_the_inline_engine_starts_no_worker_and_counts_as_one(engine, local, external, want):
  from prorl_jax.trainer import placement
  from prorl_jax.trainer.plan import rollout_plan

  c = base_config()
  c.rollout.engine, c.rollout.local_workers, c.rollout.external_workers = engine, local, external
  wp = placement.workers_plan(c)
  plan = rollout_plan(c, wp.count)
  got = (wp.count, plan.requests_per_round, plan.publish_files)
  assert placement.worker_count(c) == wp.count
  assert got == want
  assert placement.worker_engine(c) == "jax"  # what local (and evaluation) workers run


def test_kl_in_reward_takes_the_kl_out_of_the_loss():
  """`algo.kl_in_reward=True` puts the KL into the token reward *instead* of the loss: the
  update's loss has no KL term then, else the run would pay the KL twice."""
  from prorl_jax.trainer import plan

  c = base_config()
  assert plan.loss_config(c).kl_coef == c.algo.kl_coef > 0
  c.algo.estimator, c.algo.kl_in_reward = "reinforce_pp", True
  validate(c)
  assert plan.loss_config(c).kl_coef == 0.0
  assert plan.Plan.from_config(c).loss.kl_coef == 0.0
