"""Every verifier as one row (`VerifierSpec`): its module, the data sources routed to it by
default, whether it judges in a confined child, whether its score is continuous, and its domain
module for the audit. Plain data: importing it imports no verifier. A new verifier is one row
here and its module (`rewards.<module>.score`); the routing table, the pool's confinement, the
benchmarks' metric and the audit read this table and nothing else."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class VerifierSpec:
  name: str  # the verifier's name in routing tables (`data.reward_routing=source:name`)
  module: str  # `rewards.<module>` holds `score` and the verifier's hooks (`HOOKS`)
  sources: tuple[str, ...] = ()  # data sources routed to it by default
  # judged in a confined, throw-away child of the pool process (`rewards/isolate.py`): verifiers
  # that run third-party checkers on model text (math-verify and sympy, pint, Reasoning Gym's
  # scorers, langdetect). Code runs its programs in the bubblewrap sandbox and compares their
  # output in project code; the demo's chain_sum is one project regex and an exact integer
  # comparison: both are judged in the pool process (under its wall-clock kill).
  isolated: bool = True
  continuous: bool = False  # a judgement in [0, 1] (a mean), else pass/fail (pass@1)
  domain: str | None = None  # its `data.domains` module (None: the audit lists it unaudited)


VERIFIERS: dict[str, VerifierSpec] = {
  s.name: s
  for s in (
    VerifierSpec("chain_sum", "chain_sum", isolated=False),
    VerifierSpec("math", "math", ("deepscaler", "math", "aime", "amc"), domain="math"),
    VerifierSpec(
      "code",
      "code",
      (
        "codecontests",
        "apps",
        "codeforces",
        "taco",
        "primeintellect",
        "humanevalplus",
        "livecodebench",
      ),  # fmt: skip
      isolated=False,
      domain="code",
    ),
    VerifierSpec("reasoning_gym", "puzzles", ("reasoning_gym",), continuous=True, domain="puzzles"),
    VerifierSpec(
      "ifeval", "ifeval", ("ifeval", "llama_nemotron_if"), continuous=True, domain="ifeval"
    ),
    VerifierSpec("stem", "mcq", ("scp", "gpqa"), domain="mcq"),
    VerifierSpec("mcq", "mcq", domain="mcq"),
  )
}

# The functions a verifier's module may offer beside `score`: `warm(reference, **meta)` loads
# what an item needs before the pool forks; `hack_flags(final, response, prompt_text)` names what
# the hack monitor's detectors see.
HOOKS = ("warm", "hack_flags")
