"""How a verifier reads a response: the text as a reader sees it, and what in it is substance.

- `as_read`: Unicode NFKC (a fullwidth comma is a comma, math-bold capitals are capitals) with
  default-ignorable code points removed (a zero-width space or a soft hyphen inside a forbidden
  word hides nothing). Case and language checks read this.
- `folded`: `as_read` with every non-ASCII character that looks like an ASCII one replaced by it
  (Unicode TR39 confusables, through ICU's spoof checker: Cyrillic `е` is `e`, U+201A is a
  comma). Checks that look for or forbid characters, words or phrases compare folded text with
  folded targets, so a keyword in another script still matches itself.
- `is_comma`: any comma of any script (ASCII, Arabic, ideographic, ...).
- Substance: `letter_words` (words with a letter: numerals are not words), `substantive_words`
  (a word counts once per new five-word run: a repeated block counts once, "yes yes yes..." three
  times), `content_words` (stop words of the stop-words package left out), `restates` (order-free:
  most of the response's content words taken from the prompt) and `about` (a response shares a
  stem with its prompt's topic: a reply that would fit any prompt shares none).
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Default-ignorable code points a reader never sees (zero-width spaces and joiners, soft hyphen,
# word joiner, byte-order mark, variation selectors, bidi controls): Unicode's
# Default_Ignorable_Code_Point property, the ranges in common use.
_IGNORABLE = re.compile(
  "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
  "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U0001bca0-\U0001bca3\U000e0000-\U000e0fff]"
)


def as_read(text: str) -> str:
  """NFKC with default-ignorable code points removed."""
  return _IGNORABLE.sub("", unicodedata.normalize("NFKC", text))


def invisible(text: str) -> bool:
  """Does `text` hold a default-ignorable code point?"""
  return _IGNORABLE.search(text) is not None


@functools.cache
def _spoof():
  import icu  # lazy: ICU's data loads on first use, in the pool process (`warm`)

  return icu.SpoofChecker()


@functools.lru_cache(maxsize=1 << 16)
def prototype(c: str) -> str:
  """The ASCII text a non-ASCII character looks like (its TR39 skeleton), else itself."""
  s = _spoof().getSkeleton(0, c)
  return s if s and s.isascii() and s.isprintable() else c


def folded(text: str) -> str:
  """`as_read` with look-alikes of ASCII characters replaced by them."""
  t = as_read(text)
  if t.isascii():
    return t
  return "".join(c if c.isascii() else prototype(c) for c in t)


@functools.lru_cache(maxsize=4096)
def is_comma(c: str) -> bool:
  """A comma in any script (Unicode punctuation named COMMA; U+201A folds to one first), or a
  combining comma standing on its own (U+0326 COMBINING COMMA BELOW: a reader sees a comma)."""
  category = unicodedata.category(c)
  return c == "," or (
    (category.startswith("P") or category == "Mn") and "COMMA" in unicodedata.name(c, "")
  )


def commas(text: str) -> int:
  """Commas as a reader sees them: any script's comma (read before look-alike folding, which
  turns the Armenian comma U+055D into an apostrophe), anything that looks like one (U+201A),
  and a combining comma typed as its own character (U+0326 after `s` composes to `ș`, but a
  writer of Romanian types `ș` itself: the separate mark is a comma put under a letter)."""
  typed = sum(unicodedata.category(c) == "Mn" and is_comma(c) for c in text)
  return typed + sum(
    is_comma(c) or (not c.isascii() and prototype(c) == ",")
    for c in as_read(text)
    if not c.isalnum() and not c.isspace()
  )


# Scripts written without spaces between words (Han, kana, Thai, Lao, Myanmar, Khmer): each
# character is read as a word.
_UNSPACED = (
  "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
  "\uf900-\ufaff\U00020000-\U0003134f"
)
_WORD = re.compile(f"[{_UNSPACED}]|(?:(?![{_UNSPACED}])\\w)+(?:['’.-](?:(?![{_UNSPACED}])\\w)+)*")


def letter_words(text: str) -> list[str]:
  """Lowercased words that contain a letter (`1`, `2.5` and `1990` are not words); in a script
  written without spaces, each character."""
  return [w.lower() for w in _WORD.findall(text) if any(c.isalpha() for c in w)]


RUN = 5  # a word is new when the run of RUN words ending at it is

# Numbers spelled as words, and Roman numerals: counting written out
_NUMBER_WORDS = frozenset(
  """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
  fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty
  ninety hundred thousand million billion first second third fourth fifth sixth seventh eighth
  ninth tenth""".split()
)
_ROMAN = re.compile(r"(?=[mdclxvi])m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})")
COUNTING = 3  # consecutive numerals in words that are counting, not words


def _numeral(word: str) -> bool:
  parts = word.split("-")
  return all(p in _NUMBER_WORDS for p in parts) or _ROMAN.fullmatch(word) is not None


def without_counting(words: list[str]) -> list[str]:
  """The words without runs of COUNTING or more numerals written as words (`one two three
  four`, `i ii iii iv`): numerals are not words, however they are spelled."""
  out, run = [], []
  for w in [*words, ""]:
    if w and _numeral(w):
      run.append(w)
      continue
    if len(run) < COUNTING:
      out += run
    run = []
    if w:
      out.append(w)
  return out


def substantive_words(text: str) -> int:
  """Words that say something new: each run of RUN consecutive words counts once, so a block
  written twice counts once and one word repeated counts RUN times; counting spelled out is
  not words (`without_counting`). Natural text repeats five-word runs almost never."""
  words = without_counting(letter_words(text))
  return len({tuple(words[max(0, i - RUN + 1) : i + 1]) for i in range(len(words))})


@functools.cache
def _stop_words() -> frozenset[str]:
  import stop_words  # lazy: a data file read once per process

  return frozenset(stop_words.get_stop_words("en"))


def content_words(words: list[str]) -> list[str]:
  """Words of three or more letters that are not stop words."""
  stop = _stop_words()
  return [w for w in words if len(w) >= 3 and w not in stop]


def restates(text: str, prompt_text: str) -> bool:
  """Three quarters or more of the response's content words (four or more) come from the
  prompt, in any order; for a reply with fewer content words (a short prompt of common words:
  "Describe how a bill becomes a law"), nine tenths or more of its words of three or more
  letters (four or more)."""
  words = letter_words(folded(text))
  source = set(letter_words(folded(prompt_text)))
  mine = content_words(words)
  if len(mine) >= 4:
    return sum(w in source for w in mine) >= 0.75 * len(mine)
  mine = [w for w in words if len(w) >= 3]
  return len(mine) >= 4 and sum(w in source for w in mine) >= 0.9 * len(mine)


@functools.cache
def _stemmer():
  import snowballstemmer  # lazy: only `about` stems

  return snowballstemmer.stemmer("english")


# How instructions are worded: a prompt's topic is what is left of it without these.
INSTRUCTION_WORDS = frozenset(
  """
  answer answers respond response responses reply write writing written words word sentence
  sentences paragraph paragraphs letter letters lowercase uppercase capital capitals capitalized
  comma commas title titles bullet bullets point points markdown json format formatted section
  sections highlight highlighted highlights placeholder placeholders square brackets postscript
  language english entire whole text include including included keyword keywords mention
  mentioned mentions appear appears times least less exactly total number numbers wrap wrapped
  double quotation quotations marks mark asterisk asterisks symbols symbol separated separate
  divider dividers markdown italic bold end ending start starting begin beginning phrase follow
  following output repeat request requested change first second third last sure make please
  give using use used contain containing contains should must need following notation example
  explain describe list tell provide create generate short long brief detailed essay article
  poem story letter note blog post summary rewrite version response
  """.split()
)


def _topic(text: str) -> set[str]:
  words = [w for w in content_words(letter_words(folded(text))) if w not in INSTRUCTION_WORDS]
  return set(_stemmer().stemWords(words))


# Verse says its subject in images ("golden mane" for a lion): where a prompt asks for one, a
# reply that says something concrete of its own is read as about it.
_VERSE = re.compile(
  r"\b(?:haikus?|poems?|poetry|limericks?|sonnets?|songs?|lyrics|verses?|raps?|riddles?|odes?)\b",
  re.I,
)
# What a reply that fits any prompt is made of: apology, refusal and offers of help.
GENERIC_WORDS = frozenset(
  """
  sorry apologize apologies unable cannot can't help helping helpful assist assistance request
  requests today happy glad sure certainly course anything else question questions information
  provide providing able would like know let please thank thanks ask asked feel free hope
  """.split()
)
CONCRETE = 4  # distinct concrete words a verse reply needs


def about(text: str, prompt_text: str) -> bool:
  """The response shares a word stem with its prompt's topic (true when the prompt names no
  topic beyond its instructions); for a prompt that asks for verse, a reply with CONCRETE or more
  distinct content words that are neither instructions nor apology and offers of help."""
  topic = _topic(prompt_text)
  if not topic or topic & _topic(text):
    return True
  if not _VERSE.search(prompt_text):
    return False
  words = set(content_words(letter_words(folded(text)))) - INSTRUCTION_WORDS - GENERIC_WORDS
  return len(words) >= CONCRETE


def warm() -> None:
  """Loads ICU, the stop words, the stemmer, the LaTeX reader, the CSS parser and the
  bidirectional algorithm (before the pool forks its children)."""
  from prorl_jax.rewards import rendered  # the shown reading's parsers

  rendered.warm()
  prototype("\u0435")
  _stop_words()
  _stemmer()
