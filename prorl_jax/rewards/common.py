"""Shared answer extraction: the text after the reasoning, boxed answers, answer tags."""

from __future__ import annotations

import re

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def after_think(response: str) -> str | None:
  """The text after the last `</think>`; the whole text when there is no think block; None when
  a `<think>` block is left unfinished (the model never gave a final answer)."""
  if "</think>" in response:
    return response.rsplit("</think>", 1)[1]
  if "<think>" in response:
    return None
  return response


def last_boxed(text: str) -> str | None:
  r"""Content of the last `\boxed{...}` (balanced braces), or of `\boxed x`; None if absent."""
  i = text.rfind("\\boxed")
  if i < 0:
    return None
  j = i + len("\\boxed")
  if j < len(text) and text[j] == " ":
    m = re.match(r" (\S+)", text[j:])
    return m.group(1).rstrip("$.") if m else None
  if j >= len(text) or text[j] != "{":
    return None
  depth, k = 0, j
  while k < len(text):
    if text[k] == "{":
      depth += 1
    elif text[k] == "}":
      depth -= 1
      if depth == 0:
        return text[j + 1 : k]
    k += 1
  return None  # unbalanced: the box never closed


def answer_tag(text: str) -> str | None:
  found = _ANSWER_TAG.findall(text)
  return found[-1].strip() if found else None
