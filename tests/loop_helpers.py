"""Running the RL loop as real subprocesses, shared by the loop and multi-host tests."""

import hashlib
import json
import os
import subprocess
import sys

import safetensors.numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOLATILE = ("time/", "perf/", "exchange/", "workers/")


def flags(run_dir, base, steps, **extra):
  f = {
    "run_dir": run_dir,
    "model.path": base,
    "total_steps": steps,
    "rollout.n": 4,
    "rollout.prompts_per_step": 8,
    "rollout.mini_batch_prompts": 4,
    "rollout.micro_batch_size": 8,
    "rollout.max_response_len": 24,
    "checkpoint.every": 1,
    "checkpoint.keep": 10,
    "eval.every": 0,
    "rollout.timeout_s": 300.0,
    "algo.length_penalty_on_steps": 2,
    "algo.length_penalty_off_steps": 2,
  }
  f.update(extra)
  return [f"--config.{k}={v}" for k, v in f.items()]


def start(run_dir, base, steps, env_extra=None, **extra):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  env.update(env_extra or {})
  return subprocess.Popen(
    [
      sys.executable,
      "-m",
      "prorl_jax.main",
      "--config=configs/tiny.py",
      *flags(run_dir, base, steps, **extra),
    ],
    cwd=ROOT,
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def finish(proc, timeout=600):
  out = proc.communicate(timeout=timeout)[0]
  assert proc.returncode == 0, out[-3000:]
  return out


def metrics(run_dir):
  rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
  return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def params_hash(run_dir):
  """(version, sha256) of the newest weights the run published; a run that publishes none (the
  inline engine alone): (its newest checkpoint, sha256 of that checkpoint's params)."""
  exchange = os.path.join(run_dir, "exchange", "weights")
  if not os.path.isdir(exchange):
    return checkpoint_params_hash(run_dir)
  last = sorted(os.listdir(exchange))[-1]
  h = hashlib.sha256()  # the weight files: the model's, or a LoRA version's adapters
  for name in sorted(os.listdir(os.path.join(exchange, last))):
    if name.endswith(".safetensors"):
      h.update(name.encode())
      with open(os.path.join(exchange, last, name), "rb") as f:
        h.update(f.read())
  return last, h.hexdigest()


def checkpoint_params_hash(run_dir):
  import jax  # why: only the inline runs' comparison reads a checkpoint
  import numpy as np
  import orbax.checkpoint as ocp

  ckpts = os.path.join(run_dir, "checkpoints")
  step = max(int(n) for n in os.listdir(ckpts) if n.isdigit())
  state = ocp.PyTreeCheckpointer().restore(os.path.join(ckpts, str(step), "state"))
  h = hashlib.sha256()
  for path, x in jax.tree_util.tree_leaves_with_path(state["params"]):
    h.update(jax.tree_util.keystr(path).encode())
    h.update(np.asarray(x).tobytes())
  return f"step {step}", h.hexdigest()


def last_weights(run_dir):
  """(version, {name: array}) of the newest weights the run published."""
  exchange = os.path.join(run_dir, "exchange", "weights")
  last = sorted(os.listdir(exchange))[-1]
  return last, safetensors.numpy.load_file(os.path.join(exchange, last, "model.safetensors"))


def group(raw_scores, *, uid="", policy_version=0, prompt_ids=(1, 2), width=3, **fields):
  """A `records.Group` of len(raw_scores) responses; unset arrays are plain placeholders
  (responses of `width` tokens, all stopped, none failed)."""
  import numpy as np

  from prorl_jax.records import Group

  raw = np.asarray(raw_scores, np.float32)
  n = len(raw)
  base = dict(
    uid=uid,
    prompt_ids=np.asarray(prompt_ids),
    data_source="math",
    tokens=np.ones((n, width), np.int32),
    gen_logp=np.zeros((n, width), np.float32),
    lengths=np.full(n, width),
    stopped=np.ones(n, bool),
    raw_scores=raw,
    verifier_failed=np.zeros(n, bool),
    policy_version=policy_version,
  )
  base.update({k: np.asarray(v) if isinstance(v, (list, tuple)) else v for k, v in fields.items()})
  return Group(**base)
