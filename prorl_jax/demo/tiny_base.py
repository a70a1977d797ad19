"""The CPU demo's base model: a character-level tokenizer and a from-scratch tiny Qwen2.

Built once into a directory (cached in the run dir) as a normal HF model directory, so every other
part of the stack loads it exactly like DeepSeek-R1-Distill-Qwen-1.5B.
"""

from __future__ import annotations

import os

import jax

from prorl_jax.model import init_params, presets, save_hf

SPECIALS = ("<pad>", "<bos>", "<eos>")
TAGS = ("<answer>", "</answer>")
CHARS = tuple("0123456789") + tuple("+-*=,;| ")
CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"


def build_tokenizer(path: str):
  """A 23-token character tokenizer that `AutoTokenizer.from_pretrained(path)` loads."""
  # lazy: building the tiny tokenizer is the only use of these (slow to import)
  import tokenizers
  import transformers
  from tokenizers import Regex, models, pre_tokenizers

  vocab = {tok: i for i, tok in enumerate(SPECIALS + TAGS + CHARS)}
  tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
  tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
  tok.add_special_tokens(list(SPECIALS))
  tok.add_tokens([tokenizers.AddedToken(t, normalized=False) for t in TAGS])
  fast = transformers.PreTrainedTokenizerFast(
    tokenizer_object=tok,
    bos_token="<bos>",
    eos_token="<eos>",
    pad_token="<pad>",
    padding_side="left",
  )
  fast.chat_template = CHAT_TEMPLATE
  fast.save_pretrained(path)
  return fast


def build(path: str, seed: int = 0) -> str:
  """Tokenizer + random tiny Qwen2 in `path` (skipped when already there); returns `path`."""
  if os.path.isfile(os.path.join(path, "config.json")):
    return path
  tmp = path.rstrip("/") + ".tmp"
  tok = build_tokenizer(tmp)
  model_cfg = presets.tiny(
    vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id
  )
  save_hf(model_cfg, init_params(model_cfg, jax.random.PRNGKey(seed)), tmp, tokenizer_dir=tmp)
  os.replace(tmp, path)  # readers never see a half-built directory
  return path
