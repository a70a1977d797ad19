"""Quantities read as a physicist reads them (`rewards.quantity`, `rewards.mcq`): the reference's
unit decides; another unit of the same dimension converts exactly and then compares (an integer
reference needs that integer); a bare number is read in the unit the question asks for, and is
no quantity where it asks for none; a symbol reference (`g`, `2g`) is algebra, never a unit.
Each row: the reference, the question, answers that state it, answers that do not."""

import pytest

from prorl_jax.rewards import mcq

ASKS_NOTHING = "A current flows through the resistor. What is it?"
CASES = [
  (
    "12 J",
    ASKS_NOTHING,
    ["12 J", "12.0 J", "0.012 kJ", "12000 mJ", "12 \\text{ J}"],
    ["0.0121 kJ", "12.1 J", "12", "12 W", "0.012 J", "12 kJ"],
  ),
  (
    "5 mA",
    ASKS_NOTHING,
    ["5 mA", "0.005 A", "5 \\text{ mA}", "5000 \\mu A", "5 × 10⁻³ A"],
    ["5", "5 A", "5 kA", "0.5 A", "5 mV"],
  ),
  ("5 mA", "Find the current in mA.", ["5", "5 mA", "0.005 A"], ["0.005", "5000", "5 A"]),
  ("5 mA", "Find the current (in A).", ["0.005", "5 mA"], ["5", "5000"]),
  ("5 mA", "Find the current in units of \\mathrm{mA}.", ["5"], ["0.005"]),
  (
    "14 m/s",
    "How fast does it go, in meters per second?",
    ["14", "14 m/s", "50.4 km/h"],
    ["14 km/h", "1400"],
  ),
  ("3 s", "It moves in a line. How many seconds pass?", ["3", "3000 ms"], ["3000", "0.05"]),
  ("3 s", "It moves in a line for a while. How long?", ["3 s", "3000 ms"], ["3", "3 min"]),
  ("14 m/s", "Find the speed (m/s).", ["14", "14 m/s"], ["14 km/h"]),
  ("5 °C", ASKS_NOTHING, ["5 ℃", "5 °C", "5^\\circ C", "278.15 K", "41 °F"], ["5 K", "5 °F"]),
  (
    "500 nm",
    ASKS_NOTHING,
    ["5.0 × 10⁻⁷ m", "5 \\times 10^{-7} m", "0.5 \\mu m", "500 nm"],
    ["5.01 × 10⁻⁷ m", "500 mm", "5 \\times 10^{-7}"],
  ),
  ("9.81 m/s^2", ASKS_NOTHING, ["9.81 m s⁻²", "9.8 m/s^2", "981 cm/s^2"], ["9.81 m/s", "98 m/s^2"]),
  (
    "2g",
    "The elevator accelerates. Find its acceleration.",
    ["2g", "2 g", "2 \\cdot g", "2.0g"],
    ["2000 mg", "2 kg", "2G", "2", "g", "19.6 m/s^2"],
  ),
  ("g", "Find the acceleration of the block.", ["g", "$g$", "\\text{g}"], ["G", "2g", "9.8"]),
  ("-g", "Find the acceleration.", ["-g", "- g"], ["g", "-G"]),
]


@pytest.mark.parametrize("ref, question, right, wrong", CASES, ids=[c[0] for c in CASES])
def test_quantities_and_symbols_read_as_a_physicist_reads_them(ref, question, right, wrong):
  paid = lambda a: mcq.score(f"<think>w</think>Answer: {a}", ref, prompt_text=question).value  # noqa: E731
  assert [a for a in right if paid(a) != 1.0] == []
  assert [a for a in wrong if paid(a) != 0.0] == []
  # under a template that opened the think block, the question ends with the tag: read the same
  r1 = question + "<think>\n"
  assert mcq.score(f"w</think>Answer: {right[0]}", ref, prompt_text=r1).value == 1.0


def test_a_lower_case_letter_is_a_choice_only_where_the_question_lists_choices():
  listed = "Which force acts?\n(a) gravity\n(b) friction\n(c) tension"
  assert mcq.score("<think>w</think>Answer: (c)", "c", prompt_text=listed).value == 1.0
  assert mcq.score("<think>w</think>Answer: C", "c", prompt_text=listed).value == 1.0
  assert mcq.score("<think>w</think>Answer: A", "c", prompt_text=listed).value == 0.0
  assert mcq.score("<think>w</think>Answer: C", "C", prompt_text="Pick one.").value == 1.0
  # no choices listed: `c` is the speed of light, not choice C
  physics = "How fast does the signal travel?"
  assert mcq.score("<think>w</think>Answer: c", "c", prompt_text=physics).value == 1.0
  assert mcq.score("<think>w</think>Answer: C", "c", prompt_text=physics).value == 0.0


FORMULAS = [
  (
    "H_2O",
    ["H2O", "H_2O", "H_{2}O", "\\mathrm{H_2O}", "\\ce{H2O}", "H₂O", "OH_2"],
    ["HO_2", "H_2O_2", "2H_2O", "H", "water vapour"],
  ),
  (
    "SO_4^{2-}",
    ["SO4^{2-}", "SO_4^{-2}", "\\mathrm{SO_4^{2-}}", "SO₄²⁻"],
    ["SO_4", "SO_4^{-}", "SO_3^{2-}"],
  ),
  ("Fe_2O_3", ["Fe2O3", "\\text{Fe}_2\\text{O}_3", "O_3Fe_2"], ["FeO", "Fe_3O_2", "F_2O_3"]),
  ("CO", ["CO", "\\mathrm{CO}"], ["Co", "CO_2", "C", "co"]),
  ("CuSO_4 \\cdot 5H_2O", ["CuSO4·5H2O", "CuSO_4\\cdot5H_2O"], ["CuSO_4", "CuSO_4 \\cdot H_2O"]),
]


@pytest.mark.parametrize("ref, right, wrong", FORMULAS, ids=[f[0] for f in FORMULAS])
def test_chemical_formulas_compare_by_element_counts(ref, right, wrong):
  paid = lambda a: mcq.score(f"<think>w</think>Answer: {a}", ref, prompt_text="Name it.").value  # noqa: E731
  assert [a for a in right if paid(a) != 1.0] == []
  assert [a for a in wrong if paid(a) != 0.0] == []


def test_words_that_spell_elements_stay_words():
  for word in ("No", "Yes", "Co"):  # nobelium, yttrium + einsteinium, cobalt: one element or none
    assert mcq.score(f"<think>w</think>Answer: {word}", word, prompt_text="Q?").value == 1.0
  assert mcq.score("<think>w</think>Answer: yes", "Yes", prompt_text="Q?").value == 1.0
