"""The peers of bench/gpu.py, in transformers/torch: the train step (`torch`) and `generate`
(`sampler_hf`) on the same shapes as the JAX stages, run in a process of their own (JAX and torch
each hold on to the GPU memory they used):

  python bench/gpu.py --stages=torch,sampler_hf --out SAME_DIR
"""

from __future__ import annotations

from benchutil import (
  H200_BF16_DENSE,
  big_cfg,
  hf_sample,
  median_time,
  model_flops_per_token,
  sampler_shape,
)


def _hf_config(model_cfg):
  """The transformers config of `model_cfg` (the one its config.json holds), on SDPA attention."""
  import transformers

  return transformers.Qwen2Config(**model_cfg.to_hf_dict(), attn_implementation="sdpa")


def stage_torch(args):
  import torch
  import transformers

  model_cfg = big_cfg("xla", args)
  b, t, micro = (4, 128, 2) if args.smoke else (args.seqs, args.seq_len, args.micro_batches)
  dev = "cuda" if torch.cuda.is_available() else "cpu"
  with torch.device(dev):
    model = transformers.Qwen2ForCausalLM(_hf_config(model_cfg)).train()
  model.gradient_checkpointing_enable()
  opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.01, fused=dev == "cuda")
  ids = torch.randint(0, model_cfg.vocab_size, (b, t), device=dev)
  mb = b // micro

  def run():
    opt.zero_grad(set_to_none=True)
    for i in range(micro):
      with torch.autocast(dev, dtype=torch.bfloat16):
        loss = model(input_ids=ids[i * mb : (i + 1) * mb], labels=ids[i * mb : (i + 1) * mb]).loss
      (loss / micro).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if dev == "cuda":
      torch.cuda.synchronize()

  dt = median_time(run, args.steps)
  flops = model_flops_per_token(model_cfg, t) * b * t
  return {
    "torch": torch.__version__,
    "step_s": round(dt, 3),
    "tokens_per_s": round(b * t / dt),
    "mfu_vs_989": round(flops / dt / H200_BF16_DENSE, 3),
  }


def stage_sampler_hf(args, batch=None):
  import torch
  import transformers

  model_cfg = big_cfg("xla", args)
  b, p, n = sampler_shape(args, batch)
  dev = "cuda" if torch.cuda.is_available() else "cpu"
  with torch.device(dev):
    model = transformers.Qwen2ForCausalLM(_hf_config(model_cfg)).to(torch.bfloat16).eval()
  ids = torch.randint(1, model_cfg.vocab_size, (b, p), device=dev)

  def hf():
    hf_sample(model, ids, n)
    if dev == "cuda":
      torch.cuda.synchronize()

  ht = median_time(hf, 1)
  return {
    "torch": torch.__version__,
    "batch": b,
    "prompt": p,
    "new_tokens": n,
    "tokens_per_s": round(b * n / ht),
  }
