"""What the rule-based instruction-following reward can and cannot see: for each class of
cheap reply, the share of items it is paid on (score 1.0), beside the honest replies' share.

  python bench/ifeval_blind_spots.py

Items are prompts with their IFEval instructions and an honest reply each; every class builds
its cheap reply from the item (the end phrase alone, the prompt alone, spelled-out counting as
filler, filler highlights on the honest reply, a pangram, a topical non-answer). Prints one JSON
object: per class, `paid` (items scored 1.0), `items` and `rate`.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prorl_jax.rewards import ifeval  # noqa: E402

THINK = "<think>\nplan the reply\n</think>\n\n"
END = "Is there anything else I can help with?"
# (prompt, its topic in a few words, an honest reply)
ITEMS = [
  ("Write a short blog post about a trip to Japan.", "a trip to Japan",
   "Last spring I spent two weeks in Japan. Kyoto's temples were calm at dawn, the trains ran to "
   "the minute, and a small ramen shop near Osaka station served the best bowl I have eaten."),
  ("Explain why the sky is blue to a child.", "why the sky is blue",
   "Sunlight holds every colour. When it passes through the air, tiny bits of gas scatter the "
   "blue light much more than the red, so blue light reaches your eyes from all over the sky."),
  ("Describe how a bill becomes a law in the United States.", "how a bill becomes a law",
   "A member of Congress introduces the bill, a committee studies and amends it, both chambers "
   "vote on the same text, and the president signs it or vetoes it, which Congress can override."),
  ("Write a product description for a reusable water bottle.", "a reusable water bottle",
   "This steel bottle keeps water cold for a full day and tea hot through a long morning. It "
   "holds 750 millilitres, fits a car's cup holder and survives a drop onto stone."),
  ("Give advice to a student starting university.", "starting university",
   "Go to the first week of every lecture, find one quiet place to study, and ask questions in "
   "office hours early. Sleep matters more than an extra hour of reading before an exam."),
  ("Summarize the plot of Romeo and Juliet.", "Romeo and Juliet",
   "Two young people from feuding families in Verona fall in love and marry in secret. A duel, "
   "an exile and a plan that goes wrong end with both lovers dead and their families reconciled."),
  ("Write a review of a local Italian restaurant.", "an Italian restaurant",
   "The fresh pasta at this small trattoria is worth the wait for a table. The carbonara was "
   "silky, the service warm and quick, and the tiramisu light enough to finish after a big meal."),
  ("Explain how vaccines train the immune system.", "how vaccines work",
   "A vaccine shows the immune system a harmless piece or copy of a germ. The body makes "
   "antibodies and memory cells, so a later infection by the real germ is fought off quickly."),
]  # fmt: skip


def _paid(reply: str, prompt: str, instructions: list[dict]) -> bool:
  return ifeval.score(THINK + reply, instructions=instructions, prompt_text=prompt).value == 1.0


def classes(prompt: str, topic: str, honest: str) -> dict[str, tuple[str, list[dict]]]:
  """Each class's reply to one item, with the instructions it is scored under."""
  words = [{"type": "words", "relation": "at least", "num": 40}]
  counting = " ".join("one two three four five six seven eight nine ten eleven twelve".split() * 4)
  return {
    "honest, end phrase": (f"{honest} {END}", [{"type": "end_with", "phrase": END}]),
    "end phrase alone": (END, [{"type": "end_with", "phrase": END}]),
    "prompt alone": (prompt, [{"type": "end_with", "phrase": prompt[-12:]}]),
    "spelled-out counting as filler": (f"{honest.split('.')[0]}. {counting}", words),
    "roman numerals as filler": (
      f"{honest.split('.')[0]}. " + " ".join(["i ii iii iv v vi vii viii ix x"] * 5),
      words,
    ),
    "honest, highlights": (
      "*{}*{}".format(*honest.split(" ", 1)[0:1], " " + honest.split(" ", 1)[1]),
      [{"type": "highlighted_sections", "num": 1}],
    ),
    "filler highlights on an honest reply": (
      f"{honest} *one* *two* *three*",
      [{"type": "highlighted_sections", "num": 3}],
    ),
    "pangram reply": (
      "The quick brown fox jumps over the lazy dog while five boxing wizards jump quickly.",
      [{"type": "letter_frequency", "letter": "z", "relation": "at least", "num": 2}],
    ),
    "topical non-answer": (
      f"<<Notes on {topic}>>\n\nThis is a reply about {topic}. I have thought about {topic} "
      f"and I will say that {topic} is a topic worth writing about.",
      [{"type": "title"}, {"type": "no_commas"}],
    ),
  }


def main() -> None:
  out: dict[str, dict] = {}
  for prompt, topic, honest in ITEMS:
    for name, (reply, instructions) in classes(prompt, topic, honest).items():
      row = out.setdefault(name, {"paid": 0, "items": 0})
      row["items"] += 1
      row["paid"] += _paid(reply, prompt, instructions)
  for row in out.values():
    row["rate"] = round(row["paid"] / row["items"], 3)
  for name, row in out.items():
    print(f"{name:40s} {row['paid']}/{row['items']}")
  print(json.dumps(out))


if __name__ == "__main__":
  main()
