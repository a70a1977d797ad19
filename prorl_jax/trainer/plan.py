"""The run's config unpacked once: `Plan.from_config(cfg)` turns the ConfigDict into the small
frozen records the trainer's steps read (what to ask the workers for, how scores are shaped,
which advantages, the loss, the optimizer, when to validate and to reset the reference, where
the local workers go and what they run). Below
the loop's entry nothing reads the ConfigDict; a test or a tool builds these records directly.

The fields keep the config's key names (`rollout.max_staleness` is `RolloutPlan.max_staleness`),
so `--config.<section>.<key>` and the record that carries it read alike.
"""

from __future__ import annotations

import dataclasses
import os
import types

import jax

from prorl_jax import config as config_lib
from prorl_jax.algo import shaping
from prorl_jax.config import engines as specs
from prorl_jax.data.sources import DataSpec
from prorl_jax.model import lora, presets
from prorl_jax.records import SamplingParams
from prorl_jax.trainer import placement, run_dir
from prorl_jax.trainer import train_step as ts


def _pick(cls, *sections, **values):
  """cls from the config keys its fields name, looked up in `sections` in order, and `values`."""
  out = dict(values)
  for f in dataclasses.fields(cls):
    if f.name not in out:
      out[f.name] = next(s[f.name] for s in sections if f.name in s)
  return cls(**out)


@dataclasses.dataclass(frozen=True)
class RolloutPlan:
  """What each step asks the rollout workers for, and what it admits back."""

  seed: int
  n: int  # responses per prompt
  prompts_per_step: int
  requests_per_round: int  # one round is split into this many requests (one per worker)
  max_staleness: int
  pipeline: bool
  inflight_updates: bool  # requests take any newer version mid-generation (no max_version)
  engine: str  # inline: the trainer serves requests itself
  publish_files: bool  # weight files on the exchange: some worker process reads them
  publish_adapters: bool  # a LoRA run's versions carry only the adapters (`lora.publish`)
  timeout_s: float
  max_probe_mismatch: float
  dynamic_sampling: bool
  max_gen_rounds: int
  sampling: SamplingParams
  routing: types.MappingProxyType  # {data_source: verifier}, parsed once
  exchange_url: str  # where requests, results and weights meet (`run_dir.exchange_url`)

  @property
  def engine_spec(self) -> specs.EngineSpec:
    """The engine's row (`config.engines`): where it runs, its options."""
    return specs.spec(self.engine)


@dataclasses.dataclass(frozen=True)
class Shaping:
  """Scores -> shaped scores (`batch.shape_scores` takes these as keywords)."""

  max_len: int
  truncation_penalty: float
  lp_min: float
  lp_max: float
  overlong_buffer: int
  overlong_factor: float


@dataclasses.dataclass(frozen=True)
class AdvantagePlan:
  """Shaped scores -> per-token advantages (`batch.token_advantages`)."""

  estimator: str
  kl_in_reward: bool
  kl_coef: float
  kl_clamp: float  # the loss's clamp of the log-ratio, for the host-side KL values too
  adv_boost: float
  adv_whiten_unbiased: bool


@dataclasses.dataclass(frozen=True)
class Batching:
  """How a step's groups become mini-batches: P prompts of N responses per mini-batch, prompt
  and response columns at most `max_prompt_len` + `max_response_len`, `epochs` passes; packed
  into slabs of `token_budget` tokens a device when it is set."""

  seed: int  # with the step, orders the groups
  n: int
  mini_batch_prompts: int
  max_prompt_len: int
  max_response_len: int
  epochs: int
  token_budget: int = 0  # packed slabs of this many tokens a device (0: padded micro-batches)
  pack_row_len: int = 0  # tokens a packed row (0: the whole budget)
  micro_batch_size: int = 0  # rows of a padded micro-batch


@dataclasses.dataclass(frozen=True)
class OptimizerPlan:
  """`train_step.make_optimizer`'s arguments."""

  lr: float
  warmup_steps: int
  weight_decay: float
  b1: float
  b2: float
  eps: float
  grad_clip: float
  adapters_only: bool = False  # LoRA: the optimizer on the adapters, the base frozen

  def make(self):
    kw = {k: v for k, v in dataclasses.asdict(self).items() if k != "adapters_only"}
    tx = ts.make_optimizer(**kw)
    return lora.adapters_only(tx) if self.adapters_only else tx


@dataclasses.dataclass(frozen=True)
class ValidationPlan:
  """pass@k on the held-out items every `every` steps (0: never; the run's end always when on)."""

  every: int
  samples: int
  ks: tuple[int, ...]
  sampling: SamplingParams
  timeout_s: float
  seed: int
  routing: types.MappingProxyType


@dataclasses.dataclass(frozen=True)
class ResetPlan:
  """When the reference policy is reset (`loop_state.reset_reason`), and whether the optimizer
  starts over with it."""

  ref_reset_every: int
  ref_reset_kl_spike: float
  ref_reset_stall_evals: int
  ref_reset_optimizer: bool


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
  """Where and how often the run saves: every `every` steps and the last (0: the last only),
  the newest `keep` kept, written in the background when `async_save`."""

  dir: str  # checkpoint.dir, or run_dir/checkpoints
  every: int
  keep: int
  async_save: bool


@dataclasses.dataclass(frozen=True)
class ModelPlan:
  """How the run holds and runs its model (`model.*`); `path` "" with `build_tiny`: the demo's."""

  path: str
  name: str  # its Hugging Face id: what to download into `path`
  build_tiny: bool
  param_dtype: str
  compute_dtype: str
  remat: str
  attention_impl: str
  attention_chunk: int
  lora_rank: int = 0  # LoRA (`lora.*`): adapters of this rank, the base frozen; 0 = none
  lora_alpha: float = 16.0
  lora_targets: tuple[str, ...] = ()

  def __post_init__(self):
    if problem := presets.lora_problem(self.lora_rank, self.lora_targets):
      raise config_lib.ConfigError(problem)


@dataclasses.dataclass(frozen=True)
class MeshPlan:
  """The trainer's device mesh (`mesh.*`: data x fsdp x tensor; fsdp -1 takes the rest)."""

  data: int
  fsdp: int
  tensor: int


@dataclasses.dataclass(frozen=True)
class MetricsPlan:
  """Where the metrics go besides run_dir/metrics.jsonl."""

  tensorboard: bool
  wandb_project: str


def loss_config(cfg) -> ts.LossConfig:
  """The update's `LossConfig` from the config's algo and rollout keys."""
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


def rollout_plan(cfg, local_workers: int, routing=None) -> RolloutPlan:
  """What a step asks the workers for (`local_workers`: the worker processes this host starts,
  `WorkersPlan.count`; `routing`: the reward routing, computed here when not given)."""
  r, a = cfg.rollout, cfg.algo
  processes = local_workers + r.external_workers
  inline = specs.spec(r.engine).in_trainer  # every trainer process serves requests
  return _pick(
    RolloutPlan,
    r,
    a,
    seed=cfg.seed,
    requests_per_round=max(1, processes + inline * jax.process_count()),
    publish_files=bool(processes) or not inline,
    publish_adapters=bool(cfg.lora.rank) and cfg.lora.publish == "adapters",
    sampling=config_lib.sampling_params(cfg),
    routing=routing or types.MappingProxyType(config_lib.routing_table(cfg)),
    exchange_url=run_dir.exchange_url(r.exchange, cfg.run_dir),
  )


def data_spec(cfg, routing=None) -> DataSpec:
  """What the run trains and validates on (`data.*`, and the items' prompt length, seed and
  held-out counts; `routing`: the reward routing, computed here when not given)."""
  items = config_lib.items
  d = cfg.data
  return DataSpec(
    train_files=tuple(items(d.train_files)),
    weights=tuple(items(d.weights)),
    val_files=tuple(items(d.val_files)),
    prepared=d.prepared,
    val_suite=d.val_suite,
    val_benchmarks=tuple(items(d.val_benchmarks)),
    build_tiny=cfg.model.build_tiny,
    max_prompt_len=cfg.rollout.max_prompt_len,
    seed=cfg.seed,
    heldout=cfg.eval.heldout,
    max_prompts=cfg.eval.max_prompts,
    routing=routing or types.MappingProxyType(config_lib.routing_table(cfg)),
    chat_template=d.chat_template,
  )


@dataclasses.dataclass(frozen=True)
class Plan:
  """Everything the run's start and steps read from the config, unpacked once (`start` builds
  it first; the pre-flight checks and the build read it): the reward routing and the workers'
  placement computed once."""

  run_dir: str
  seed: int
  model_path: str  # model.path as given ("" for the demo's built base)
  model: ModelPlan
  mesh: MeshPlan
  data: DataSpec
  total_steps: int
  compute_dtype: str  # of the published weights
  rollout: RolloutPlan
  shaping: Shaping
  advantages: AdvantagePlan
  batching: Batching
  loss: ts.LossConfig
  optimizer: OptimizerPlan
  validation: ValidationPlan
  reset: ResetPlan
  checkpoint: CheckpointPlan
  metrics: MetricsPlan
  workers: placement.WorkersPlan  # the local workers placed once, and how every worker scores
  schedule: shaping.LengthPenaltySchedule  # when the length penalty is on
  compiled: str = ""  # a `prorl-compile --save` directory whose executables the run uses

  @classmethod
  def from_config(cls, cfg) -> Plan:
    r, a = cfg.rollout, cfg.algo
    routing = types.MappingProxyType(config_lib.routing_table(cfg))
    workers = placement.workers_plan(cfg, hosts=jax.process_count())
    return cls(
      run_dir=cfg.run_dir,
      seed=cfg.seed,
      model_path=cfg.model.path,
      model=_pick(
        ModelPlan,
        cfg.model,
        lora_rank=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        lora_targets=tuple(config_lib.items(cfg.lora.targets)) if cfg.lora.rank else (),
      ),
      mesh=_pick(MeshPlan, cfg.mesh),
      data=data_spec(cfg, routing),
      total_steps=cfg.total_steps,
      compute_dtype=cfg.model.compute_dtype,
      rollout=rollout_plan(cfg, workers.count, routing),
      shaping=Shaping(
        max_len=r.max_response_len,
        truncation_penalty=a.truncation_penalty,
        lp_min=a.length_penalty_min,
        lp_max=a.length_penalty_max,
        overlong_buffer=a.overlong_buffer,
        overlong_factor=a.overlong_factor,
      ),
      advantages=_pick(AdvantagePlan, a),
      batching=_pick(Batching, r, a, seed=cfg.seed),
      loss=loss_config(cfg),
      optimizer=_pick(OptimizerPlan, cfg.optim, adapters_only=cfg.lora.rank > 0),
      validation=ValidationPlan(
        every=cfg.eval.every,
        samples=cfg.eval.samples,
        ks=tuple(config_lib.pass_ks(cfg)),
        sampling=config_lib.sampling_params(cfg, eval_mode=True),
        timeout_s=r.timeout_s,
        seed=cfg.seed,
        routing=routing,
      ),
      reset=_pick(ResetPlan, a),
      checkpoint=CheckpointPlan(
        dir=cfg.checkpoint.dir or os.path.join(cfg.run_dir, "checkpoints"),
        every=cfg.checkpoint.every,
        keep=cfg.checkpoint.keep,
        async_save=cfg.checkpoint.async_save,
      ),
      metrics=_pick(MetricsPlan, cfg.metrics),
      workers=workers,
      schedule=shaping.LengthPenaltySchedule(
        a.length_penalty, a.length_penalty_on_steps, a.length_penalty_off_steps
      ),
      compiled=cfg.compiled,
    )
