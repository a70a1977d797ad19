"""docs/architecture.md names the fields of the records a checkpoint and the exchange hold; the
dataclasses are the truth."""

import dataclasses
import os
import re

from prorl_jax.records import EngineStats, Generation, Group, Prefetch, PromptItem, Request, Result
from prorl_jax.trainer.batch import TrainBatch
from prorl_jax.trainer.loop_state import LoopState
from prorl_jax.trainer.plan import Plan
from prorl_jax.trainer.train_step import TrainState

DOC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "architecture.md")
RECORDS = {
  "TrainState": TrainState,
  "LoopState": LoopState,
  "Group": Group,
  "Request": Request,
  "Prefetch": Prefetch,
  "Result": Result,
  "Generation": Generation,
  "EngineStats": EngineStats,
  "PromptItem": PromptItem,
  "Plan": Plan,
  "TrainBatch": TrainBatch,
}


def _documented(text: str) -> dict[str, list[str]]:
  """{record: its field names} of every "`Name` (...fields `a`, `b`, ...)" in the text."""
  flat = " ".join(text.split())
  out = {}
  for name, inside in re.findall(r"`(\w+)` \((?:[^()]*?; )?fields ([^()]*)\)", flat):
    out[name] = re.findall(r"`(\w+)`", inside)
  return out


def test_the_architecture_doc_lists_each_records_fields():
  got = _documented(open(DOC).read())
  for name, cls in RECORDS.items():
    assert name in got, f"docs/architecture.md lists no fields of {name}"
    want = [f.name for f in dataclasses.fields(cls)]
    assert sorted(got[name]) == sorted(want), (name, got[name], want)


def test_the_field_check_can_fail():
  text = "the `LoopState` (fields `step`, `version`): ..."
  assert _documented(text) == {"LoopState": ["step", "version"]}
  assert sorted(_documented(text)["LoopState"]) != sorted(
    f.name for f in dataclasses.fields(LoopState)
  )
