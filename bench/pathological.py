"""How each verifier's reading of a response scales with long runs of one character (the texts a
regex backtracks on: underscores, digits, letters without spaces, braces, asterisks, ...).

  python bench/pathological.py [--n 4000] [--factor 8] [--repeats 3]

For each verifier and each payload it times the verifier's own reading (read, extraction,
rendering, the hack monitor's detectors; not the sandbox or math-verify, which run under their
own limits) at n and factor·n characters, in this process, min over `repeats`; one JSON line per
case with both times and their ratio: linear reading gives a ratio near `factor`, quadratic
near factor². The last line is the largest ratio seen.
"""

from __future__ import annotations

import argparse
import json
import time

from prorl_jax.rewards import detectors, ifeval, mcq, puzzles
from prorl_jax.rewards.code import extract_code
from prorl_jax.rewards.common import Score, last_boxed, read
from prorl_jax.rewards.quantity import parse, plain_math

PAYLOADS = ["_", "1", "a", "é", "a_", "*", "{", "(", "\\", "$", " ", "1.", "-", "<", "[", "\n", "|"]
IFEVAL = [
  {"type": "no_commas"},
  {"type": "words", "relation": "at least", "num": 5},
  {"type": "highlighted_sections", "num": 2},
  {"type": "title"},
  {"type": "placeholders", "num": 1},
  {"type": "postscript", "marker": "P.S."},
]
PROMPT = "Write about tides.<think>\n"


def _readers():
  def answer(text):
    final = read(text, PROMPT).answer or ""
    return final

  return {
    "math": lambda t: plain_math(last_boxed(answer(t)) or answer(t)[-200:]),
    "stem": lambda t: (mcq.extract(answer(t)), parse(answer(t)[-200:])),
    "ifeval": lambda t: ifeval.score(t, None, instructions=IFEVAL, prompt_text=PROMPT),
    "code": lambda t: extract_code(t, PROMPT),
    "reasoning_gym": lambda t: puzzles.answer_tag(answer(t)),
    "detectors": lambda t: detectors.flags("ifeval", t, Score(0.0), PROMPT),
  }


def _time(fn, text, repeats):
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn(text)
    best = min(best, time.perf_counter() - t0)
  return best


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=4000)
  ap.add_argument("--factor", type=int, default=8)
  ap.add_argument("--repeats", type=int, default=3)
  args = ap.parse_args()
  worst = 0.0
  for name, fn in _readers().items():
    for p in PAYLOADS:
      texts = [
        "w</think>" + p * (args.n // len(p)),
        "w</think>" + p * (args.n * args.factor // len(p)),
      ]
      small, large = (_time(fn, t, args.repeats) for t in texts)
      ratio = large / max(small, 1e-6)
      worst = max(worst, ratio if large > 0.01 else 0.0)  # ratios of microseconds are noise
      print(
        json.dumps(
          {
            "reader": name,
            "payload": p,
            "n": args.n,
            "small_s": round(small, 5),
            "large_s": round(large, 5),
            "ratio": round(ratio, 1),
          }
        ),
        flush=True,
      )
  print(json.dumps({"factor": args.factor, "worst_ratio_over_10ms": round(worst, 1)}))


if __name__ == "__main__":
  main()
