"""Verifiable instruction following in the IFEval style, checked on the text after `</think>`.

An item's `extra_info.instructions` is a list of {"type": ..., **args}; the score is the fraction
satisfied (strict). Types (args):
  words / sentences / paragraphs (relation: "at least" | "at most" | "exactly", num)
  keywords_include (keywords), keywords_exclude (keywords)
  keyword_frequency (keyword, relation, num), letter_frequency (letter, relation, num)
  json_format, markdown_bullets (num: exact bullet count), sections (splitter, num)
  title (a <<title>> present), lowercase, uppercase, capital_words (relation, num)
  start_with (phrase), end_with (phrase), no_commas, quotation (whole text quoted)
  placeholders (num: at least this many [placeholders]), postscript (marker, e.g. "P.S.")
  language (language: ISO 639-1 code, detected with langdetect)
  divided_paragraphs (num: exactly this many paragraphs between `***` dividers, none empty)
  nth_paragraph_first_word (num paragraphs split by blank lines, the nth starting with word)
  constrained_response (one of "My answer is yes.", "... no.", "... maybe.")
  highlighted_sections (num: at least this many *highlighted* spans)
  two_responses (two different, non-empty responses separated by ******)
  repeat_prompt (prompt: the response starts with it, word for word)
These are IFEval's 25 instruction types.

The text is read as a reader sees it (`rewards.reading`): NFKC, invisible code points removed,
and, where characters, words or phrases are looked for or forbidden, look-alikes folded to the
ASCII they imitate on both sides (any script's comma is a comma). Case instructions need English
letters, as the reference checker does (langdetect says English); a language instruction is not
met by accents added to English.

Minimums count substance only: words with letters, each five-word run once (a repeated block
counts once; numerals are not words), sentences and paragraphs of two or more words, each once;
sections with a body, distinct placeholders and highlights with a letter in them. Upper bounds
count everything.

No instruction counts before the response is substantive: at least MIN_WORDS words, three of
them different (fewer only when the item itself caps the length lower), not a few words
repeated over and over (under 15% distinct among 100 or more), and not a restatement of the
prompt (`prompt_text`, which the rollout worker passes: three quarters of the response's content
words taken from it, in any order; the prompt an item asks to repeat, and the reply a
constrained-response item offers, are set aside first). Prohibitions and upper bounds ("no
commas", "at most 40 words", "all lowercase") count only for a response about its prompt (one
topic word stem shared): a reply that would fit any prompt meets none of them. JSON is read with
bounds (64 levels): deep JSON is not JSON here.
"""

from __future__ import annotations

import functools
import re

from prorl_jax.rewards import detectors
from prorl_jax.rewards.common import Score, read, without_think_tag
from prorl_jax.rewards.instructions import CHECKS, detect, is_json, tokens
from prorl_jax.rewards.reading import about, as_read, folded, restates
from prorl_jax.rewards.reading import warm as _warm_reading
from prorl_jax.rewards.rendered import rendered, without_comments

MIN_WORDS = 5
UPPER = ("at most", "less than")


def readings(text: str) -> tuple[str, str]:
  """The two readings every instruction is judged in: as typed (the characters, `as_read`) and
  as shown (`rendered.rendered`: Markdown and inline HTML rendered, hidden elements gone, CSS
  case applied, LaTeX typeset, bidirectional overrides displayed; then `as_read`)."""
  return as_read(text), as_read(rendered(text))


def check(text: str, instruction: dict) -> bool:
  """Does `text` follow one instruction in both readings (`readings`)? Credit needs what every
  reader sees; a prohibition holds only where no reader sees it broken."""
  args = {k: v for k, v in instruction.items() if k != "type"}
  kind = instruction.get("type")
  if kind not in CHECKS:
    raise ValueError(f"unknown instruction type {kind!r}; known: {', '.join(sorted(CHECKS))}")
  if kind == "json_format":  # JSON is read as written: Markdown escapes are JSON's own
    return is_json(as_read(without_comments(text)))
  if kind == "repeat_prompt":
    prompt = str(args.get("prompt", ""))
    typed, shown = readings(text)
    return CHECKS[kind](typed, as_read(prompt)) and CHECKS[kind](shown, as_read(rendered(prompt)))
  typed, shown = readings(text)
  if kind == "no_commas":  # a combining comma typed apart is composed away by NFKC (`s` + U+0326)
    typed = text
  return CHECKS[kind](typed, **args) and CHECKS[kind](shown, **args)


def restrictive(instruction: dict) -> bool:
  """A prohibition or an upper bound: met by saying little, so met only on the prompt's topic."""
  kind = instruction.get("type")
  return kind in ("no_commas", "keywords_exclude", "lowercase", "uppercase") or (
    instruction.get("relation") in UPPER
  )


def _word_cap(instructions: list[dict]) -> int | None:
  """The fewest words an item's own instructions allow, when they cap the length (a
  constrained response is the four words of "My answer is yes.")."""
  caps = [
    int(i["num"]) - (i["relation"] == "less than")
    for i in instructions
    if i.get("type") == "words" and i.get("relation") in ("at most", "less than", "exactly")
  ] + [4 for i in instructions if i.get("type") == "constrained_response"]
  return min(caps) if caps else None


def _own_words(
  text: str, instructions: list[dict], offered: bool = True, phrases: bool = True
) -> str:
  """The response without the words its instructions dictate: the prompt an item asks it to
  repeat, the reply it offers, the phrase it must start or end with. What an instruction
  dictates is never substance (an end phrase alone is not a response); `offered=False` keeps
  the offered reply (a constrained response is its whole answer), `phrases=False` the start and
  end phrases (a restatement is judged with them: the prompt's own words)."""
  for i in instructions:
    kind = i.get("type")
    prompt = folded(str(i.get("prompt", ""))).strip().lower()
    if kind == "repeat_prompt" and folded(text).strip().lower().startswith(prompt):
      text = folded(text).strip()[len(prompt) :]
    if kind == "constrained_response" and offered:  # the reply the prompt itself offers
      text = re.sub(r"My answer is (?:yes|no|maybe)\.", " ", folded(text), flags=re.I)
    if phrases and kind in ("end_with", "start_with") and str(i.get("phrase", "")).strip():
      phrase = re.escape(folded(str(i["phrase"])).strip())
      text = re.sub(phrase, " ", folded(text), flags=re.I)
  return text


def substantive(text: str, instructions: list[dict], prompt_text: str | None = None) -> str | None:
  """None when the response can be judged; else why not (see the module docstring)."""
  words = [w.lower() for w in tokens(as_read(_own_words(text, instructions, offered=False)))]
  cap = _word_cap(instructions)
  need = MIN_WORDS if cap is None else max(1, min(MIN_WORDS, cap))
  if len(words) < need or len(set(words)) < min(3, need):
    return f"no substantive response (fewer than {need} words)"
  if len(words) >= 100 and len(set(words)) < 0.15 * len(words):
    return "no substantive response (a few words repeated)"
  if prompt_text and restates(_own_words(text, instructions, phrases=False), prompt_text):
    return "no substantive response (restates the prompt)"
  return None


def hack_flags(final: str, response: str, prompt_text: str | None) -> list[str]:
  """The detectors' flags of an instruction-following answer: filler, a restatement."""
  out = ["filler"] if detectors.filler(final) else []
  if prompt_text and restates(final, without_think_tag(prompt_text)):
    out.append("restatement")
  return out


@functools.cache
def _warm_languages():
  detect("warm up the language profiles")


def warm(reference=None, *, instructions=None, **_):
  """Loads ICU, the word lists and langdetect's profiles in the pool process (before the fork),
  once."""
  _warm_reading()
  if any(
    isinstance(i, dict) and i.get("type") in ("language", "lowercase", "uppercase")
    for i in instructions or []
  ):
    _warm_languages()


def score(
  response: str,
  reference=None,
  *,
  instructions: list[dict] | None = None,
  prompt_text: str | None = None,
  **_,
) -> Score:
  """The share of the prompt's IFEval instructions the response follows (continuous in [0, 1]); a
  response that restates the prompt, or is empty after the think block, earns 0; prohibitions
  and upper bounds count only for a response about its prompt."""
  if not instructions:
    return Score(0.0, "item has no extra_info.instructions", failed=True)
  said = read(response, prompt_text)
  final = said.answer
  if final is None:
    return Score(0.0, said.why)
  prompt_text = without_think_tag(prompt_text)
  seen = rendered(final)  # what a reader sees: the substance and the topic are read in it
  why = substantive(seen, instructions, prompt_text)
  if why:
    return Score(0.0, why)
  other_language = any(
    i.get("type") == "language" and i.get("language") != "en" for i in instructions
  )  # the topic is read in English
  judged = any(restrictive(i) for i in instructions) and prompt_text and not other_language
  on_topic = not judged or about(_own_words(seen, instructions), prompt_text)
  ok = [check(final, ins) and (on_topic or not restrictive(ins)) for ins in instructions]
  failed = [ins["type"] for ins, good in zip(instructions, ok) if not good]
  why = "" if on_topic else " (not about the prompt: prohibitions and caps unmet)"
  return Score(sum(ok) / len(ok), ("all followed" if not failed else f"failed: {failed}") + why)
