"""What a code item's tests expect, and what passes them without solving the task: the
comparisons of a run's output with a test's (`same_stdout` for stdin/stdout programs,
`same_value` for function-call tasks; see `rewards.code`), and the programs that solve nothing
(`constant_passes`: constants, echoing the input, a lookup of the examples the statement shows)
whose passes are the score's floor and make a row's tests unusable at prepare."""

from __future__ import annotations

import fractions
import json
import math
import re

from prorl_jax.rewards.common import blank, close, same_token
from prorl_jax.rewards.rendered import rendered


def same_stdout(got: str, want, case_free: bool = False) -> bool:
  """stdin/stdout comparison: whitespace-separated tokens; numbers as the expected one says;
  words in any case where the statement says so (`YES` for `Yes`)."""
  if isinstance(want, list):
    want = "\n".join(map(str, want))
  g, w = str(got).split(), str(want).split()
  if case_free:
    g, w = [t.casefold() for t in g], [t.casefold() for t in w]
  return len(g) == len(w) and all(map(same_token, g, w))


def _finite_number(x) -> bool:
  return isinstance(x, int) or (isinstance(x, float) and math.isfinite(x))


def _same_number(got, want) -> bool:
  if not (_finite_number(got) and _finite_number(want)):
    return False
  if isinstance(want, int):  # an integer: exactly this integer (an integral float only if equal)
    return fractions.Fraction(got) == want
  return close(fractions.Fraction(got), fractions.Fraction(want))


def same_value(got, want) -> bool:
  """Function-call comparison: recursive, lists == tuples, numbers as the expected one says."""
  if isinstance(got, bool) or isinstance(want, bool):
    return got is want if isinstance(got, bool) and isinstance(want, bool) else False
  if isinstance(got, (int, float)) and isinstance(want, (int, float)):
    return _same_number(got, want)
  if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
    return len(got) == len(want) and all(map(same_value, got, want))
  if isinstance(got, dict) and isinstance(want, dict):
    return got.keys() == want.keys() and all(same_value(got[k], want[k]) for k in got)
  return type(got) is type(want) and got == want


def _returned_value_matches(got, want) -> bool:
  if same_value(got, want):
    return True
  # APPS wraps a single return value in a list: [[1, 2]] means "returns [1, 2]".
  return isinstance(want, list) and len(want) == 1 and same_value(got, want[0])


def blank_output(spec: dict) -> int | None:
  """The first stdin/stdout test that expects blank output (refused: a program that prints
  nothing passes it), or None."""
  if spec.get("fn_name"):
    return None
  for k, want in enumerate(spec["outputs"]):
    if blank("\n".join(map(str, want)) if isinstance(want, list) else str(want)):
      return k
  return None


# Programs that solve nothing: what each returns (function-call tasks) or prints (stdin/stdout
# programs) whatever the input; "echo" returns its first argument or prints its input.
CONSTANT_RETURNS = {
  "return None": None, "return 0": 0, "return 1": 1, "return -1": -1, "return True": True,
  "return False": False, 'return ""': "", "return []": [], "return {}": {},
}  # fmt: skip
CONSTANT_PRINTS = ("0", "1", "-1", "YES", "NO", "Yes", "No", "yes", "no", "True", "False")


def _as_args(inp) -> list:
  args = json.loads(inp) if isinstance(inp, str) else inp
  return args if isinstance(args, list) else [args]


def _squash(text: str) -> str:
  return re.sub(r"\s+", "", text)


def _shown_text(value) -> list[str]:
  """How a test's input or output may be written in a statement, squashed (JSON and Python)."""
  if isinstance(value, str):
    return [_squash(value)]
  forms = {_squash(json.dumps(value)), _squash(repr(value))}
  return sorted(forms)


def _shown_at(text: str, parts: list[str], wants: list[str]) -> bool:
  """Do `parts` stand in `text` in order, each within 40 characters of the one before (an
  example's arguments, named or not: `nums=[1,2],k=3`), with a `wants` within a few hundred
  characters after them?"""
  if not parts or sum(map(len, parts)) < 2:
    return False
  at = text.find(parts[0])
  for _ in range(50):  # the first part's first occurrences
    if at < 0:
      return False
    end, ok = at + len(parts[0]), True
    for part in parts[1:]:
      nxt = text.find(part, end)
      if nxt < 0 or nxt - end > 40:
        ok = False
        break
      end = nxt + len(part)
    window = text[end : end + 2 * (end - at) + 300]
    if ok and any(w and w in window for w in wants):
      return True
    at = text.find(parts[0], at + 1)
  return False


def shown_in(spec: dict, statement: str | None) -> list[bool]:
  """Per test: does the statement show it as an example (its input, then its expected output
  within a few hundred characters), as typed or as rendered? A lookup table of those examples
  passes exactly them."""
  if not statement:
    return [False] * len(spec["inputs"])
  # as typed and as a reader sees it (a table's `<br>` lines, `&nbsp;`, `$1\\ 2$`, `<code>`)
  texts, out = {_squash(statement), _squash(rendered(statement))}, []
  for inp, want in zip(spec["inputs"], spec["outputs"]):
    if spec.get("fn_name"):
      try:
        args = _as_args(inp)
      except ValueError:
        args = [inp]
      forms = [[_shown_text(a)[0] for a in args], [_shown_text(a)[-1] for a in args]]
    else:
      forms = [[k] for k in _shown_text(inp if isinstance(inp, str) else "\n".join(map(str, inp)))]
    wants = _shown_text(
      "\n".join(map(str, want)) if isinstance(want, list) and not spec.get("fn_name") else want
    )
    out.append(any(_shown_at(text, parts, wants) for parts in forms for text in texts))
  return out


def constant_passes(spec: dict, statement: str | None = None, shown=None) -> tuple[int, str]:
  """(tests passed, program) of the program that solves nothing and passes the most of `spec`'s
  tests, judged by the same comparisons as a real run (computed, never run): `return None`,
  `return 0`, ..., `print("NO")`, echoing the input; with the problem's `statement`, each of them
  behind a lookup table of the examples it shows (`shown_in`). A score counts only what a
  response passes beyond it; a row every test of which one of them passes is refused at
  prepare."""
  ins, outs = spec["inputs"], spec["outputs"]
  if spec.get("fn_name"):
    tried = {
      name: [_returned_value_matches(value, want) for want in outs]
      for name, value in CONSTANT_RETURNS.items()
    }
    echo = []
    for inp, want in zip(ins, outs):
      try:
        args = _as_args(inp)
      except ValueError:
        args = []
      echo.append(bool(args) and _returned_value_matches(args[0], want))
    tried["return the first argument"] = echo
  else:
    tried = {f"print({v!r})": [same_stdout(v, want) for want in outs] for v in CONSTANT_PRINTS}
    tried["print the input"] = [
      same_stdout(inp if isinstance(inp, str) else "\n".join(map(str, inp)), want)
      for inp, want in zip(ins, outs)
    ]
  shown = shown_in(spec, statement) if shown is None else shown
  if any(shown):
    tried = {
      f"a lookup of the statement's {sum(shown)} examples, else {k}": [
        a or b for a, b in zip(v, shown)
      ]
      for k, v in tried.items()
    }
  name = max(tried, key=lambda k: sum(tried[k]))
  return sum(tried[name]), name


# A row's credit starts above what a program that solves nothing passes this often or less.
GUESS_LEVEL = 0.01
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|\w+|[^\w\s]")


def _written(value, statement_tokens: list[str]) -> bool:
  """Does the statement write this expected output as whole tokens, and is it a word (`Alice`,
  `Impossible`, `First player`)? Numbers are left to the constants: a statement writes too many
  for a guess to pick the right one."""
  if isinstance(value, list):
    value = "\n".join(map(str, value)) if all(isinstance(v, str) for v in value) else None
  if not isinstance(value, str) or not re.search(r"[^\W\d_]", value):
    return False
  want = _TOKEN.findall(value)
  if not want or len(want) > 8:
    return False
  k = len(want)
  return any(statement_tokens[i : i + k] == want for i in range(len(statement_tokens) - k + 1))


def _tail_above(probs: list[float]) -> list[float]:
  """P(X > f) for f = 0..n of X = a sum of independent Bernoulli(probs) (Poisson binomial)."""
  dist = [1.0]
  for p in probs:
    nxt = [0.0] * (len(dist) + 1)
    for k, q in enumerate(dist):
      nxt[k] += q * (1 - p)
      nxt[k + 1] += q * p
    dist = nxt
  tail, above = [], 0.0
  for q in reversed(dist):
    tail.append(above)
    above += q
  return tail[::-1]


def guess_passes(spec: dict, statement: str | None = None, shown=None) -> tuple[int, str]:
  """(tests, program): the most tests a program that solves nothing passes with probability
  above `GUESS_LEVEL` by guessing, and that program. Its guesses are what a policy can know
  without solving: the constant outputs (`CONSTANT_PRINTS`, `CONSTANT_RETURNS`) and the
  expected outputs the statement writes as words (`Alice`, `Impossible`), each test answered by
  a draw from the k most often right of them (k = 1..8) behind a lookup of the statement's
  examples. Credit counts only passes above this, so a guess earns at most
  `GUESS_LEVEL` in expectation, whatever its spelling."""
  outs, fn = spec["outputs"], bool(spec.get("fn_name"))
  if not outs:
    return 0, ""
  if fn:
    candidates = dict(CONSTANT_RETURNS)
    match = _returned_value_matches
  else:
    candidates = {f"print({v!r})": v for v in CONSTANT_PRINTS}
    match = same_stdout
  if statement:
    tokens = _TOKEN.findall(statement)
    for want in outs:
      if _written(want, tokens):
        text = "\n".join(want) if isinstance(want, list) else want
        candidates.setdefault(f"{'return' if fn else 'print'} {json.dumps(text.strip())}", want)
  shown = shown_in(spec, statement) if shown is None else shown
  rows = {
    name: [not s and match(value, want) for want, s in zip(outs, shown)]
    for name, value in candidates.items()
  }
  ranked = sorted((n for n in rows if any(rows[n])), key=lambda n: -sum(rows[n]))[:8]
  best, program = 0, ""
  for k in range(1, len(ranked) + 1):
    top = ranked[:k]
    probs = [1.0 if s else sum(rows[n][i] for n in top) / k for i, s in enumerate(shown)]
    tail = _tail_above(probs)
    floor = next(f for f, p in enumerate(tail) if p <= GUESS_LEVEL)
    if floor > best:
      best = floor
      lookup = f"a lookup of the statement's {sum(shown)} examples, else " if any(shown) else ""
      program = f"{lookup}a guess among {', '.join(f'`{n}`' for n in top)}"
  return best, program


def unusable_tests(spec: dict, statement: str | None = None) -> str | None:
  """Why a row's tests cannot tell a solution from a program that solves nothing (a test
  expecting blank output; every test passed by one constant program, or by a lookup of the
  examples the statement shows), or None."""
  return _floor(spec, statement)[0]


def _floor(spec: dict, statement: str | None) -> tuple[str | None, int, str]:
  """(why the tests are unusable or None, the tests a program that solves nothing passes, that
  program): `unusable_tests` and the score's credit floor in one computation."""
  if (k := blank_output(spec)) is not None:
    return f"test {k} expects blank output", 0, ""
  shown = shown_in(spec, statement)  # once, for the constants' lookup and the guesses'
  floor, constant = constant_passes(spec, statement, shown)
  if spec["outputs"] and floor == len(spec["outputs"]):
    return f"every test passes a program that solves nothing: `{constant}`", floor, constant
  guessed, guess = guess_passes(spec, statement, shown)
  if guessed > floor:
    floor, constant = guessed, guess
  if spec["outputs"] and floor == len(spec["outputs"]):
    why = f"every test passes, {GUESS_LEVEL:.0%} of the time or more, {guess}"
    return why, floor, constant
  return None, floor, constant
