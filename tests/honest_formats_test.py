"""Honest correct answers, written the way reasoning models write them, earn full credit in every
domain: rows in their Hugging Face layouts go through the project's own converters, answers
(checked by hand: each form below states the row's true answer) go through the rollout worker's
scoring path (`VerifierPool.score_many`), and every one must score 1.0."""

import json

import pytest

from prorl_jax import sandbox
from prorl_jax.cli import prepare
from prorl_jax.data import suite
from prorl_jax.data.domains import math as domain_math
from prorl_jax.data.domains import mcq as domain_mcq
from prorl_jax.data.hub import load_source
from prorl_jax.rewards.pool import VerifierPool
from prorl_jax.rollout import worker

SOURCES = {**prepare.SOURCES, **suite.SOURCES}
THINK = "<think>\nOkay, let me work it out step by step and check it twice.\n</think>\n\n"
R1 = THINK + "The final answer is $\\boxed{{{x}}}$."
QWEN = THINK + "**Final Answer**\n\\[\n\\boxed{{{x}}}\n\\]"
NEMOTRON = THINK + "Therefore, the answer is \\(\\boxed{{{x}}}\\)."
INLINE = THINK + "So we get $x = \\boxed{{{x}}}$ as the result."
WRAPPERS = (R1, QWEN, NEMOTRON, INLINE)

# (source, the row in its Hugging Face layout, honest forms of its answer)
MATH = [
  (
    "deepscaler",
    {"problem": "Angle ABC in degrees?", "answer": "45"},
    ["45", "45^\\circ", "45°", "45\\degree", "45^{\\circ}", "45 \\text{ degrees}"],
  ),
  (
    "deepscaler",
    {"problem": "Seconds in an hour?", "answer": "3600"},
    ["3600", "3{,}600", "3\\,600", "3,600", "3\\ 600"],
  ),
  (
    "deepscaler",
    {"problem": "Price in dollars?", "answer": "\\$12.50"},
    ["12.50", "\\$12.50", "12.5", "\\text{\\$}12.50", "\\$12.5"],
  ),
  (
    "deepscaler",
    {"problem": "Solve for x.", "answer": "(2,5]"},
    ["(2,5]", "(2, 5]", "2 < x \\le 5", "2<x\\leq 5", "x \\in (2, 5]"],
  ),
  (
    "deepscaler",
    {"problem": "Ratio?", "answer": "\\frac{3}{4}"},
    ["\\frac{3}{4}", "\\dfrac{3}{4}", "0.75", "3/4", "\\tfrac34"],
  ),
  (
    "deepscaler",
    {"problem": "Length?", "answer": "2\\sqrt{3}"},
    ["2\\sqrt{3}", "2 \\sqrt 3", "\\sqrt{12}", "2\\sqrt3"],
  ),
  ("deepscaler", {"problem": "Smallest value?", "answer": "-7"}, ["-7", "−7", "x=-7"]),
  (
    "deepscaler",
    {"problem": "Count?", "answer": "1000000"},
    ["1000000", "1{,}000{,}000", "1,000,000", "10^6", "10^{6}"],
  ),
  ("deepscaler", {"problem": "Area?", "answer": "12\\pi"}, ["12\\pi", "12 \\pi", "\\pi \\cdot 12"]),
  (
    "math500",
    {
      "problem": "Half of one?",
      "answer": "\\frac{1}{2}",
      "solution": "s",
      "subject": "Algebra",
      "level": 1,
      "unique_id": "a",
    },
    ["\\frac{1}{2}", "\\frac12", "0.5", "1/2"],
  ),
  (
    "math500",
    {
      "problem": "Interval?",
      "answer": "[-2,3)",
      "solution": "s",
      "subject": "A",
      "level": 2,
      "unique_id": "b",
    },
    ["[-2,3)", "[-2, 3)", "-2 \\le x < 3"],
  ),
  (
    "minerva",
    {"question": "Speed of light in m/s?", "answer": "3e8"},
    [
      "3e8",
      "3\\times10^{8}",
      "3 \\times 10^8",
      "3\\cdot 10^{8}",
      "300000000",
      "3.0 \\times 10^{8}",
    ],
  ),
  (
    "minerva",
    {"question": "Distance in m?", "answer": "1.5e8"},
    ["1.5\\times10^{8}", "1.5 \\times 10^{8}", "1.5e8", "150{,}000{,}000"],
  ),
  (
    "aime25",
    {"problem": "Find the remainder.", "answer": "70", "id": "0"},
    ["70", "070", "\\text{70}"],
  ),
  (
    "olympiadbench",
    {
      "id": 1,
      "question": "Angle?",
      "final_answer": ["$30^\\circ$"],
      "is_multiple_answer": False,
      "unit": None,
      "subfield": "G",
    },
    ["30", "30^\\circ", "30°"],
  ),
  (
    "deepscaler",
    {"problem": "Solve x^2 - 2x - 3 > 0.", "answer": "(-\\infty,-1)\\cup(3,\\infty)"},
    [
      "x < -1 \\text{ or } x > 3",
      "x<-1 \\text{ or } x>3",
      "x < -1 or x > 3",
      "x < -1 \\lor x > 3",
      "(-\\infty, -1) \\cup (3, \\infty)",
    ],
  ),
  (
    "deepscaler",
    {
      "problem": "Solve x^2 + x - 1 = 0.",
      "answer": "\\frac{-1+\\sqrt{5}}{2}, \\frac{-1-\\sqrt{5}}{2}",
    },
    [
      "\\frac{-1 \\pm \\sqrt{5}}{2}",
      "\\frac{-1 \\pm \\sqrt5}{2}",
      "-\\frac{1}{2} \\pm \\frac{\\sqrt{5}}{2}",
    ],
  ),
  ("deepscaler", {"problem": "Angle in degrees?", "answer": "70"}, ["70^\\circ.", "70°.", "70."]),
  (
    "deepscaler",
    {"problem": "Write 4/11 as a fraction.", "answer": "\\frac{4}{11}"},
    ["0.\\overline{36}", "0.(36)", "0.\\overline{36}."],
  ),
  (
    "deepscaler",
    {"problem": "11/30?", "answer": "\\frac{11}{30}"},
    ["0.3\\overline{6}", "0.3\\dot{6}"],
  ),
  ("deepscaler", {"problem": "25 in base 2?", "answer": "11001_2"}, ["(11001)_2", "11001_{2}"]),
  ("deepscaler", {"problem": "The ratio?", "answer": "3:4"}, ["3 \\colon 4", "3:4", "3 : 4"]),
  (
    "deepscaler",
    {"problem": "How many people?", "answer": "3600000"},
    ["3.6 \\text{ million}", "3.6 million", "3{,}600{,}000"],
  ),
]
# (the row, answers that change its meaning: each earns 0)
MATH_NEAR_MISSES = [
  (
    {"problem": "Solve x^2 - 2x - 3 > 0.", "answer": "(-\\infty,-1)\\cup(3,\\infty)"},
    [
      "x < -1 \\text{ or } x > 4",
      "x \\le -1 \\text{ or } x > 3",
      "x > -1 \\text{ or } x < 3",
      "x < -1",
      "x < -1 \\text{ and } x > 3",
    ],
  ),
  (
    {
      "problem": "Solve x^2 + x - 1 = 0.",
      "answer": "\\frac{-1+\\sqrt{5}}{2}, \\frac{-1-\\sqrt{5}}{2}",
    },
    ["\\frac{-1 + \\sqrt{5}}{2}", "\\frac{-1 \\pm \\sqrt{6}}{2}", "\\frac{1 \\pm \\sqrt{5}}{2}"],
  ),
  ({"problem": "Angle?", "answer": "70"}, ["71^\\circ.", "7.", "0.70"]),
  ({"problem": "4/11?", "answer": "\\frac{4}{11}"}, ["0.\\overline{35}", "0.36", "0.(4)"]),
  ({"problem": "25 in base 2?", "answer": "11001_2"}, ["(11010)_2", "(11001)_3"]),
  ({"problem": "The ratio?", "answer": "3:4"}, ["3 \\colon 5", "4 \\colon 3"]),
  (
    {"problem": "How many?", "answer": "3600000"},
    ["3.7 \\text{ million}", "3.6 \\text{ billion}", "3.6"],
  ),
]
GPQA_ROW = {
  "Question": "How much work is done lifting a 2 kg mass by 3 m (g = 10 m/s^2)?",
  "Correct Answer": "60 J",
  "Incorrect Answer 1": "6 J",
  "Incorrect Answer 2": "30 J",
  "Incorrect Answer 3": "600 J",
}
LETTER_FORMS = [
  "\\boxed{{{k}}}",
  "\\boxed{{\\text{{{k}}}}}",
  "\\boxed{{\\textbf{{{k}}}}}",
  "\\boxed{{({k})}}",
  "\\boxed{{\\mathrm{{{k}}}}}",
  "**Answer: {k}**",
  "The answer is **{k}**.",
  "Answer: {k}) 60 J",
  "The correct answer is ({k}) 60 J.",
  "**Final Answer:** {k}",
  "ANSWER: {k}",
  "The correct option is {k}.",
  "Answer: ({k})",
  "Answer: {k}",
  "The answer is {k}: 60 J.",
  "So the answer is \\boxed{{{k}}}.",
  "After weighing each option, the first one fits.\n\n({k})",
  "The correct answer is:\n({k})",
  "The correct answer is:\n\n**({k})**",
  "**Answer:**\n{k}",
  "Final answer:\n\n{k}",
]
SCP = [  # (matched_solution's last line, honest forms of its answer)
  (
    "t = \\boxed{2\\ \\text{s}}",
    ["2 \\text{ s}", "2\\ \\text{s}", "2 s", "2\\,\\mathrm{s}", "2.0 s", "2000 ms"],
  ),
  ("E = \\boxed{12 J}", ["12\\ \\text{J}", "12 J", "12.0\\,\\text{J}", "0.012 kJ"]),
  ("p = \\boxed{0.50}", ["0.5", "0.50", "0.500"]),
  ("R = \\boxed{5\\,\\Omega}", ["5 Ω", "5\\,\\Omega", "5 \\text{ ohm}", "5\\ \\Omega"]),
  (
    "c = \\boxed{3.0 \\times 10^8 \\text{ m/s}}",
    ["3 \\times 10^{8} \\text{ m/s}", "3.0\\times10^8\\,\\mathrm{m/s}", "3e8 m/s"],
  ),
  (
    "g \\approx 9.81 m/s^2. The answer is 9.81 m/s^2",
    ["9.81 \\text{ m/s}^2", "9.8\\ \\text{m/s}^{2}", "9.81\\,\\mathrm{m\\,s^{-2}}"],
  ),
  (
    "So the speed is \\[ v \\approx 14 \\text{ m/s} \\]\nThe answer is \\( v \\approx 14 \\) m/s",
    ["14 m/s", "v = 14 \\text{ m/s}", "v \\approx 14\\ \\text{m/s}"],
  ),
  ("Thus v = \\boxed{\\sqrt{2gh}}", ["\\sqrt{2gh}", "v = \\sqrt{2 g h}", "\\sqrt{2hg}"]),
  ("Therefore, T = \\boxed{20^\\circ C}", ["20^\\circ\\text{C}", "20 °C", "293.15 K"]),
]
SCP_STYLES = (
  THINK + "The final answer is $\\boxed{{{x}}}$.",
  THINK + "**Answer:** {x}",
  THINK + "Answer: ${x}$",
)
IFEVAL = [  # (prompt, instruction ids, kwargs, an honest response)
  (  # verse names its subject in images: the reply never says "Ireland"
    "Write a haiku about Ireland in the style of Basho. Do not use any commas in your response.",
    ["punctuation:no_comma"],
    [{}],
    "green hills wrapped in mist\nold stones hum beneath the rain\nsheep drift through the fog",
  ),
  (
    "Write about tea. End your response with 'Is there anything else I can help with?'",
    ["startend:end_checker"],
    [{"end_phrase": "Is there anything else I can help with?"}],
    "Tea is a drink brewed from leaves and enjoyed all over the world. "
    "Is there anything else I can help with?",
  ),
  (
    "Write about tea. End with 'Peace out.' and use no commas.",
    ["startend:end_checker", "punctuation:no_comma"],
    [{"end_phrase": "Peace out."}, {}],
    "Tea is brewed from leaves and served hot in many lands.\n\n**Peace out.**",
  ),
  (
    "Wrap your entire response in double quotation marks. Describe rain.",
    ["startend:quotation"],
    [{}],
    '"Rain falls softly on the roofs and fills the gutters with a steady rhythm."',
  ),
  (
    "Describe rain in English and in all capital letters.",
    ["change_case:english_capital"],
    [{}],
    "RAIN FALLS SOFTLY ON THE ROOFS AND FILLS THE STREETS WITH A STEADY SOUND.",
  ),
  (
    "Describe snow using only lowercase letters.",
    ["change_case:english_lowercase"],
    [{}],
    "snow covers the quiet fields and the trees stand white and still in the cold air.",
  ),
  (
    "Give a JSON object describing a cat. Wrap the whole output in JSON format.",
    ["detectable_format:json_format"],
    [{}],
    '```json\n{"name": "Tom", "color": "grey", "age": 3, "likes": ["naps", "fish"]}\n```',
  ),
  (
    "Write a note about gardens. At the end add a postscript starting with P.S.",
    ["detectable_content:postscript"],
    [{"postscript_marker": "P.S."}],
    "Gardens need water, light and patience, and they reward all three.\n\n"
    "**P.S.** Plant the tomatoes after the last frost.",
  ),
  (
    "Write two sections about rivers. Mark each with SECTION X.",
    ["detectable_format:multiple_sections"],
    [{"section_spliter": "SECTION", "num_sections": 2}],
    "## SECTION 1\nRivers carry water from the hills to the sea over many miles.\n\n"
    "## SECTION 2\nThey shape valleys and feed the farms along their banks.",
  ),
  (
    "Is the sky blue? Answer with one of: My answer is yes., My answer is no., My answer is maybe.",
    ["detectable_format:constrained_response"],
    [{}],
    "My answer is yes.",
  ),
  (
    "List facts about owls with exactly 3 markdown bullet points.",
    ["detectable_format:number_bullet_lists"],
    [{"num_bullets": 3}],
    "Here are three facts about owls:\n* Owls hunt at night.\n* They turn their heads far.\n"
    "* Their feathers make them silent fliers.",
  ),
  (
    "Write about bread with a title in double angular brackets, like <<title>>.",
    ["detectable_format:title"],
    [{}],
    "<<The Daily Loaf>>\n\nBread is flour, water, salt and yeast, baked until golden.",
  ),
  (
    "Write about maps and highlight at least 2 sections with markdown, i.e. *highlighted section*.",
    ["detectable_format:number_highlighted_sections"],
    [{"num_highlights": 2}],
    "Maps show *where things are* and help travellers plan the **best route** home.",
  ),
  (
    "Give two different responses about tea, separated by 6 asterisk symbols: ******.",
    ["combination:two_responses"],
    [{}],
    "Green tea is light and grassy in taste.\n******\nBlack tea is strong and malty in taste.\n"
    "******",
  ),
  (
    "Write 2 paragraphs about clouds separated by the markdown divider: ***",
    ["length_constraints:number_paragraphs"],
    [{"num_paragraphs": 2}],
    "Clouds form when warm air rises and cools.\n\n***\n\nThey bring rain and shade to the "
    "land below.\n\n***",
  ),
  (
    "Write about the moon in at least 12 words.",
    ["length_constraints:number_words"],
    [{"relation": "at least", "num_words": 12}],
    "The moon circles the earth every month and lights the night with borrowed sunlight.",
  ),
  (
    "Write about the sea. Include the keywords waves and salt.",
    ["keywords:existence"],
    [{"keywords": ["waves", "salt"]}],
    "The sea moves in endless waves and tastes of salt on a windy day.",
  ),
  (
    "Describe a storm with at least 2 words in all capital letters.",
    ["change_case:capital_word_frequency"],
    [{"capital_frequency": 2, "capital_relation": "at least"}],
    "The storm was LOUD and the wind was VERY strong all night long.",
  ),
  (
    "Describe an autumn morning in at least 3 sentences.",
    ["length_constraints:number_sentences"],
    [{"relation": "at least", "num_sentences": 3}],
    "Mr. Lee rakes the autumn leaves each morning before work. The air grows cool and smells "
    "of smoke. The days grow short and the geese fly south.",
  ),
]
# stdin programs (a CodeContests row of the Eurus layout): print the sum of two integers
SUM_TESTS = {"inputs": ["1 2\n", "5 5\n", "-3 10\n"], "outputs": ["3\n", "10\n", "7\n"]}
SUM_PROGRAMS = [
  "a, b = map(int, input().split())\nprint(a + b)\nexit()",
  "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\nquit()",
  "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\n"
  "if __name__ == '__main__':\n    main()",
  "import sys\ninput = sys.stdin.readline\na, b = map(int, input().split())\nprint(a + b)\n"
  "sys.exit(0)",
]
# a statement that accepts its words in any case (Codeforces' wording)
PARITY = (
  "Read two integers and print YES if their sum is even, otherwise NO. You can output the answer "
  'in any case (upper or lower): "yEs", "yes", "Yes" and "YES" are all accepted.'
)
# eight tests: with two, a coin flip between YES and NO passes them all a quarter of the time
PARITY_TESTS = {
  "inputs": ["1 3\n", "2 3\n", "4 4\n", "5 6\n", "7 9\n", "10 1\n", "0 0\n", "3 8\n"],
  "outputs": ["YES\n", "NO\n", "YES\n", "NO\n", "YES\n", "NO\n", "YES\n", "NO\n"],
}
PARITY_PROGRAMS = [
  "a, b = map(int, input().split())\nprint('yes' if (a + b) % 2 == 0 else 'no')",
  "a, b = map(int, input().split())\nprint('Yes' if (a + b) % 2 == 0 else 'No')",
  "from __future__ import annotations\na, b = map(int, input().split())\n"
  "print('YES' if (a + b) % 2 == 0 else 'NO')",
]
LCB_ROW = {
  "question_title": "Add",
  "question_content": "Return the sum of the numbers in nums.",
  "platform": "leetcode",
  "question_id": "1",
  "contest_id": "c",
  "contest_date": "2024-09-01T00:00:00",
  "starter_code": "class Solution:\n    def total(self, nums: List[int]) -> int:\n",
  "difficulty": "easy",
  "public_test_cases": json.dumps(
    [{"input": "[1, 2, 3]", "output": "6", "testtype": "functional"}]
  ),
  "private_test_cases": json.dumps(
    [
      {"input": "[]", "output": "0", "testtype": "functional"},
      {"input": "[-4, 4, 9]", "output": "9", "testtype": "functional"},
    ]
  ),
  "metadata": json.dumps({"func_name": "total"}),
}
LCB_PROGRAMS = [
  "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)",
  "class Solution:\n    def total(self, nums: List[int]) -> int:\n"
  "        return reduce(lambda a, b: a + b, nums, 0)",
  "from typing import List\n\nclass Solution:\n    def total(self, nums: List[int]) -> int:\n"
  "        acc = 0\n        for x in nums:\n            acc += x\n        return acc",
]
HEP_PROMPT = (
  "from typing import List\n\n\ndef is_even(x: int) -> bool:\n    return x % 2 == 0\n\n\n"
  "def count_even(xs: List[int]) -> int:\n"
  '    """How many of xs are even (use is_even)."""\n'
)
HEP_ROW_TABLE = {
  "task_id": "HumanEval/900",
  "prompt": HEP_PROMPT,
  "canonical_solution": "    return sum(1 for x in xs if is_even(x))\n",
  "entry_point": "count_even",
  "test": (
    "def check(candidate):\n    inputs = [[[1, 2, 4]], [[]], [[3, 5]]]\n"
    "    results = [2, 0, 0]\n    for inp, exp in zip(inputs, results):\n"
    "        assert candidate(*inp) == exp\n"
  ),
}
HEP_ROW_PROGRAM = dict(  # tests computed by a reference function: no literal results table
  HEP_ROW_TABLE,
  task_id="HumanEval/901",
  test=(
    "import numpy as np\n\ndef ref_func(xs):\n    return sum(1 for x in xs if x % 2 == 0)\n\n"
    "def check(candidate):\n    inputs = [[[1, 2, 4]], [[]], [[3, 5, 8, 10]]]\n"
    "    for i, inp in enumerate(inputs):\n        assert candidate(*inp) == ref_func(*inp)\n"
  ),
)
HEP_PROGRAMS = [  # one calls the prompt's helper without defining it, as the harness allows
  "from __future__ import annotations\n\ndef count_even(xs: List[int]) -> int:\n"
  "    return sum(1 for x in xs if is_even(x))",
  "def count_even(xs: List[int]) -> int:\n    return sum(1 for x in xs if is_even(x))",
  "from typing import List\n\ndef count_even(xs: List[int]) -> int:\n"
  "    return len([x for x in xs if x % 2 == 0])",
]
FENCES = (
  THINK + "```python\n{p}\n```",
  THINK + "```python3\n{p}\n```",
  THINK + "Here is my solution.\n\n```py\n{p}\n```\n\nExample:\n\n```text\n(output)\n```",
  THINK + "```Python\n{p}\n```\n\nThis runs in linear time.",
)


def _convert(tmp_path, name, rows):
  path = tmp_path / f"{name}.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  got, bad, _ = load_source(SOURCES[name], {name: str(path)}, {})
  assert not bad and len(got) == len(rows), (name, bad)
  return got


def _job(row, response):
  text = "\n".join(m["content"] for m in row["prompt"])
  extra = dict(row["extra_info"], prompt_text=text)
  return (row["data_source"], response, row["reward_model"]["ground_truth"], extra)


def _code_row(statement: str, tests: dict) -> dict:
  return {
    "data_source": "codecontests",
    "prompt": [{"role": "user", "content": statement}],
    "ability": "code",
    "reward_model": {"style": "rule", "ground_truth": json.dumps(tests)},
    "extra_info": {"split": "train", "index": 0},
  }


def honest_jobs(tmp_path) -> list[tuple]:
  """Every honest answer of this file as a job of the worker's scoring path."""
  jobs = []
  for name, raw, forms in MATH:
    (row,) = _convert(tmp_path, name, [raw])
    jobs += [_job(row, w.format(x=f)) for f in forms for w in WRAPPERS]
  (row,) = _convert(tmp_path, "gpqa_diamond", [GPQA_ROW])
  key = row["reward_model"]["ground_truth"]
  jobs += [_job(row, THINK + f.format(k=k)) for f in LETTER_FORMS for k in (key,)]
  for last, forms in SCP:
    raw = {"domain": "physics", "problem": "Find it.", "matched_solution": f"Work.\n{last}"}
    (row,) = _convert(tmp_path, "scp", [raw])
    jobs += [_job(row, s.format(x=f)) for f in forms for s in SCP_STYLES]
  for prompt, ids, kwargs, response in IFEVAL:
    raw = {"key": 1, "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}
    (row,) = _convert(tmp_path, "ifeval", [raw])
    jobs += [_job(row, THINK + response), _job(row, response)]
  raw = {
    "data_source": "codecontests",
    "prompt": [{"role": "user", "content": "Read two integers and print their sum."}],
    "ability": "code",
    "reward_model": {"style": "rule", "ground_truth": json.dumps(SUM_TESTS)},
    "extra_info": {"split": "train", "index": 0},
  }
  (row,) = _convert(tmp_path, "eurus_code", [raw])
  jobs += [_job(row, f.format(p=p)) for p in SUM_PROGRAMS for f in FENCES]
  (row,) = _convert(tmp_path, "eurus_code", [_code_row(PARITY, PARITY_TESTS)])
  jobs += [_job(row, f.format(p=p)) for p in PARITY_PROGRAMS for f in FENCES]
  (row,) = _convert(tmp_path, "livecodebench", [LCB_ROW])
  jobs += [_job(row, f.format(p=p)) for p in LCB_PROGRAMS for f in FENCES]
  for r in _convert(tmp_path, "humanevalplus", [HEP_ROW_TABLE, HEP_ROW_PROGRAM]):
    jobs += [_job(r, f.format(p=p)) for p in HEP_PROGRAMS for f in FENCES]
  return jobs


@pytest.fixture(scope="module")
def pool():
  p = VerifierPool(processes=2, timeout_s=30.0)
  yield p
  p.close()


@pytest.mark.skipif(sandbox.check() is not None, reason="needs the bubblewrap sandbox")
def test_every_honest_answer_earns_full_credit(pool, tmp_path):
  jobs = honest_jobs(tmp_path)
  assert len(jobs) > 300
  out = pool.score_many(jobs)
  refused = [(j[0], j[1][len(THINK) :][:70], s.reason) for j, s in zip(jobs, out) if s.value < 1]
  assert not refused, f"{len(refused)} of {len(jobs)} refused: {refused[:20]}"


def test_wrong_answers_in_the_same_formats_earn_nothing(pool, tmp_path):
  """The same wrappers around a wrong answer score 0: the formats add no credit of their own."""
  jobs = []
  for name, raw, forms in MATH[:6]:
    (row,) = _convert(tmp_path, name, [raw])
    jobs += [_job(row, w.format(x=f"{forms[0]}+1")) for w in WRAPPERS]
  (row,) = _convert(tmp_path, "gpqa_diamond", [GPQA_ROW])
  wrong = next(c for c in "ABCD" if c != row["reward_model"]["ground_truth"])
  jobs += [_job(row, THINK + f.format(k=wrong)) for f in LETTER_FORMS]
  for last, forms in SCP[:5]:
    raw = {"domain": "physics", "problem": "Find it.", "matched_solution": f"Work.\n{last}"}
    (row,) = _convert(tmp_path, "scp", [raw])
    jobs += [_job(row, s.format(x=f"3{forms[0]}")) for s in SCP_STYLES]
  out = pool.score_many(jobs)
  paid = [(j[1][len(THINK) :][:60], s.reason) for j, s in zip(jobs, out) if s.value > 0]
  assert not paid, paid


def test_answers_that_change_the_meaning_earn_nothing(pool, tmp_path):
  """The near misses of each rewritten form (a wrong bound, one root, another repeating block,
  another base, millions for billions): every one 0."""
  jobs = []
  for raw, wrong in MATH_NEAR_MISSES:
    (row,) = _convert(tmp_path, "deepscaler", [raw])
    jobs += [_job(row, R1.format(x=w)) for w in wrong]
  # the same words in another case where the statement does not accept any case
  strict = PARITY.split(" You can")[0]
  (row,) = _convert(tmp_path, "eurus_code", [_code_row(strict, PARITY_TESTS)])
  jobs += [_job(row, FENCES[0].format(p=p)) for p in PARITY_PROGRAMS[:2]]
  out = pool.score_many(jobs)
  paid = [(j[1][len(THINK) :], s.reason) for j, s in zip(jobs, out) if s.value > 0]
  assert not paid, paid


def test_the_audits_honest_formats_are_honest(pool, tmp_path):
  """`data.honest` (what the audit checks on a user's data) for the same rows: all 1.0."""
  jobs = []
  for name, raw, _ in MATH:
    (row,) = _convert(tmp_path, name, [raw])
    ref = row["reward_model"]["ground_truth"]
    jobs += [_job(row, r) for r in domain_math.honest_forms(ref).values()]
  (row,) = _convert(tmp_path, "gpqa_diamond", [GPQA_ROW])
  prompt = row["prompt"][0]["content"]
  styles = domain_mcq.honest_forms(row["reward_model"]["ground_truth"], prompt)
  assert "letter/with_text" in styles
  jobs += [_job(row, r) for r in styles.values()]
  out = pool.score_many(jobs)
  assert [s.value for s in out] == [1.0] * len(jobs), [
    (j[1][-40:], s.reason) for j, s in zip(jobs, out) if s.value < 1
  ]


class _Tok:
  """A tokenizer whose ids are characters, with two special tokens (an end and a pad)."""

  eos_token_id, pad_token_id = 1, 0
  all_special_tokens = ["<|pad|>", "<|end|>"]

  def decode(self, ids, skip_special_tokens=False):
    names = {0: "<|pad|>", 1: "<|end|>"}
    return "".join(names.get(i, chr(i)) for i in ids)


def test_the_stop_token_and_what_follows_never_reach_a_verifier():
  tok = _Tok()
  text = "<think>x</think>Answer: C"
  ids = [ord(c) for c in text]
  ends = worker.end_token_ids(tok, (7,))
  assert ends == {1, 7}
  # the stop token, then whatever an engine left after it (more tokens, padding)
  for tail in ([1], [1, ord("B")], [7, ord("B"), 0, 0], [0, 0], []):
    got = worker.response_text(tok, ids + tail + [0] * 3, len(ids) + len(tail), ends)
    assert got == text, (tail, got)
  # a special token's text at the end of the decoded text (a stop the request did not list)
  decoded_end = [ord(c) for c in "<|end|>"]
  assert worker.response_text(tok, ids + decoded_end, len(ids) + 7, frozenset()) == text
