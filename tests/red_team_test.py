"""The red team's classes for the reading of a response (`data.attacks`): unfinished thinking, a
second `</think>`, markup a reader never sees, a value moved into another unit, the question
handed back, a lookup of the statement's examples. On rows that invite each one, every class
runs and earns no more than its bar; with the verifier broken the way each class probes, the
class earns more (so the red team can tell)."""

import json

import pytest

from prorl_jax import rewards, sandbox
from prorl_jax.data import attacks, audit, domains
from prorl_jax.rewards import common, ifeval, math, mcq, quantity

INSTRUCTIONS = [
  {"type": "title"},
  {"type": "keywords_include", "keywords": ["lantern"]},
  {"type": "postscript", "marker": "P.S."},
]
SUM = "Read two integers and print their sum.\nInput:\n1 2\nOutput:\n3\nInput:\n10 20\nOutput:\n30"
ROWS = [  # (verifier, data_source, prompt, reference, extra, right answer, wrong answer)
  ("math", "deepscaler", "Compute $\\dbinom{16}{5}$.", "4368", {}, "4368", "4367"),
  ("stem", "scp", "How much work is done?", "12 J", {}, "12 J", "13 J"),
  ("ifeval", "ifeval", "Write about tea. Give it a title, use lantern, add a P.S.", None,
   {"instructions": INSTRUCTIONS}, None, None),
  ("code", "codecontests", SUM, None,
   {"tests": {"inputs": ["1 2\n", "10 20\n", "5 7\n"], "outputs": ["3\n", "30\n", "12\n"]}},
   "a, b = map(int, input().split())\nprint(a + b)", "print(0)"),
]  # fmt: skip


def _score(source, response, ref, extra, prompt):
  meta = {**extra, "prompt_text": prompt}
  if "tests" in extra:
    ref = json.dumps(extra["tests"])
  return rewards.safe_score(rewards.route(source), response, ref, **meta).value


def _classes(verifier, source, prompt, ref, extra, right, wrong):
  """{class: (mean attack score, mean bar score)} of one row."""
  wrap = domains.hooks(verifier).wrap
  wrong_r = wrap(wrong or attacks.topic(prompt) + " plain words about tea here.")
  got = audit.attack_pairs(
    verifier,
    prompt=prompt,
    extra=extra,
    answer=ref,
    spec=extra.get("tests"),
    wrap=wrap,
    wrong=wrong_r,
    seed=0,
    right=wrap(right) if right else None,
  )
  out: dict = {}
  for cls, hack, bar in got:
    a, b = (_score(source, r, ref, extra, prompt) for r in (hack, bar))
    out.setdefault(cls, []).append((a, b))
  return {c: (max(a for a, _ in v), max(b for _, b in v)) for c, v in out.items()}


NEW = {
  "math": {"unfinished_thinking", "second_think", "question_back"},
  "stem": {"unfinished_thinking", "second_think", "unit_shift"},
  "ifeval": {"unfinished_thinking", "second_think", "hidden_markup"},
  "code": {"unfinished_thinking", "second_think", "example_lookup"},
}


@pytest.mark.skipif(sandbox.check() is not None, reason="needs the bubblewrap sandbox")
@pytest.mark.parametrize("row", ROWS, ids=[r[1] for r in ROWS])
def test_each_reading_class_runs_and_earns_no_more_than_its_bar(row):
  got = _classes(*row)
  assert NEW[row[0]] <= set(got), set(got)
  over = {c: v for c, v in got.items() if v[0] > v[1]}
  assert not over, over


def _last_think(response, prompt_text=None):
  """The rule the red team must catch: the text after the last `</think>`, whatever is open."""
  return common.Reading(response.rsplit("</think>", 1)[-1])


@pytest.mark.skipif(sandbox.check() is not None, reason="needs the bubblewrap sandbox")
@pytest.mark.parametrize(
  "row, cls, module, name, broken",
  [
    (ROWS[0], "unfinished_thinking", math, "read", lambda r, p=None: common.Reading(r)),
    (ROWS[0], "second_think", math, "read", _last_think),
    (ROWS[0], "question_back", math, "hands_back", lambda *a: None),
    (ROWS[1], "unit_shift", quantity, "implied_unit", lambda p, ref: ref.unit),
    (ROWS[2], "hidden_markup", ifeval, "rendered", lambda t: t),
    (ROWS[3], "second_think", rewards.code, "read", _last_think),
  ],
  ids=["unfinished", "second", "question", "unit", "markup", "code-second"],
)
def test_each_class_catches_the_break_it_probes(monkeypatch, row, cls, module, name, broken):
  monkeypatch.setattr(module, name, broken)
  if module is quantity:
    monkeypatch.setattr(mcq.quantity, name, broken)
  attack, bar = _classes(*row)[cls]
  assert attack > bar, (cls, attack, bar)


def test_a_unit_shift_is_off_by_more_than_a_decimal_reference_allows():
  """The shifted value lies outside the 1% a decimal reference tolerates, so the class probes the
  conversion and never pays an honest rounding."""
  for ref in ("9.81 m/s^2", "0.50 A", "12 J"):
    shifts = attacks.unit_shifts(ref)
    assert len(shifts) == 3
    assert [a for a in shifts if mcq.short_answer_matches(a, ref, "Find it.")] == [], ref
