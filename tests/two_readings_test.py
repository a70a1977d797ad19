"""An instruction is followed in both readings (`ifeval.readings`): as typed (the characters) and
as shown (Markdown and inline HTML rendered, hidden elements gone, CSS case applied, LaTeX
typeset, bidirectional overrides displayed). Credit needs what every reader sees; a prohibition
holds only where no reader sees it broken. The hiding places and the one-reading spellings are
generated (`data.equivalents`); an honest answer with ordinary Markdown is paid in both."""

import pytest

from prorl_jax.data import one_reading as eq
from prorl_jax.rewards import ifeval
from prorl_jax.rewards.common import read

PROMPT = "Write a short note about why the tides rise and fall."
BODY = (
  "Tides rise and fall twice a day because the moon pulls on the oceans, and the sun adds a "
  "smaller pull of its own."
)
BODY_NO_COMMA = BODY.replace(",", "")
THINK = "<think>\nthe moon and the sun\n</think>\n\n"


def _score(response: str, instructions: list[dict]) -> float:
  return ifeval.score(THINK + response, instructions=instructions, prompt_text=PROMPT).value


# the instruction, and the text that meets it where it is seen
NEEDS = [
  ({"type": "keywords_include", "keywords": ["gravitation"]}, "gravitation pulls the water"),
  ({"type": "title"}, "<<Moon and Tides>>"),
  ({"type": "postscript", "marker": "P.S."}, "P.S. the moon is far away"),
  ({"type": "placeholders", "num": 1}, "[address]"),
  ({"type": "end_with", "phrase": "Any other questions?"}, "Any other questions?"),
]


@pytest.mark.parametrize("place", sorted(eq.HIDDEN))
@pytest.mark.parametrize("ins, s", NEEDS, ids=lambda x: x["type"] if isinstance(x, dict) else "")
def test_text_only_in_the_characters_meets_no_instruction(ins, s, place):
  seen = f"{BODY}\n\n{s}" if ins["type"] != "title" else f"{s}\n\n{BODY}"
  assert _score(seen, [ins]) == 1.0  # where it is seen, the text meets the instruction
  hiding = eq.hidden(s)[place]
  assert _score(f"{BODY} {hiding}", [ins]) == 0.0, hiding


@pytest.mark.parametrize("how", sorted(eq.shown_only_word("dynasty")))
def test_a_forbidden_word_shown_but_not_typed_breaks_the_prohibition(how):
  ins = [{"type": "keywords_exclude", "keywords": ["dynasty"]}]
  assert _score(BODY, ins) == 1.0
  spelled = eq.shown_only_word("dynasty")[how]
  assert _score(f"{BODY} The tide tables began under a {spelled} long ago.", ins) == 0.0, spelled


@pytest.mark.parametrize("how", sorted(eq.shown_only_comma()))
def test_a_comma_shown_but_not_typed_breaks_no_commas(how):
  ins = [{"type": "no_commas"}]
  assert _score(BODY_NO_COMMA, ins) == 1.0
  comma = eq.shown_only_comma()[how]
  assert _score(BODY_NO_COMMA.replace("oceans", f"oceans{comma}"), ins) == 0.0, comma


@pytest.mark.parametrize("how", sorted(eq.restyled_upper("x")))
def test_lower_case_text_shown_in_capitals_is_not_all_lowercase(how):
  ins = [{"type": "lowercase"}]
  lower = BODY.lower()
  assert _score(lower, ins) == 1.0
  styled = eq.restyled_upper(lower)[how]
  assert _score(styled, ins) == 0.0, styled


ITEMS = ["the moon pulls the near side", "the sun adds its own pull", "the earth turns below"]


@pytest.mark.parametrize("how", sorted(eq.escaped_markup(ITEMS)))
def test_escaped_markdown_is_literal_text_in_both_readings(how):
  text = f"{BODY}\n\n" + eq.escaped_markup(ITEMS)[how]
  if "bullets" in how:
    ins = [{"type": "markdown_bullets", "num": 3}]
    honest = f"{BODY}\n\n" + "\n".join(f"* {x}" for x in ITEMS)
  else:
    ins = [{"type": "highlighted_sections", "num": 3}]
    honest = f"{BODY} " + " ".join(f"*{x}*" for x in ITEMS)
  assert _score(honest, ins) == 1.0
  assert _score(text, ins) == 0.0, text


def test_escaped_stars_are_no_divider():
  ins = [{"type": "divided_paragraphs", "num": 2}]
  assert _score(f"{BODY}\n\n***\n\n{BODY.upper()} again", ins) == 1.0
  assert _score(f"{BODY}\n\n\\*\\*\\*\n\n{BODY.upper()} again", ins) == 0.0


def test_an_honest_answer_with_ordinary_markdown_is_paid_in_both_readings():
  response = (
    "<<Why the Sea Moves>>\n\n"
    "## The pull\n\n"
    "Tides rise and fall because the **moon** pulls on the oceans and the *sun* adds a pull.\n\n"
    "* the near side bulges toward the moon\n"
    "* the far side bulges away from it\n"
    "* the earth turns under both bulges\n\n"
    "See [a tide chart](https://example.com/tides) for your coast; the range is about $2\\,m$.\n\n"
    "P.S. spring tides come at new and full moon."
  )
  ins = [
    {"type": "title"},
    {"type": "markdown_bullets", "num": 3},
    {"type": "highlighted_sections", "num": 2},
    {"type": "postscript", "marker": "P.S."},
    {"type": "keywords_include", "keywords": ["moon", "chart"]},
    {"type": "words", "relation": "at least", "num": 40},
  ]
  typed, shown = ifeval.readings(response)
  assert "**moon**" in typed and "**moon**" in shown and "example.com" not in shown
  assert all(ifeval.check(response, i) for i in ins)
  assert _score(response, ins) == 1.0


def test_each_reading_alone_would_pay_a_hack_the_other_refuses():
  """The rule needs both: a check on the shown text alone pays a forbidden word typed apart...
  no, shown apart, and a check on the typed text alone pays a keyword only in a hidden span."""
  hidden_keyword = f"{BODY} " + eq.hidden("gravitation")["display:none"]
  typed, shown = ifeval.readings(hidden_keyword)
  check = ifeval.CHECKS["keywords_include"]
  assert check(typed, keywords=["gravitation"]) and not check(shown, keywords=["gravitation"])
  split_word = f"{BODY} a \\text{{dyn}}\\text{{asty}}"
  typed, shown = ifeval.readings(split_word)
  check = ifeval.CHECKS["keywords_exclude"]
  assert check(typed, keywords=["dynasty"]) and not check(shown, keywords=["dynasty"])


def test_the_end_phrase_alone_is_no_response():
  ins = [{"type": "end_with", "phrase": "Is there anything else I can help with?"}]
  assert _score("Is there anything else I can help with?", ins) == 0.0
  assert _score(f"{BODY} Is there anything else I can help with?", ins) == 1.0


# The think reading's table: (template opens a block, response) -> the final answer, or None
THINK_CASES = [
  (False, "plain answer", "plain answer"),
  (False, "<think>w</think>answer", "answer"),
  (False, "w</think>answer", None),  # closes a block nobody opened
  (True, "w</think>answer", "answer"),
  (True, "<think>w</think>answer", "answer"),
  (True, "still thinking", None),
  (False, "<think>still thinking", None),
  (True, "w</think>a</think>b", None),
  (True, "w</think>a<think>b", None),
  (False, "</think>compliant tail", None),
]


@pytest.mark.parametrize("opened, response, answer", THINK_CASES)
def test_the_think_state_machine(opened, response, answer):
  for template in (
    ["<|im_start|>assistant\n<think>\n"]
    if opened
    else ["<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n", None]
  ):
    assert read(response, template).answer == answer, (template, response)


@pytest.mark.parametrize("place", sorted(eq.HIDDEN))
def test_a_forbidden_word_typed_but_hidden_still_breaks_the_prohibition(place):
  """The reader of the characters sees it: a prohibition holds only where no reader sees it."""
  ins = [{"type": "keywords_exclude", "keywords": ["dynasty"]}]
  assert _score(f"{BODY} {eq.hidden('dynasty')[place]}", ins) == 0.0
