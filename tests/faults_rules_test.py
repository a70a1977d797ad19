"""The fault harness's own rules (`bench/faults.py`), fast: a resumed run that does not end
identical fails; a wait past the lease fails; a cut with an empty carry-over buffer (or no cut at
all) fails the harness; a clean set of cuts passes."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("faults", os.path.join(ROOT, "bench", "faults.py"))
faults = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)

CLEAN = {"ok": True, "note": "", "starts": 2, "wait_s": 1.0, "buffer_at_cut": 2}


def test_a_resume_that_is_not_identical_fails_the_cut():
  assert faults.judged(dict(CLEAN), same_outcome=True)["ok"]
  got = faults.judged(dict(CLEAN), same_outcome=False)
  assert not got["ok"] and "differs from the reference" in got["why"]


def test_a_wait_past_the_lease_fails_the_cut():
  slow = dict(CLEAN, wait_s=faults.LEASE_S + faults.MARGIN_S + 1)
  got = faults.judged(slow, same_outcome=True)
  assert not got["ok"] and "a wait of" in got["why"]
  failed = {"ok": False, "why": "resume exit 1"}
  assert faults.judged(failed, same_outcome=False) == failed  # its own reason kept


def test_a_cut_with_an_empty_buffer_fails_the_harness():
  assert faults.exit_code([], [2, 1, 3], anywhere=False) == 0
  assert faults.exit_code([], [2, 0, 3], anywhere=False) == 1  # one cut carried nothing over
  assert faults.exit_code([], [], anywhere=False) == 1  # no cut landed at all
  assert faults.exit_code([], [0], anywhere=True) == 0  # --anywhere: any moment is a cut
  assert faults.exit_code([{"why": "x"}], [2], anywhere=False) == 1
