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
import unicodedata
from typing import Callable

from prorl_jax.rewards import detectors
from prorl_jax.rewards.common import Score, load_json, read, without_think_tag
from prorl_jax.rewards.reading import (
  about,
  as_read,
  commas,
  folded,
  letter_words,
  restates,
  substantive_words,
)
from prorl_jax.rewards.reading import warm as _warm_reading
from prorl_jax.rewards.rendered import rendered, without_comments

MIN_WORDS = 5
MINIMUM = ("at least",)  # relations that count substance; the others count everything
UPPER = ("at most", "less than")


def _compare(value: int, relation: str, num: int) -> bool:
  if relation == "at least":
    return value >= num
  if relation == "at most":
    return value <= num
  if relation in ("exactly", "equal"):
    return value == num
  if relation == "less than":
    return value < num
  raise ValueError(f"unknown relation {relation!r}")


def _tokens(t):
  return re.findall(r"\b\w+\b", t)


def _sentences(t):
  return [s for s in re.split(r"(?<=[.!?。！？])\s*", t.strip()) if s.strip()]


def _paragraphs(t):
  return [p for p in re.split(r"\n\s*\n|\*\*\*", t.strip()) if p.strip()]


def _distinct(parts: list[str], words: int = 2) -> list[str]:
  """The parts with `words` or more words, each text once (case and spacing aside)."""
  seen, out = set(), []
  for p in parts:
    w = tuple(letter_words(p))
    if len(w) >= words and w not in seen:
      seen.add(w)
      out.append(p)
  return out


def _count(kind: str, t: str, relation: str) -> int:
  """Words, sentences or paragraphs: substance for a minimum, everything for a cap."""
  if kind == "words":
    return substantive_words(t) if relation in MINIMUM else len(_tokens(t))
  parts = _sentences(t) if kind == "sentences" else _paragraphs(t)
  return len(_distinct(parts)) if relation in MINIMUM else len(parts)


def _json(t):
  s = t.strip()
  s = re.sub(r"^```(?:json)?\s*|\s*```$", "", s, flags=re.I)
  try:
    load_json(s)
    return True
  except ValueError:
    return False


def _detect(t: str) -> str | None:
  import langdetect  # lazy: only the language and case instructions need it (slow to import)

  langdetect.DetectorFactory.seed = 0  # langdetect samples: fixed for repeatable scores
  try:
    return langdetect.detect(t)
  except langdetect.LangDetectException:  # no letters to judge by
    return None


def _unaccented(t: str) -> str:
  return "".join(c for c in unicodedata.normalize("NFD", t) if not unicodedata.combining(c))


def _language(t: str, language: str) -> bool:
  """langdetect reads `language`, and the text without its accents is not English (English
  with accents added reads as French, Swedish, Vietnamese...)."""
  if _detect(t) != language:
    return False
  return language == "en" or _detect(_unaccented(t)) != "en"


def _english_case(t: str, upper: bool) -> bool:
  """All cased letters in one case, and English (the reference checker's langdetect rule):
  text in a script without case is not in capitals or in lowercase."""
  if t != (t.upper() if upper else t.lower()):
    return False
  cased = [c for c in t if c.isalpha() and c.lower() != c.upper()]
  english = _detect(t.lower()) == "en"  # langdetect misreads capitals: it reads them lowered
  return len(cased) >= 0.5 * sum(c.isalpha() for c in t) > 0 and english


def _divided_paragraphs(t: str, num: int) -> bool:
  parts = [p.strip() for p in re.split(r"\s?\*\*\*\s?", t.strip())]
  if parts and not parts[-1]:  # a divider after the last paragraph (IFEval allows one)
    parts = parts[:-1]
  if parts and not parts[0]:
    parts = parts[1:]
  return len(parts) == num and len(_distinct(parts)) == num


def _nth_paragraph_first_word(t: str, num: int, nth: int, word: str) -> bool:
  parts = [p for p in re.split(r"\n\n", t) if p.strip()]
  if len(parts) != num or not 1 <= nth <= num or len(_distinct(parts)) != num:
    return False
  first = re.split(r"\s+", folded(parts[nth - 1]).strip(), maxsplit=1)[0]
  return first.strip("\"'.,;:!?*()[]{}").lower() == folded(word).lower()


def _same_words(a: str, b: str) -> bool:
  """Nine tenths or more of the shorter reply's words (in any order) are the other's."""
  wa, wb = letter_words(a), letter_words(b)
  if not wa or not wb:
    return True
  short, other = (wa, set(wb)) if len(wa) <= len(wb) else (wb, set(wa))
  return sum(w in other for w in short) >= 0.9 * len(short)


def _two_responses(t: str) -> bool:
  parts = t.split("******")
  if any(not p.strip() for p in parts[1:-1]):
    return False
  parts = [p.strip() for p in parts if p.strip()]  # a separator may open or close the text
  return len(parts) == 2 and len(_distinct(parts, 3)) == 2 and not _same_words(*parts)


_MARKUP = "*_#>` \t"  # Markdown emphasis, headings and quotes around a line's words


def _end_with(t: str, phrase: str) -> bool:
  end = folded(t).strip().rstrip(_MARKUP + '"').strip().lower()
  return end.endswith(folded(phrase).strip().rstrip(_MARKUP + '"').strip().lower())


def _postscript(t: str, marker: str) -> bool:
  m = folded(marker).strip()
  if m.lower() in ("p.s.", "p.s"):
    pattern = r"p\.\s?s\.?"
  elif m.lower() in ("p.p.s.", "p.p.s"):
    pattern = r"p\.\s?p\.\s?s\.?"
  else:
    pattern = re.escape(m)
  found = re.search(r"^[\s*_#>]*" + pattern + r"(.*(?:\n.*)*)", folded(t), re.M | re.I)
  return found is not None and bool(letter_words(found.group(1)))


def _sections(t: str, splitter: str, num: int) -> bool:
  head = r"^[\s*_#>]*" + re.escape(folded(splitter).strip()) + r"\s?\d+"
  bodies = re.split(head, folded(t), flags=re.M | re.I)[1:]
  return len(bodies) >= num and len(_distinct(bodies)) >= num


def _bullets(t: str) -> int:
  items = re.findall(r"^\s*\*[^*](.*)$", t, re.M) + re.findall(r"^\s*-(.*)$", t, re.M)
  return len(items) if len(_distinct(items, 1)) == len(items) else -1


def _capital_words(t: str) -> int:
  """Words written in capitals (IFEval counts every token with `isupper()`, "I" and "A" too)."""
  return sum(w.isupper() for w in re.findall(r"[^\W_]+(?:['.-][^\W_]+)*", t))


def _found(t: str, pattern: str) -> list[str]:
  return re.findall(pattern, folded(t), re.I)


def _keyword(k: str) -> str:
  return r"\b" + re.escape(folded(k)) + r"\b"


def _quoted(t: str) -> bool:
  s = folded(t).strip()
  return len(s) > 1 and s[0] in '"“„«' and s[-1] in '"”»'


CHECKS: dict[str, Callable[..., bool]] = {
  "words": lambda t, relation, num: _compare(_count("words", t, relation), relation, num),
  "sentences": lambda t, relation, num: _compare(_count("sentences", t, relation), relation, num),
  "paragraphs": lambda t, relation, num: _compare(_count("paragraphs", t, relation), relation, num),
  "keywords_include": lambda t, keywords: all(_found(t, re.escape(folded(k))) for k in keywords),
  "keywords_exclude": lambda t, keywords: not any(_found(t, _keyword(k)) for k in keywords),
  "keyword_frequency": lambda t, keyword, relation, num: _compare(
    len(_found(t, _keyword(keyword))), relation, num
  ),
  "letter_frequency": lambda t, letter, relation, num: _compare(
    len(_found(t, re.escape(folded(letter)))), relation, num
  ),
  "json_format": lambda t: _json(t),
  "markdown_bullets": lambda t, num: _bullets(t) == num,
  "sections": _sections,
  "title": lambda t: re.search(r"<<[^\n]*[^\W\d_][^\n]*>>", t) is not None,
  "lowercase": lambda t: _english_case(t, upper=False),
  "uppercase": lambda t: _english_case(t, upper=True),
  "capital_words": lambda t, relation, num: _compare(_capital_words(t), relation, num),
  "start_with": lambda t, phrase: folded(t).strip().lower().startswith(folded(phrase).lower()),
  "end_with": _end_with,
  "no_commas": lambda t: commas(t) == 0,
  "quotation": _quoted,
  "placeholders": lambda t, num: len({p.lower() for p in _found(t, r"\[([^\]]*[^\W\d_][^\]]*)\]")})
  >= num,
  "postscript": _postscript,
  "language": _language,
  "divided_paragraphs": _divided_paragraphs,
  "nth_paragraph_first_word": _nth_paragraph_first_word,
  "constrained_response": lambda t: any(
    f"my answer is {a}." in folded(t).lower() for a in ("yes", "no", "maybe")
  ),
  "highlighted_sections": lambda t, num: len(
    {h.strip().lower() for h in re.findall(r"\*\*?([^\n*]+)\*\*?", t) if letter_words(h)}
  )
  >= num,
  "two_responses": _two_responses,
  "repeat_prompt": lambda t, prompt: folded(t)
  .strip()
  .lower()
  .startswith(folded(prompt).strip().lower()),
}


def check(text: str, instruction: dict) -> bool:
  """Does `text`, read as a reader sees it (`rendered.rendered`: Markdown rendered, comments,
  link destinations and reference definitions dropped; then `reading.as_read`), follow one
  instruction?"""
  args = {k: v for k, v in instruction.items() if k != "type"}
  kind = instruction.get("type")
  if kind not in CHECKS:
    raise ValueError(f"unknown instruction type {kind!r}; known: {', '.join(sorted(CHECKS))}")
  if kind == "json_format":  # JSON is read as written: Markdown escapes are JSON's own
    return _json(as_read(without_comments(text)))
  if kind == "repeat_prompt":
    args["prompt"] = as_read(rendered(str(args.get("prompt", ""))))
  return bool(CHECKS[kind](as_read(rendered(text)), **args))


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


def _own_words(text: str, instructions: list[dict]) -> str:
  """The response without the prompt an item asks it to repeat and the reply it offers."""
  for i in instructions:
    prompt = folded(str(i.get("prompt", ""))).strip().lower()
    if i.get("type") == "repeat_prompt" and folded(text).strip().lower().startswith(prompt):
      text = folded(text).strip()[len(prompt) :]
    if i.get("type") == "constrained_response":  # the reply the prompt itself offers
      text = re.sub(r"My answer is (?:yes|no|maybe)\.", " ", folded(text), flags=re.I)
  return text


def substantive(text: str, instructions: list[dict], prompt_text: str | None = None) -> str | None:
  """None when the response can be judged; else why not (see the module docstring)."""
  words = [w.lower() for w in _tokens(as_read(text))]
  cap = _word_cap(instructions)
  need = MIN_WORDS if cap is None else max(1, min(MIN_WORDS, cap))
  if len(words) < need or len(set(words)) < min(3, need):
    return f"no substantive response (fewer than {need} words)"
  if len(words) >= 100 and len(set(words)) < 0.15 * len(words):
    return "no substantive response (a few words repeated)"
  if prompt_text and restates(_own_words(text, instructions), prompt_text):
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
  _detect("warm up the language profiles")


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
