"""IFEval's 25 instruction types, each a check of one reading of a response (`CHECKS`):
`ifeval.check` runs every check on the text as typed and as shown. Minimums count substance
(words with letters, each five-word run once, distinct sentences, paragraphs, sections,
placeholders and highlights); upper bounds count everything; characters, words and phrases are
compared with look-alikes folded on both sides (`reading.folded`)."""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Callable

from prorl_jax.rewards.common import load_json
from prorl_jax.rewards.reading import commas, folded, letter_words, substantive_words

MINIMUM = ("at least",)  # relations that count substance; the others count everything


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


def tokens(t):
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
    return substantive_words(t) if relation in MINIMUM else len(tokens(t))
  parts = _sentences(t) if kind == "sentences" else _paragraphs(t)
  return len(_distinct(parts)) if relation in MINIMUM else len(parts)


def is_json(t):
  s = t.strip()
  s = re.sub(r"^```(?:json)?\s*|\s*```$", "", s, flags=re.I)
  try:
    load_json(s)
    return True
  except ValueError:
    return False


@functools.lru_cache(maxsize=256)
def detect(t: str) -> str | None:
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
  if detect(t) != language:
    return False
  return language == "en" or detect(_unaccented(t)) != "en"


def _english_case(t: str, upper: bool) -> bool:
  """All cased letters in one case, and English (the reference checker's langdetect rule):
  text in a script without case is not in capitals or in lowercase."""
  if t != (t.upper() if upper else t.lower()):
    return False
  cased = [c for c in t if c.isalpha() and c.lower() != c.upper()]
  english = detect(t.lower()) == "en"  # langdetect misreads capitals: it reads them lowered
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
  "json_format": lambda t: is_json(t),
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
