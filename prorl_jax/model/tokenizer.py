"""Tokenizer loading (local directory only, never a hub) and chat-template prompts."""

from __future__ import annotations

import os


def load_tokenizer(path: str):
  """`AutoTokenizer` from a model directory; a clear error when the files are not there."""
  if not os.path.isfile(os.path.join(path, "tokenizer.json")) and not os.path.isfile(
    os.path.join(path, "tokenizer_config.json")
  ):
    raise FileNotFoundError(
      f"no tokenizer.json / tokenizer_config.json in {path}: copy the "
      "model's tokenizer files into the model directory"
    )
  import transformers  # heavy import, only when a tokenizer is needed

  return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)


def prompt_ids(tokenizer, messages, use_chat_template: bool = True) -> list[int]:
  """Token ids of a prompt: chat messages through the tokenizer's template, or raw text."""
  if isinstance(messages, str):
    messages = [{"role": "user", "content": messages}]
  if use_chat_template and getattr(tokenizer, "chat_template", None):
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
      ids = ids["input_ids"]
    return list(ids)
  text = "".join(m["content"] for m in messages)
  return tokenizer.encode(text, add_special_tokens=True)
