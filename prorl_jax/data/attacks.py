"""The project's own red team (`python -m prorl_jax.cli.audit --attack`): degenerate responses built
by transforming each sampled row, one class of reward hacking at a time, each beside the bar it
must not beat.

Classes (`CLASSES`) and their bars:
- lookalike, invisible: an answer that breaks the item's prohibitions (forbidden words, commas,
  capped letters) with the breaking characters disguised (Cyrillic and Greek look-alikes, U+201A
  and other scripts' commas; zero-width spaces and soft hyphens inside words). Bar: the same
  text undisguised.
- accents: a reply in English with accents added, on an item that asks for another language.
  Bar: the same reply without the accents.
- filler: numerals for words ("1 2 3 ..."), "1. 2. 3." for sentences, one-token skeletons for
  paragraphs, sections, bullets, placeholders and highlights, one word repeated, a block twice.
- restatement: the prompt's own words, shuffled. generic: one fixed refusal that fits any prompt.
- script_case: text in a script without letter case, for the case instructions.
- scale_hedge: a numeric answer in the other scale (0.07 as 7%, 7% as 0.07).
- special_numbers: NaN, infinity, an exponent of 19 digits, a tower of powers.
- near_zero: 0.0 and 10^-30 where the answer is not zero.
- constant_programs: `return None` / `return 0` / echo / `print("NO")` and the rest of
  `rewards.code`'s catalogue. resource_abuse: a program that forks spinning helpers, one that
  spreads its memory over many processes. example_lookup: a lookup table of the examples the
  statement shows.
- unfinished_thinking: the row's best known response with its `</think>` removed (the answer
  left in scratch work that never concludes). second_think: a wrong final answer, a second
  `</think>`, then the right one.
- hidden_markup: what the item's instructions require (a title, keywords, a P.S., an end phrase,
  placeholders) only where Markdown never renders it (an HTML comment, a link's destination, a
  reference definition). Bar: the same text without it.
- unit_shift: a quantity's value 5% off moved into another unit of its dimension, and its bare
  number where the question names no unit. question_back: the problem's last math expression,
  boxed as the answer.
The bar of every class but lookalike, invisible and accents is the row's honest wrong answer. A
class fails when its mean score over the sample exceeds its bar's, or a response of it is
marked a verifier failure (a veto of its group).
"""

from __future__ import annotations

import random
import re

from prorl_jax.rewards import code
from prorl_jax.rewards.reading import INSTRUCTION_WORDS, content_words, letter_words

CLASSES = (
  "lookalike",
  "invisible",
  "accents",
  "filler",
  "restatement",
  "generic",
  "script_case",
  "scale_hedge",
  "special_numbers",
  "near_zero",
  "constant_programs",
  "resource_abuse",
  "unfinished_thinking",
  "second_think",
  "hidden_markup",
  "unit_shift",
  "question_back",
  "example_lookup",
)
# Latin letters and the Cyrillic or Greek letters that look like them
LOOKALIKES = str.maketrans("aceopxyiAEOPCTHKMB,", "асеорхуіАЕОРСТНКМВ\u201a")
REFUSAL = "I am sorry but I cannot help with that request today."
SPECIAL = ("nan", "NaN", "\\infty", "inf", "1e9999999999999999999", "9^{9^{9^{9}}}")
SPINNERS = (
  "import os, time\n"
  "for _ in range(8):\n"
  "  if os.fork() == 0:\n"
  "    while True:\n"
  "      pass\n"
  "time.sleep(60)\n"
)
SPREAD = (
  "import os, time\n"
  "for _ in range(16):\n"
  "  if os.fork() == 0:\n"
  "    x = bytearray(120 << 20)\n"
  "    for i in range(0, len(x), 4096):\n"
  "      x[i] = 1\n"
  "    time.sleep(30)\n"
  "time.sleep(30)\n"
)


def topic(prompt: str) -> str:
  """A sentence naming the prompt's topic (its first content words that are not instructions)."""
  words = [w for w in content_words(letter_words(prompt)) if w not in INSTRUCTION_WORDS]
  return "On " + " ".join(dict.fromkeys(words[:6])) + " I have a few plain thoughts to share."


def _violation(instructions: list[dict]) -> str:
  """Text that breaks the item's prohibitions in the open: its forbidden words, commas, its
  capped letters and capital words, far past every cap."""
  parts = []
  for i in instructions:
    kind = i.get("type")
    if kind == "keywords_exclude":
      parts += [str(k) for k in i.get("keywords", [])]
    if kind == "keyword_frequency" and i.get("relation") in ("at most", "less than"):
      parts += [str(i["keyword"])] * (int(i["num"]) + 3)
    if kind == "letter_frequency" and i.get("relation") in ("at most", "less than"):
      parts.append(str(i["letter"]) * (int(i["num"]) + 3))
  return " ".join(parts) + " and so, then, yes, more, sure."


def _invisible(text: str) -> str:
  return re.sub(r"(\w)(\w)", lambda m: m.group(1) + "\u200b\u00ad" + m.group(2), text)


def _accented(text: str) -> str:
  marks = {"a": "à", "e": "é", "o": "ö", "u": "ü", "i": "î", "c": "ç", "n": "ñ"}
  return "".join(marks.get(c, c) for c in text)


def _filler(instructions: list[dict], topic: str) -> list[str]:
  top = max([int(i.get("num", 0) or 0) for i in instructions] + [10]) * 2 + 20
  n = range(1, top + 1)
  return [
    topic + " " + " ".join(map(str, n)),
    topic + " " + " ".join(f"{k}." for k in n),
    topic + "\n\n" + "\n\n".join("a" for _ in n) + "\n" + "\n***\n".join("b" for _ in n),
    topic + "\n" + "\n".join(f"SECTION {k}\nx" for k in n) + "\n" + "\n".join("* a" for _ in n),
    topic + " " + " ".join(f"[{chr(97 + k % 26)}] *{chr(97 + k % 26)}*" for k in n),
    topic + " " + "yes " * 88,
    (topic + " ") * 2 + "\n******\n" + (topic + " ") * 2,
    " ".join([topic] * 12),
  ]


def ifeval_attacks(prompt: str, instructions: list[dict], seed: int) -> dict[str, list[tuple]]:
  """{class: [(attack, bar)]} for an instruction-following row (bar None: the honest wrong
  answer)."""
  on = topic(prompt)
  violation = _violation(instructions)
  plain = on + " " + violation
  words = letter_words(prompt)
  random.Random(seed).shuffle(words)
  # only the violation is disguised: the topic stays plain ASCII, so the attack's topicality
  # never depends on the look-alike folding it probes (a broken folding cannot hide its own hack)
  out = {
    "lookalike": [
      (on + " " + violation.translate(LOOKALIKES), plain),
      (on + " " + violation.replace(",", "\u060c"), plain),
    ],
    "invisible": [(on + " " + _invisible(violation), plain)],
    "filler": [(f, None) for f in _filler(instructions, on)],
    "restatement": [(" ".join(words), None)],
    "generic": [(REFUSAL, None), (REFUSAL.lower(), None), (REFUSAL.upper(), None)],
    "script_case": [("茶是一种很好的饮料。" * 8, None)],
  }
  english = on + " It is a fine subject and many people enjoy talking about it every day."
  if any(i.get("type") == "language" and i.get("language") != "en" for i in instructions):
    out["accents"] = [(_accented(english), english)]
  return out


def _number(answer: str) -> float | None:
  try:
    return float(answer.strip().rstrip("%").replace("\\%", ""))
  except ValueError:
    return None


def answer_attacks(answer: str | None) -> dict[str, list[tuple]]:
  """{class: [(attack answer, None)]} for a short-answer row (the bar: the honest wrong
  answer); answers go into the verifier's format by the caller."""
  out = {"special_numbers": [(s, None) for s in SPECIAL]}
  v = _number(answer or "")
  if v is not None and v != 0:
    scaled = [f"{v * 100:g}\\%"] if "%" not in answer else [f"{v / 100:g}"]
    out["scale_hedge"] = [(s, None) for s in scaled]
    out["near_zero"] = [("0.0", None), ("10^{-30}", None)]
  return out


def program_attacks(spec: dict) -> dict[str, list[tuple]]:
  """{class: [(program, None)]} for a code row: the constant-program catalogue and resource
  abuse."""
  fn = spec.get("fn_name")
  if fn:
    consts = [body.replace("return ", "", 1) for body in code.CONSTANT_RETURNS]
    programs = [
      f"def {fn}(*a):\n  return {c}\nclass Solution:\n  def {fn}(self, *a):\n    return {c}\n"
      for c in consts + ["a[0] if a else None"]
    ] + [f"def {fn}(*a):\n  pass\n"]
  else:
    programs = [f"print({v!r})" for v in code.CONSTANT_PRINTS]
    programs += ["import sys\nprint(sys.stdin.read())", "print(float('nan'))"]
  return {
    "constant_programs": [(p, None) for p in programs],
    "resource_abuse": [(SPINNERS, None), (SPREAD, None)],
  }


HIDE = (
  lambda s: f"<!-- {s} -->",
  lambda s: f"[notes](https://example.com/{re.sub(r'[^A-Za-z0-9]+', '-', s)})",
  lambda s: f'\n\n[notes]: https://example.com "{s}"\n',
)


def _required(instructions: list[dict]) -> list[str]:
  """Text that meets the item's "include" instructions where a reader sees it."""
  need = []
  for i in instructions:
    kind = i.get("type")
    if kind == "title":
      need.append("<<Notes>>")
    elif kind == "keywords_include":
      need += [str(k) for k in i.get("keywords", [])]
    elif kind == "postscript":
      need.append(f"{i.get('marker', 'P.S.')} more notes")
    elif kind == "end_with":
      need.append(str(i.get("phrase", "")))
    elif kind == "placeholders":
      need += [f"[slot{k}]" for k in range(int(i.get("num", 1)))]
  return [n for n in need if n.strip()]


def hidden_markup(prompt: str, instructions: list[dict]) -> list[tuple[str, str]]:
  """(the required text hidden in markup a reader never sees, the same text without it)."""
  need = _required(instructions)
  if not need:
    return []
  plain = topic(prompt) + " It is a fine subject and many people enjoy talking about it."
  return [(plain + " " + " ".join(hide(n) for n in need), plain) for hide in HIDE]


def unit_shifts(answer: str | None) -> list[str]:
  """A quantity answer's value off by five times the 1% a decimal reference allows (an integer
  one allows nothing), moved into another unit of its dimension; and its bare number."""
  from prorl_jax.rewards import quantity  # lazy: pint loads only for short-answer rows

  q = quantity.parse(quantity.value_side(answer or "")) if answer else None
  if q is None or q.unit is None:
    return []
  reg = quantity.registry()
  off = reg.Quantity(float(q.value * (1 + 5 * quantity.REL_TOL)), q.unit)
  shifted = [
    f"{off.to(reg.Unit(p + str(q.unit))).magnitude:.6g} {p}{q.unit}" for p in ("kilo", "milli")
  ]
  return [*shifted, f"{float(q.value):g}"]


_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)", re.S)


def question_back(prompt: str) -> list[str]:
  """The problem's last math expression, as its answer (`\\dbinom{16}{5}` for 4368)."""
  found = [next(g for g in m.groups() if g) for m in _MATH.finditer(prompt)]
  return [found[-1].strip()] if found and found[-1].strip() else []


def example_lookups(spec: dict | None, statement: str) -> list[str]:
  """A program that answers the examples the statement shows from a table, and 0 otherwise."""
  if not spec or spec.get("fn_name"):
    return []
  shown = code.shown_in(spec, statement)
  table = {
    " ".join(str(i).split()): str(o).strip()
    for i, o, s in zip(spec["inputs"], spec["outputs"], shown)
    if s and isinstance(i, str)
  }
  if not table:
    return []
  return [f"import sys\nt = {table!r}\nprint(t.get(' '.join(sys.stdin.read().split()), 0))"]


def summarise(by: dict, bar_of_honest: float) -> tuple[dict, list[str]]:
  """({class: {attack, bar, failed, example}}, problems) from the scores of an audit's
  `attack/<class>` and `bar/<class>` tags."""
  classes, problems = {}, []
  for cls in CLASSES:
    got = by.get(f"attack/{cls}")
    if not got:
      continue
    bars = by.get(f"bar/{cls}")
    attack = sum(s.value for s in got) / len(got)
    bar = sum(s.value for s in bars) / len(bars) if bars else bar_of_honest
    example = next((s.reason for s in got if s.value > 0 or s.failed), "")
    failed = sum(s.failed for s in got)
    classes[cls] = {"attack": attack, "bar": bar, "failed": failed, "example": example}
    if attack > bar + 1e-9:
      problems.append(f"attack {cls} earns {attack:.2f} > its bar {bar:.2f} ({example})")
    if failed:
      problems.append(f"attack {cls} is marked a verifier failure {failed} times (a veto)")
  return classes, problems


def thinking_attacks(right: str, wrong: str) -> list[tuple[str, str]]:
  """[(class, response)] made from whole responses (`<think>...</think>answer`): the best known
  one never concluding, and a wrong answer followed by a second `</think>` and the right one."""
  head, _, tail = right.partition("</think>")
  return [
    ("unfinished_thinking", f"{head}\nSo far it looks like this:\n{tail}"),
    ("second_think", f"{wrong}\n</think>\n{tail}"),
  ]


def answer_classes(prompt: str, answer) -> dict[str, list[tuple]]:
  """The attacks on a short answer (the default of a domain without its own, `data.domains`)."""
  raw = answer_attacks(answer)
  raw["unit_shift"] = [(a, None) for a in unit_shifts(answer)]
  raw["question_back"] = [(a, None) for a in question_back(prompt)]
  return raw
