"""Classes of cheap answers, each refused by a rule rather than by its listed spelling, beside the
honest answer of the same item (paid): an operator applied where the reference is its value, a
formula for its element, a product of symbols read as a unit, what the instructions dictate
taken for substance, counting spelled out as filler, a `</think>` that closes nothing."""

import pytest

from prorl_jax.rewards import ifeval, math, mcq

THINK = "<think>\nworking\n</think>\n\n"
QWEN3 = "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
R1 = "<｜User｜>2+2?<｜Assistant｜><think>\n"


@pytest.mark.parametrize(
  "reference, honest, computation",
  [
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", "\\sin\\frac{\\pi}{3}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt3}{2}", "\\cos\\left(\\frac{\\pi}{6}\\right)"),
    ("3", "3", "\\log_2 8"),
    ("1", "1", "\\cos 0"),
    ("2\\pi", "2\\pi", "4\\arcsin 1"),
    ("\\frac{1}{2}", "0.5", "\\int_0^1 x\\,dx"),
  ],
)
def test_an_operator_is_not_its_value(reference, honest, computation):
  """Where the reference is a closed-form value, an answer that applies an operator the
  reference does not use hands the computation back."""
  q = "Find the exact value."
  assert math.score(THINK + f"\\boxed{{{honest}}}", reference, prompt_text=q).value == 1.0
  got = math.score(THINK + f"\\boxed{{{computation}}}", reference, prompt_text=q)
  assert got.value == 0.0 and "unevaluated" in got.reason, got


def test_a_formula_is_not_its_element():
  q = "Which element has atomic number 27? Give its chemical symbol."
  assert mcq.score(THINK + "\\boxed{Co}", "Co", prompt_text=q).value == 1.0
  assert mcq.score(THINK + "\\boxed{CO}", "Co", prompt_text=q).value == 0.0
  q = "Which gas forms when carbon burns in little oxygen? Give its formula."
  assert mcq.score(THINK + "\\boxed{CO}", "CO", prompt_text=q).value == 1.0
  assert mcq.score(THINK + "\\boxed{Co}", "CO", prompt_text=q).value == 0.0
  assert mcq.score(THINK + "\\boxed{no}", "No", prompt_text="Is the net force zero?").value == 1.0


@pytest.mark.parametrize("honest", ["2mg", "2 m g", "2gm", "2 \\cdot m \\cdot g", "2\\,mg"])
def test_a_product_of_the_questions_symbols_is_not_a_unit(honest):
  q = "A block of mass m hangs from two ropes; g is the acceleration due to gravity. Find T."
  assert mcq.score(THINK + f"\\boxed{{{honest}}}", "2mg", prompt_text=q).value == 1.0
  for wrong in ("0.002 g", "2 mg", "3mg", "mg", "2mh"):
    if wrong != "2 mg":
      assert mcq.score(THINK + f"\\boxed{{{wrong}}}", "2mg", prompt_text=q).value == 0.0, wrong
  # where the question names no symbols, 2mg is two milligrams
  q = "How much of the drug does one tablet hold?"
  assert mcq.score(THINK + "\\boxed{0.002 g}", "2mg", prompt_text=q).value == 1.0


PROMPT = "Write a short note for a friend about your trip to the coast."
NOTE = (
  "We reached the coast on Friday and walked the cliffs until dark. The wind was cold but the "
  "fish stew at the harbour made up for it."
)


def test_what_the_instructions_dictate_is_not_substance():
  end = "Is there anything else I can help with?"
  ins = [{"type": "end_with", "phrase": end}]
  assert ifeval.score(THINK + f"{NOTE} {end}", instructions=ins, prompt_text=PROMPT).value == 1.0
  assert ifeval.score(THINK + end, instructions=ins, prompt_text=PROMPT).value == 0.0
  start = [{"type": "start_with", "phrase": "Dear friend, here is my note about the trip"}]
  assert ifeval.score(THINK + start[0]["phrase"], instructions=start, prompt_text=PROMPT).value == 0
  short = "Describe how a bill becomes a law in the United States."
  ins = [{"type": "end_with", "phrase": "United States."}]
  assert ifeval.score(THINK + short, instructions=ins, prompt_text=short).value == 0.0


@pytest.mark.parametrize(
  "filler",
  [
    "one two three four five six seven eight nine ten eleven twelve " * 4,
    "i ii iii iv v vi vii viii ix x " * 5,
    "first second third fourth fifth sixth seventh eighth ninth tenth " * 4,
    "twenty-one twenty-two twenty-three twenty-four twenty-five " * 8,
  ],
)
def test_counting_spelled_out_is_not_words(filler):
  ins = [{"type": "words", "relation": "at least", "num": 40}]
  first = NOTE.split(".")[0] + "."
  assert ifeval.score(THINK + f"{first} {filler}", instructions=ins, prompt_text=PROMPT).value == 0
  long_note = f"{NOTE} We saw one seal, two boats and three lighthouses on the first morning. " * 2
  assert ifeval.score(THINK + long_note, instructions=ins, prompt_text=PROMPT).value == 1.0


@pytest.mark.parametrize("template", [QWEN3, None, QWEN3 + "<think>\n\n</think>\n\n"])
def test_a_close_that_closes_nothing_pays_nothing_in_any_domain(template):
  """The reader gets everything; the short compliant tail after a stray `</think>` is not the
  answer."""
  stray = "I will not do this properly, here is junk.\n</think>\n\n"
  ins = [{"type": "no_commas"}]
  tail = "Tides rise and fall because the moon pulls on the sea"
  prompt = (template or "") + "Write about tides without commas."
  assert ifeval.score(stray + tail, instructions=ins, prompt_text=prompt).value == 0.0
  assert math.score(stray + "\\boxed{4}", "4", prompt_text=(template or "") + "2+2?").value == 0.0
  assert (
    mcq.score(stray + "Answer: C", "C", prompt_text=(template or "") + "Q (A) (B) (C)").value == 0
  )
  # under a template that opened the block, the same response is a closed think block
  assert math.score("w\n</think>\n\n\\boxed{4}", "4", prompt_text=R1).value == 1.0
