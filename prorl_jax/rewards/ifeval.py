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

No instruction counts before the response is substantive: at least MIN_WORDS words, three of
them different (fewer only when the item itself caps the length lower), not a few words
repeated over and over (under 15% distinct among 100 or more), and not a restatement of the
prompt (`prompt_text`, which the rollout worker passes: half or more of the response's word
trigrams taken from it; the prompt an item asks to repeat, and the reply a constrained-response
item offers, are set aside first). Prohibitions and
upper bounds ("no commas", "at most 40 words") are otherwise met by saying nothing, keyword
instructions by copying the prompt, length minimums by filler. JSON is read with bounds (64
levels): deep JSON is not JSON here.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Callable

from prorl_jax.rewards.common import Score, after_think, load_json

MIN_WORDS = 5


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


def _words(t):
  return re.findall(r"\b\w+\b", t)


def _sentences(t):
  return [s for s in re.split(r"(?<=[.!?])\s+", t.strip()) if s.strip()]


def _paragraphs(t):
  return [p for p in re.split(r"\n\s*\n|\*\*\*", t.strip()) if p.strip()]


def _json(t):
  s = t.strip()
  s = re.sub(r"^```(?:json)?\s*|\s*```$", "", s, flags=re.I)
  try:
    load_json(s)
    return True
  except ValueError:
    return False


def _language(t: str, language: str) -> bool:
  import langdetect  # lazy: only the language instructions need it (slow to import)

  langdetect.DetectorFactory.seed = 0  # langdetect samples: fixed for repeatable scores
  try:
    return langdetect.detect(t) == language
  except langdetect.LangDetectException:  # no letters to judge by
    return False


def _divided_paragraphs(t: str, num: int) -> bool:
  parts = [p.strip() for p in re.split(r"\s?\*\*\*\s?", t.strip())]
  if parts and not parts[-1]:  # a divider after the last paragraph (IFEval allows one)
    parts = parts[:-1]
  if parts and not parts[0]:
    parts = parts[1:]
  return all(parts) and len(parts) == num


def _nth_paragraph_first_word(t: str, num: int, nth: int, word: str) -> bool:
  parts = [p for p in re.split(r"\n\n", t) if p.strip()]
  if len(parts) != num or not 1 <= nth <= num:
    return False
  first = re.split(r"\s+", parts[nth - 1].strip(), maxsplit=1)[0]
  return first.strip("\"'.,;:!?*()[]{}").lower() == word.lower()


def _two_responses(t: str) -> bool:
  parts = t.split("******")
  if any(not p.strip() for p in parts[1:-1]):
    return False
  parts = [p.strip() for p in parts if p.strip()]  # a separator may open or close the text
  return len(parts) == 2 and parts[0] != parts[1]


_MARKUP = "*_#>` \t"  # Markdown emphasis, headings and quotes around a line's words


def _end_with(t: str, phrase: str) -> bool:
  end = t.strip().rstrip(_MARKUP + '"“”').strip().lower()
  return end.endswith(phrase.strip().rstrip(_MARKUP + '"').strip().lower())


def _postscript(t: str, marker: str) -> bool:
  m = marker.strip()
  if m.lower() in ("p.s.", "p.s"):
    pattern = r"p\.\s?s\.?"
  elif m.lower() in ("p.p.s.", "p.p.s"):
    pattern = r"p\.\s?p\.\s?s\.?"
  else:
    pattern = re.escape(m)
  return re.search(r"^[\s*_#>]*" + pattern, t, re.M | re.I) is not None


def _sections(t: str, splitter: str, num: int) -> bool:
  found = re.findall(r"^[\s*_#>]*" + re.escape(splitter.strip()) + r"\s?\d+", t, re.M | re.I)
  return len(found) >= num


def _bullets(t: str) -> int:
  return len(re.findall(r"^\s*\*[^*].*$", t, re.M)) + len(re.findall(r"^\s*-.*$", t, re.M))


def _capital_words(t: str) -> int:
  """Words written in capitals (IFEval counts every token with `isupper()`, "I" and "A" too)."""
  return sum(w.isupper() for w in re.findall(r"[^\W_]+(?:['.-][^\W_]+)*", t))


CHECKS: dict[str, Callable[..., bool]] = {
  "words": lambda t, relation, num: _compare(len(_words(t)), relation, num),
  "sentences": lambda t, relation, num: _compare(len(_sentences(t)), relation, num),
  "paragraphs": lambda t, relation, num: _compare(len(_paragraphs(t)), relation, num),
  "keywords_include": lambda t, keywords: all(re.search(re.escape(k), t, re.I) for k in keywords),
  "keywords_exclude": lambda t, keywords: not any(
    re.search(r"\b" + re.escape(k) + r"\b", t, re.I) for k in keywords
  ),
  "keyword_frequency": lambda t, keyword, relation, num: _compare(
    len(re.findall(r"\b" + re.escape(keyword) + r"\b", t, re.I)), relation, num
  ),
  "letter_frequency": lambda t, letter, relation, num: _compare(
    t.lower().count(letter.lower()), relation, num
  ),
  "json_format": lambda t: _json(t),
  "markdown_bullets": lambda t, num: _bullets(t) == num,
  "sections": _sections,
  "title": lambda t: re.search(r"<<[^\n]+>>", t) is not None,
  "lowercase": lambda t: t == t.lower() and any(c.isalpha() for c in t),
  "uppercase": lambda t: t == t.upper() and any(c.isalpha() for c in t),
  "capital_words": lambda t, relation, num: _compare(_capital_words(t), relation, num),
  "start_with": lambda t, phrase: t.strip().lower().startswith(phrase.lower()),
  "end_with": _end_with,
  "no_commas": lambda t: "," not in t,
  "quotation": lambda t: len(t.strip()) > 1 and t.strip()[0] in '"“' and t.strip()[-1] in '"”',
  "placeholders": lambda t, num: len(re.findall(r"\[[^\]]+\]", t)) >= num,
  "postscript": _postscript,
  "language": _language,
  "divided_paragraphs": _divided_paragraphs,
  "nth_paragraph_first_word": _nth_paragraph_first_word,
  "constrained_response": lambda t: any(f"My answer is {a}." in t for a in ("yes", "no", "maybe")),
  "highlighted_sections": lambda t, num: len(
    [h for h in re.findall(r"\*\*?([^\n*]+)\*\*?", t) if h.strip()]
  )
  >= num,
  "two_responses": _two_responses,
  "repeat_prompt": lambda t, prompt: t.strip().lower().startswith(prompt.strip().lower()),
}


# Default-ignorable code points a reader never sees (zero-width spaces and joiners, soft hyphen,
# word joiner, byte-order mark, variation selectors, bidi controls): Unicode's
# Default_Ignorable_Code_Point property, the ranges in common use.
_IGNORABLE = re.compile(
  "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
  "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001bca0-\U0001bca3\U000e0000-\U000e0fff]"
)


def as_read(text: str) -> str:
  """The text as a reader sees it: Unicode NFKC (a fullwidth comma is a comma, math-bold
  capitals are capitals) with default-ignorable code points removed (a zero-width space or a
  soft hyphen inside a forbidden word hides nothing)."""
  return _IGNORABLE.sub("", unicodedata.normalize("NFKC", text))


def check(text: str, instruction: dict) -> bool:
  """Does `text` (read as a reader sees it: `as_read`) follow one instruction?"""
  args = {k: v for k, v in instruction.items() if k != "type"}
  kind = instruction.get("type")
  if kind not in CHECKS:
    raise ValueError(f"unknown instruction type {kind!r}; known: {', '.join(sorted(CHECKS))}")
  return bool(CHECKS[kind](as_read(text), **args))


def _word_cap(instructions: list[dict]) -> int | None:
  """The fewest words an item's own instructions allow, when they cap the length (a
  constrained response is the four words of "My answer is yes.")."""
  caps = [
    int(i["num"]) - (i["relation"] == "less than")
    for i in instructions
    if i.get("type") == "words" and i.get("relation") in ("at most", "less than", "exactly")
  ] + [4 for i in instructions if i.get("type") == "constrained_response"]
  return min(caps) if caps else None


def _trigrams(words: list[str]) -> set[tuple[str, ...]]:
  return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def restates(text: str, prompt_text: str, instructions: list[dict]) -> bool:
  """Half or more of the response's word trigrams come from the prompt (after the prompt an
  item asks to repeat is set aside)."""
  for i in instructions:
    if i.get("type") == "repeat_prompt" and text.strip().lower().startswith(
      str(i.get("prompt", "")).strip().lower()
    ):
      text = text.strip()[len(str(i["prompt"]).strip()) :]
    if i.get("type") == "constrained_response":  # the reply the prompt itself offers
      text = re.sub(r"My answer is (?:yes|no|maybe)\.", " ", text)
  got = _trigrams([w.lower() for w in _words(text)])
  if not got:
    return False
  source = _trigrams([w.lower() for w in _words(prompt_text)])
  return len(got & source) >= 0.5 * len(got)


def substantive(text: str, instructions: list[dict], prompt_text: str | None = None) -> str | None:
  """None when the response can be judged; else why not (see the module docstring)."""
  words = [w.lower() for w in _words(text)]
  cap = _word_cap(instructions)
  need = MIN_WORDS if cap is None else max(1, min(MIN_WORDS, cap))
  if len(words) < need or len(set(words)) < min(3, need):
    return f"no substantive response (fewer than {need} words)"
  if len(words) >= 100 and len(set(words)) < 0.15 * len(words):
    return "no substantive response (a few words repeated)"
  if prompt_text and restates(text, prompt_text, instructions):
    return "no substantive response (restates the prompt)"
  return None


@functools.cache
def _warm_languages():
  _language("warm up the language profiles", "en")


def warm(reference=None, *, instructions=None, **_):
  """Loads langdetect's language profiles in the pool process (before the fork), once."""
  if any(isinstance(i, dict) and i.get("type") == "language" for i in instructions or []):
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
  response that restates the prompt, or is empty after the think block, earns 0."""
  if not instructions:
    return Score(0.0, "item has no extra_info.instructions", failed=True)
  final = after_think(response)
  if final is None:
    return Score(0.0, "unfinished <think> block")
  why = substantive(final, instructions, prompt_text)
  if why:
    return Score(0.0, why)
  ok = [check(final, ins) for ins in instructions]
  failed = [ins["type"] for ins, good in zip(instructions, ok) if not good]
  return Score(sum(ok) / len(ok), "all followed" if not failed else f"failed: {failed}")


# IFEval's instruction ids (google/IFEval, Llama-Nemotron RL) -> the instruction types here,
# with IFEval's kwargs renamed.
IFEVAL_IDS: dict[str, tuple[str, dict[str, str]]] = {
  "length_constraints:number_words": ("words", {"relation": "relation", "num_words": "num"}),
  "length_constraints:number_sentences": (
    "sentences",
    {"relation": "relation", "num_sentences": "num"},
  ),
  "keywords:existence": ("keywords_include", {"keywords": "keywords"}),
  "keywords:forbidden_words": ("keywords_exclude", {"forbidden_words": "keywords"}),
  "keywords:frequency": (
    "keyword_frequency",
    {"keyword": "keyword", "frequency": "num", "relation": "relation"},
  ),
  "keywords:letter_frequency": (
    "letter_frequency",
    {"letter": "letter", "let_frequency": "num", "let_relation": "relation"},
  ),
  "detectable_format:json_format": ("json_format", {}),
  "detectable_format:number_bullet_lists": ("markdown_bullets", {"num_bullets": "num"}),
  "detectable_format:multiple_sections": (
    "sections",
    {"section_spliter": "splitter", "num_sections": "num"},
  ),
  "detectable_format:title": ("title", {}),
  "change_case:english_lowercase": ("lowercase", {}),
  "change_case:english_capital": ("uppercase", {}),
  "change_case:capital_word_frequency": (
    "capital_words",
    {"capital_frequency": "num", "capital_relation": "relation"},
  ),
  "startend:end_checker": ("end_with", {"end_phrase": "phrase"}),
  "startend:quotation": ("quotation", {}),
  "punctuation:no_comma": ("no_commas", {}),
  "detectable_content:number_placeholders": ("placeholders", {"num_placeholders": "num"}),
  "detectable_content:postscript": ("postscript", {"postscript_marker": "marker"}),
  "language:response_language": ("language", {"language": "language"}),
  "length_constraints:number_paragraphs": ("divided_paragraphs", {"num_paragraphs": "num"}),
  "length_constraints:nth_paragraph_first_word": (
    "nth_paragraph_first_word",
    {"num_paragraphs": "num", "nth_paragraph": "nth", "first_word": "word"},
  ),
  "detectable_format:constrained_response": ("constrained_response", {}),
  "detectable_format:number_highlighted_sections": (
    "highlighted_sections",
    {"num_highlights": "num"},
  ),
  "combination:two_responses": ("two_responses", {}),
  "combination:repeat_prompt": ("repeat_prompt", {"prompt_to_repeat": "prompt"}),
}


def from_ifeval(ids: list, kwargs: list) -> list[dict]:
  """IFEval `instruction_id_list` + `kwargs` -> the ifeval verifier's instructions."""
  if not isinstance(ids, list) or not ids:
    raise ValueError("no instruction ids")
  if not isinstance(kwargs, list):  # missing arguments are never read as "no arguments"
    raise ValueError(f"the instructions' arguments are missing (got {type(kwargs).__name__})")
  if not all(kw is None or isinstance(kw, dict) for kw in kwargs):
    raise ValueError("the instructions' arguments are not objects")
  if len(kwargs) != len(ids):
    raise ValueError("instruction ids and kwargs differ in length")
  out = []
  for iid, kw in zip(ids, kwargs):
    if iid not in IFEVAL_IDS:
      raise ValueError(f"unsupported instruction {iid}")
    kind, names = IFEVAL_IDS[iid]
    kw = {k: v for k, v in (kw or {}).items() if v is not None}
    missing = [k for k in names if k not in kw]
    if missing:
      raise ValueError(f"instruction {iid} lacks {missing[0]}")
    out.append({"type": kind, **{names[k]: kw[k] for k in names}})
  return out
