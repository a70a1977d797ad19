"""Expected times beside the roofline bound: each time figure at a stated efficiency and where
it comes from (the project's H200 measurement by default, a user's own `bench/gpu.py --out`)."""

import json

import pytest

from prorl_jax.trainer import estimate

BOUND = {
  "train_s": 10.0,
  "logprob_s": 4.0,
  "generate_s": None,
  "train_tokens_per_s_per_chip": 1000.0,
}


def test_expected_is_the_bound_at_the_stated_efficiency():
  got = estimate.expected(BOUND, estimate.MEASURED)
  assert got["mfu"] == 0.42 and "H200" in got["mfu_source"]
  assert got["train_s"] == pytest.approx(10 / 0.42) and got["logprob_s"] == pytest.approx(4 / 0.42)
  assert got["step_s"] == pytest.approx(14 / 0.42)  # no generation in the bound: none expected
  assert got["train_tokens_per_s_per_chip"] == pytest.approx(420.0)
  inline = dict(BOUND, generate_s=6.0)
  unmeasured = estimate.expected(inline, estimate.MEASURED)
  assert unmeasured["generate_s"] is None and unmeasured["step_s"] is None  # not guessed
  cal = estimate.Calibration(0.5, "mine", 0.4, "mine")
  measured = estimate.expected(inline, cal)
  assert measured["step_s"] == pytest.approx(14 / 0.5 + 6 / 0.4)


def test_a_users_own_measurement_is_read_back(tmp_path):
  rows = [
    {"stage": "train_cudnn", "mfu_vs_989": 0.42},
    {"stage": "train_cudnn@dots", "mfu_vs_989": 0.45},
    {"stage": "sampler_jax", "tokens_per_s": 900},
  ]
  (tmp_path / "gpu.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  got = estimate.read_calibration(str(tmp_path))
  assert got.mfu == 0.45 and "bench/gpu.py" in got.mfu_source and got.bandwidth is None
  own = tmp_path / "cal.json"
  own.write_text(json.dumps({"mfu": 0.5, "bandwidth": 0.6, "source": "my v5p run"}))
  got = estimate.read_calibration(str(own))
  assert (got.mfu, got.bandwidth, got.mfu_source) == (0.5, 0.6, "my v5p run")
  bad = tmp_path / "bad.json"
  bad.write_text("{}")
  with pytest.raises(ValueError, match="--calibration=.*no train stage"):
    estimate.read_calibration(str(bad))
  with pytest.raises(ValueError, match="cannot read it"):
    estimate.read_calibration(str(tmp_path / "none.json"))


def test_a_programs_peak_is_the_sum_of_its_parts_with_what_stays_resident():
  """Each program's line: the peak is its arguments, outputs not aliased, temporaries, code and
  the resident bytes (the optimizer state and the reference beside an update slab or a log-prob
  pass), and the resident part is there: a report that dropped it would pass an update that
  does not fit."""
  import jax

  from configs import tiny
  from prorl_jax.trainer import aot, fit
  from prorl_jax.trainer.plan import Plan

  cfg = tiny.get_config()
  report = fit.report(Plan.from_config(cfg), "host", devices=jax.devices()[:1])
  lines = {ln["program"]: ln for ln in report.lines}
  for ln in lines.values():
    parts = ln["argument_bytes"] + ln["output_bytes"] - ln["alias_bytes"] + ln["temp_bytes"]
    parts += ln["code_bytes"] + ln["resident_bytes"]
    assert ln["peak_bytes_per_chip"] == parts, ln["program"]
  model_cfg = aot.model_config(Plan.from_config(cfg), "cpu")
  adam = 2 * 4 * model_cfg.num_params  # AdamW's two fp32 moments: resident beside each slab
  for name in ("logprob", "update/accumulate"):
    assert lines[name]["resident_bytes"] >= adam, (name, lines[name]["resident_bytes"], adam)


def test_each_tpu_generation_expects_its_published_figure_and_gpus_the_measured_one():
  """Every TPU row of the chip table has a published efficiency whose value is the percentage
  its source states; NVIDIA GPUs take the project's H200 measurement."""
  import re

  from prorl_jax.parallel import chips

  tpus = {k for k, c in chips.CHIPS.items() if c.platform == "tpu"}
  assert tpus == set(estimate.PUBLISHED) and tpus >= {"v4", "v5e", "v5p", "v6e"}
  for kind in tpus:
    cal = estimate.calibration_for(kind)
    stated = float(re.search(r"([\d.]+)% MFU", cal.mfu_source).group(1)) / 100
    assert cal.mfu == pytest.approx(stated, abs=1e-6), kind
    assert cal.mfu_source.startswith("published: MaxText") and "github.com" in cal.mfu_source
    assert cal.bandwidth is None  # no decode figure: the bound only
  for kind, c in chips.CHIPS.items():
    if c.platform == "cuda":
      assert estimate.calibration_for(kind) is estimate.MEASURED
  assert (
    estimate.calibration_for("v5e").mfu == 0.611 and estimate.calibration_for("v6e").mfu == 0.4546
  )
