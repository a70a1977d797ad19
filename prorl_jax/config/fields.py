"""Every config key with its default and one-line meaning (`FIELDS`), and the choices of the keys
that take one of a few values. Pure data: `prorl_jax.config` builds, validates and lists configs
from it; docs/config.md is generated from it."""

from __future__ import annotations

from prorl_jax.algo import AGG_MODES, ESTIMATORS, IS_MODES, KL_KINDS  # noqa: F401 (config API)

LENGTH_PENALTY_MODES = ("off", "always", "scheduled")
DTYPES = ("float32", "bfloat16")
REMAT = ("none", "full", "dots")
ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash")
VLLM_LORA = ("merge", "adapter")  # how vLLM applies a LoRA run's versions (`vllm.lora`)


# Every config key: (default, one-line meaning), the one home of both: `base_config()` builds
# the ConfigDict from it, `python -m prorl_jax.cli.config` lists it, docs/config.md is made from it.
FIELDS: dict = {
  "run_dir": ("runs/prorl", "where checkpoints, metrics, logs and the local exchange go"),
  "seed": (0, "seed of data order, sampling and initialisation"),
  "total_steps": (3000, "RL steps to train for (a resumed run continues to this count)"),
  "compiled": (
    "",
    "a `prorl-compile --save` directory: its executables replace the run's update, log-prob "
    "and reset programs where they match them and these chips (no compile at the first step)",
  ),
  "model": {
    "path": ("", "HF directory of the base model: config.json, *.safetensors, tokenizer"),
    "name": (
      "",
      "the base model's Hugging Face id (what to download into model.path); with model.path "
      "empty, prorl-compile takes its architecture from the preset of that name",
    ),
    "param_dtype": ("float32", "dtype of the master weights: float32 | bfloat16"),
    "compute_dtype": ("bfloat16", "dtype of activations and matmuls: float32 | bfloat16"),
    "remat": ("full", "per-layer rematerialisation: none | full (least memory) | dots"),
    "attention_impl": (
      "auto",
      "auto (cuDNN fused attention on NVIDIA GPUs with 16-bit compute, its packed passes Pallas' "
      "GPU flash attention with segment ids; Pallas splash attention on TPUs; else XLA) | xla | "
      "cudnn | splash",
    ),
    "attention_chunk": (
      1024,
      "xla attention: query rows per block, so a long row's scores never exist at once; 0 = one",
    ),
    "build_tiny": (
      False,
      "build the CPU demo's tiny base model when model.path is empty (once per build settings, "
      "into $PRORL_CACHE_DIR or ~/.cache/prorl_jax, for every run dir)",
    ),
    "memory_fraction": (
      0.0,
      "share of accelerator memory JAX takes (0 = JAX's default, or "
      "what a local vLLM worker on the same GPU leaves)",
    ),
  },
  "lora": {
    "rank": (
      0,
      "LoRA: adapters of this rank on lora.targets, the base model frozen and the reference the "
      "base with the reference's adapters; 0 = full fine-tuning",
    ),
    "alpha": (16.0, "LoRA: the adapters' product is scaled by alpha / rank (peft's lora_alpha)"),
    "targets": (
      "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
      "LoRA: the projections that get adapters, comma-separated (peft's target_modules)",
    ),
    "dropout": (0.0, "LoRA dropout: 0 only (a dropped input changes the policy's log-probs)"),
    "publish": (
      "adapters",
      "what a LoRA run's weight versions carry to worker processes: adapters (the base model "
      "published once, then megabytes a version) or merged (whole models, as full fine-tuning)",
    ),
  },
  "mesh": {
    "data": (1, "data-parallel replicas of the trainer"),
    "fsdp": (-1, "fully-sharded axis; -1 = every device left after data and tensor"),
    "tensor": (1, "tensor-parallel axis"),
  },
  "dist": {
    "coordinator": (
      "",
      'host:port of process 0 of a multi-host trainer; "" = single process unless dist.auto',
    ),
    "num_processes": (1, "trainer processes (with dist.coordinator)"),
    "process_id": (0, "this trainer process's index (with dist.coordinator)"),
    "auto": (False, "let jax.distributed detect SLURM / Open MPI / TPU pod slices"),
    "timeout_s": (300.0, "seconds to wait for every trainer process to join"),
  },
  "optim": {
    "lr": (1e-6, "AdamW learning rate"),
    "warmup_steps": (0, "linear warm-up steps; 0 = constant learning rate"),
    "weight_decay": (0.01, "AdamW decoupled weight decay"),
    "b1": (0.9, "AdamW beta1"),
    "b2": (0.999, "AdamW beta2"),
    "eps": (1e-8, "AdamW epsilon"),
    "grad_clip": (1.0, "global gradient-norm clip"),
  },
  "algo": {
    "estimator": (
      "reinforce_pp_baseline",
      "advantage estimator: reinforce_pp_baseline | reinforce_pp | grpo | rloo | dr_grpo",
    ),
    "adv_whiten_unbiased": (
      False,
      "Bessel-corrected batch variance in advantage whitening (verl's)",
    ),
    "adv_boost": (0.0, "added to the advantage of responses with score >= 1; 0 = off"),
    "clip_low": (0.2, "PPO ratio clip below: 1 - clip_low"),
    "clip_high": (0.28, "PPO ratio clip above: 1 + clip_high (clip-higher)"),
    "dual_clip": (0.0, "dual-clip constant c > 1 for negative advantages; 0 = off"),
    "log_ratio_clamp": (20.0, "clamp of the log importance ratio before exp"),
    "loss_agg": (
      "token-mean",
      "loss aggregation: token-mean | seq-mean-token-mean | "
      "seq-mean-token-sum | seq-mean-token-sum-norm",
    ),
    "loss_agg_norm": (0.0, "the constant of seq-mean-token-sum-norm; 0 = max response length"),
    "kl_kind": ("k2", "KL estimator to the reference policy: k1 | k2 | k3"),
    "kl_coef": (1e-4, "weight of the KL loss term; 0 = no KL"),
    "kl_clamp": (10.0, "clamp of the per-token KL estimate"),
    "kl_in_reward": (False, "put -kl_coef*k1 into the token reward instead (reinforce_pp)"),
    "entropy_coef": (0.0, "entropy bonus weight; 0 = off"),
    "is_correction": ("icepop", "rollout/trainer mismatch correction: none | tis | icepop"),
    "tis_cap": (2.0, "truncated importance sampling cap (is_correction=tis)"),
    "icepop_low": (0.5, "icepop: tokens with ratio below this get no gradient"),
    "icepop_high": (5.0, "icepop: tokens with ratio above this get no gradient"),
    "dynamic_sampling": (True, "drop prompts whose samples all score the same and refill"),
    "max_gen_rounds": (
      10,
      "refill rounds per step before training on what there is; 0 = never give up",
    ),
    "truncation_penalty": (
      0.1,
      "score multiplier for responses cut at the length limit; 1.0 = off",
    ),
    "length_penalty": ("scheduled", "cosine length penalty: off | always | scheduled"),
    "length_penalty_min": (0.5, "cosine length penalty: multiplier at the longest length"),
    "length_penalty_max": (1.0, "cosine length penalty: multiplier at the shortest length"),
    "length_penalty_on_steps": (100, "scheduled: steps with the penalty on per cycle"),
    "length_penalty_off_steps": (500, "scheduled: steps with it off per cycle"),
    "overlong_buffer": (0, "DAPO soft overlong penalty buffer in tokens; 0 = off"),
    "overlong_factor": (1.0, "DAPO soft overlong penalty at the length limit"),
    "ref_reset_every": (
      400,
      "reset the reference policy (and KL) every N steps; 0 = never on a schedule",
    ),
    "ref_reset_kl_spike": (0.0, "also reset when KL to the reference exceeds this; 0 = off"),
    "ref_reset_stall_evals": (0, "also reset after N validations without improvement; 0 = off"),
    "ref_reset_optimizer": (False, "a reset also re-initialises the optimizer state"),
    "epochs": (1, "passes over each step's batch"),
  },
  "rollout": {
    "n": (16, "samples per prompt (the group of the baseline)"),
    "prompts_per_step": (512, "prompts per RL step (after dynamic sampling)"),
    "mini_batch_prompts": (64, "prompts per optimizer update"),
    "token_budget": (
      16384,
      "tokens per device per micro-batch: whole sequences packed into rows (first-fit "
      "decreasing, segment-aware attention); 0 = padded micro-batches of micro_batch_size",
    ),
    "pack_row_len": (
      0,
      "tokens per packed row (token_budget // pack_row_len rows per device); 0 = token_budget",
    ),
    "micro_batch_size": (8, "with token_budget=0: sequences per padded micro-batch"),
    "max_prompt_len": (1024, "longer prompts are left out (counted)"),
    "max_response_len": (8192, "response token budget"),
    "temperature": (1.0, "sampling temperature of training rollouts"),
    "top_p": (1.0, "nucleus sampling of training rollouts"),
    "top_k": (0, "top-k sampling of training rollouts; 0 = off"),
    "max_staleness": (0, "policy versions a rollout may lag; 0 = on-policy"),
    "pipeline": (
      False,
      "generate step k+1's first rounds while step k trains (one version behind; needs "
      "max_staleness >= 1; learns more with algo.is_correction=tis)",
    ),
    "engine": (
      "jax",
      "rollout engine: jax (local JAX workers; their batching: jax_engine.*) | vllm (local vLLM "
      "workers: vllm.*) | inline (the trainer generates with the JAX engine, jax_engine.*, on its "
      "own devices between updates: no worker process, no weight files; TPUs, single devices)",
    ),
    "inflight_updates": (
      False,
      "workers load a newer weight version between decode chunks without dropping live "
      "sequences, each token recording its version (pipelined runs; needs engine=jax with "
      "jax_engine.batching=continuous)",
    ),
    "local_workers": (
      "auto",
      "workers the trainer starts: auto (vllm: one per vllm.tensor_parallel GPUs, every GPU "
      "generating; jax: 1; inline: 0), a count (JAX workers with inline), or 0 (external "
      "workers only)",
    ),
    "external_workers": (0, "workers started elsewhere (launch/*) on the same exchange"),
    "exchange": ("", 'tensorstore kvstore URL of the exchange; "" = run_dir/exchange'),
    "timeout_s": (3600.0, "seconds to wait for rollouts before stopping the run"),
    "max_probe_mismatch": (0.0, "stop when a worker's probe max |dlogp| exceeds this; 0 = off"),
    "worker_python": (
      "",
      'interpreter of local workers; "" = this one (jax), the vLLM environment\'s (vllm)',
    ),
    "unsandboxed_code": (
      False,
      "local workers run code rewards WITHOUT the sandbox (trusted data only)",
    ),
    "sandbox_memory_gib": (4.0, "memory ceiling of all local workers' code sandboxes together"),
    "sandbox_pids": (256, "process ceiling of all code sandboxes of the local workers together"),
    "verifier_processes": (
      1,
      "verifier processes of each local worker (and of each trainer process with engine=inline)",
    ),
  },
  "jax_engine": {
    "batching": (
      "static",
      "static: one batch decodes until its longest row ends, over a cache sized for it | "
      "continuous: fixed slots refilled as sequences end, over a paged KV cache, prompts "
      "prefilled once per group",
    ),
    "slots": (64, "continuous: sequences decoding together"),
    "page_size": (16, "continuous: tokens per KV page"),
    "pages": (0, "continuous: KV pages in the pool; 0 = enough for every slot at the longest"),
    "steps_per_sync": (16, "continuous: decode steps per device call between host scheduling"),
    "attention": (
      "auto",
      "continuous: attention over the pages: auto (JAX's Pallas paged-attention kernel on a TPU "
      "or GPU where its blocks fit, else XLA) | xla | pallas",
    ),
    "dtype": (
      "float32",
      "weights and computation of JAX workers and the inline engine: float32 | bfloat16 (half "
      "the memory and bandwidth on accelerators)",
    ),
  },
  "vllm": {
    "gpu_memory_utilization": (0.5, "share of GPU memory vLLM takes (weights + KV cache)"),
    "tensor_parallel": (1, "GPUs per vLLM engine"),
    "max_num_seqs": (256, "sequences vLLM batches at once"),
    "prefix_caching": (True, "share the KV cache of a prompt among its n samples"),
    "enforce_eager": ("auto", "auto (eager on CPUs, CUDA graphs on GPUs) | true | false"),
    "lora": (
      "merge",
      "a LoRA run's versions: merge (the adapters merged into a copy of the base on the "
      "worker, loaded in place) | adapter (vLLM's LoRA: the base loaded once, each version "
      "a new adapter)",
    ),
  },
  "data": {
    "prepared": ("", "a `python -m prorl_jax.cli.prepare --mix` output: files, weights, val split"),
    "train_files": (
      "",
      "comma-separated JSONL/Parquet files in the verl schema (overrides prepared)",
    ),
    "val_files": ("", "comma-separated held-out files (overrides prepared's val split)"),
    "val_suite": ("", "a `prepare --suite` output to validate on (with val_benchmarks)"),
    "val_benchmarks": (
      "",
      "its benchmarks, comma-separated: NAME or NAME/TASK (one Reasoning Gym task)",
    ),
    "weights": ("", "comma-separated blend weights, same order as train_files"),
    "chat_template": (True, "wrap prompts in the tokenizer's chat template (else raw text)"),
    "reward_routing": ("", 'extra data_source -> verifier pairs, "src:verifier,src2:verifier"'),
  },
  "eval": {
    "every": (50, "validate every N steps; 0 = never"),
    "temperature": (0.6, "validation sampling temperature; 0 = greedy"),
    "top_p": (0.95, "validation nucleus sampling"),
    "samples": (4, "validation samples per prompt"),
    "pass_k": ("1", "comma-separated k of the reported pass@k"),
    "heldout": (1000, "held-out prompts of the demo's procedural task"),
    "max_prompts": (0, "prompts per validation benchmark (a seeded subset); 0 = all"),
  },
  "checkpoint": {
    "every": (10, "save every N steps (and at the end); 0 = only at the end"),
    "dir": ("", 'Orbax directory; "" = run_dir/checkpoints; any path, e.g. gs://...'),
    "keep": (3, "checkpoints kept"),
    "async_save": (True, "save in the background while training goes on"),
    "on_signal": (True, "on SIGTERM/SIGINT: save at the next safe point, exit 75 (requeue)"),
    "preempt_file": ("", "a path whose appearance asks the same (a preemption notice)"),
    "grace_s": (30.0, "the scheduler's grace period after SIGTERM: a save past it warns"),
  },
  "metrics": {
    "tensorboard": (True, "also write TensorBoard event files"),
    "wandb_project": ("", "also log to this Weights & Biases project"),
  },
}
