"""`prorl-compile` (= python -m prorl_jax.cli.compile): will the run fit, and how fast would it be?

  python -m prorl_jax.cli.compile --config=configs/qwen15b.py --topology=v5p-8 \\
      --config.model.path=deepseek-r1-distill-qwen-1.5b [--config.rollout.engine=inline] [--fit]

Compiles every program of the run (the packed update, the log-prob pass, the reference reset
and, with rollout.engine=inline, the JAX engine's weight layout, prefill and decode step) for
a named TPU slice or GPU node on this host, without the chips (`parallel.chips`), and prints a
JSON line per program on stdout (the compiler's per-device bytes, the chip's HBM, model-counted
FLOPs and bytes, a roofline time), then a last line with the topology, whether everything fits
and the step estimates; a table goes to stderr. Times are estimates from published peak
numbers, never measurements. Exit status: 0 fits, 1 does not fit (one line says what does not
and which settings change it; --fit tries them in order and prints the first that fits),
2 a usage error.

Needs libtpu and the CUDA compiler plugin (`make venv-chips`); run from another environment,
it re-runs itself in .venv-chips when that exists.
"""

from __future__ import annotations

import copy
import json
import os
import sys

ENV = {
  "JAX_PLATFORMS": "cpu",  # the host computes nothing; the chips are compile-only devices
  "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",  # no TPU is held: several compiles may run at once
  "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": "1",  # no CUDA runtime is needed to compile for one
  "TPU_SKIP_MDS_QUERY": "1",  # no cloud metadata server to ask
  "TF_CPP_MIN_LOG_LEVEL": "3",
  # libtpu's start-up reads these; without them it logs errors about a TPU VM it is not on
  "TPU_WORKER_HOSTNAMES": "localhost",
  "TPU_ACCELERATOR_TYPE": "v5p-8",
  "GRPC_VERBOSITY": "ERROR",
}
CHIPS_VENV = ".venv-chips"
FITS = {True: "yes", False: "NO", None: "?"}
GB = 1e9


def _reexec_if_needed() -> None:
  """Runs this command in .venv-chips when this interpreter lacks libtpu or the CUDA plugin."""
  import importlib.util  # lazy: this runs before anything else is imported (see `run`)

  if importlib.util.find_spec("libtpu") and importlib.util.find_spec("jax_plugins"):
    return
  here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  venv = os.path.join(here, CHIPS_VENV)
  python = os.path.join(venv, "bin", "python")
  # by prefix, not by the interpreter's path: a venv's python is a link to the base interpreter
  if os.path.exists(python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
    os.execv(python, [python, "-m", "prorl_jax.cli.compile", *sys.argv[1:]])
  print(
    "error: compiling for chips needs libtpu and the CUDA compiler plugin: run `make venv-chips` "
    "(or pip install -r requirements-chips.txt)",
    file=sys.stderr,
  )
  sys.exit(2)


def table(lines: list[dict], last: dict) -> str:
  """The terminal's view of the lines: a row per program, then the step estimate."""
  rows = [
    f"{'program':<18} {'fits':>4} {'peak GB':>8} {'HBM GB':>7} {'temp GB':>8} "
    f"{'compile s':>9} {'roofline ms (est.)':>18}  attention"
  ]
  for ln in lines:
    peak = "-" if ln["peak_bytes_per_chip"] is None else f"{ln['peak_bytes_per_chip'] / GB:.1f}"
    rows.append(
      f"{ln['program']:<18} {FITS[ln['fits']]:>4} {peak:>8} "
      f"{ln['hbm_bytes_per_chip'] / GB:>7.1f} {ln['temp_bytes'] / GB:>8.2f} "
      f"{ln['compile_s']:>9.1f} {ln['roofline_s_estimate'] * 1e3:>18.2f}  {ln['attention'] or '-'}"
      + (f"  ({ln['error']})" if ln.get("error") else "")
    )
  est = last["estimate"]
  fmt = lambda v, unit: "-" if v is None else f"{v:,.0f} {unit}"  # noqa: E731
  total = fmt(est["total_h"], f"h for {est['total_steps']:,} steps (total_steps)")
  exp = est["expected"]
  rows.append(
    f"{last['topology']}: {'fits' if last['fits'] else 'does NOT fit'}; roofline bound (not "
    f"measured): train {fmt(est['train_tokens_per_s_per_chip'], 'tokens/s/chip')}, "
    f"decode {fmt(est['decode_tokens_per_s_per_chip'], 'tokens/s/chip')}, "
    f"{fmt(est['step_s'], 's/step')}, {total}; the step covers {est['covers']}"
  )
  rows.append(
    f"expected at {exp['mfu']:.2f} of peak FLOP/s ({exp['mfu_source']}): "
    f"{fmt(exp['step_s'], 's/step')}"
    + (
      ""
      if exp["bandwidth"] or est["generate_s"] is None
      else f"; decode: {exp['bandwidth_source']}"
    )
  )
  return "\n".join(rows)


def assumptions(mean_prompt: int, mean_response: int, keep_rate: float) -> None:
  """The estimate's assumption flags, checked: ValueError with one line naming the flag."""
  if mean_prompt < 0 or mean_response < 0:
    raise ValueError("--mean_prompt and --mean_response are token counts: 0 (the default) or more")
  if not 0.0 < keep_rate <= 1.0:
    raise ValueError(f"--keep_rate={keep_rate}: the share of groups kept, in (0, 1]")


def with_changes(cfg, changes: dict):
  """A copy of `cfg` with `changes` ({"a.b": value}) set: a setting `--fit` tries."""
  c = copy.deepcopy(cfg)
  c.update_from_flattened_dict(changes)
  return c


def main(argv) -> int:
  # lazy, as in `run`: JAX may be imported only after ENV is set
  from absl import flags

  from prorl_jax import config as config_lib
  from prorl_jax.parallel import chips
  from prorl_jax.trainer.estimate import read_calibration  # no JAX

  fv = flags.FLAGS
  cfg = fv.config
  try:  # the config's checks and the assumptions first, before JAX and the chips' plugins load:
    config_lib.validate(cfg)  # one line and exit 2, never a traceback
    assumptions(fv.mean_prompt, fv.mean_response, fv.keep_rate)
    chips.parse(fv.topology)
    calibration = read_calibration(fv.calibration) if fv.calibration else None
  except ValueError as e:  # ConfigError and TopologyError are ValueErrors
    print(f"error: {e}", file=sys.stderr)
    return 2
  from prorl_jax.trainer import fit  # lazy: imports JAX
  from prorl_jax.trainer.plan import Plan  # lazy: with fit

  try:
    plan = Plan.from_config(cfg)
    report = fit.report(
      plan,
      fv.topology,
      mean_prompt=fv.mean_prompt,
      mean_response=fv.mean_response,
      keep_rate=fv.keep_rate,
      dump=fv.dump,
      save=fv.save,
      calibration=calibration,
    )
  except (ValueError, config_lib.ConfigError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  for ln in report.lines + [report.last]:
    print(json.dumps(ln), flush=True)
  print(table(report.lines, report.last), file=sys.stderr)
  if report.last["fits"]:
    return 0
  print(report.last["why"], file=sys.stderr)
  if fv.fit:
    found = fit.find_fit(
      plan, fv.topology, lambda changes: Plan.from_config(with_changes(cfg, changes)), first=report
    )
    print(json.dumps({"fit": found}))
    print(
      f"fits with: {' '.join(f'--config.{k}={v}' for k, v in found.items())}"
      if found is not None
      else "no setting tried fits: use a larger topology",
      file=sys.stderr,
    )
  return 1


def run():
  for k, v in ENV.items():
    os.environ.setdefault(k, v)
  _reexec_if_needed()
  # lazy: JAX reads ENV when it is first imported, and a re-run in .venv-chips imports nothing here
  from absl import app, flags
  from ml_collections import config_flags

  from prorl_jax.cli import errors as cli_lib

  config_flags.DEFINE_config_file("config", None, "the run's config file", lock_config=False)
  from prorl_jax.parallel import chips  # no JAX: the topology table

  flags.DEFINE_string("topology", None, f"the slice or node to compile for: {chips.NAMES}")
  flags.DEFINE_boolean(
    "fit", False, "when it does not fit, try the settings that change it, in order"
  )
  flags.DEFINE_string("dump", "", "write each program's optimized HLO as text into this directory")
  flags.DEFINE_string("save", "", "serialise the compiled executables into this directory")
  flags.DEFINE_integer("mean_prompt", 0, "assumed mean prompt tokens (0: max_prompt_len / 4)")
  flags.DEFINE_integer("mean_response", 0, "assumed mean response tokens (0: max_response_len / 2)")
  flags.DEFINE_float("keep_rate", 1.0, "assumed share of generated groups dynamic sampling keeps")
  flags.DEFINE_string(
    "calibration",
    "",
    "the efficiency expected times use: a `bench/gpu.py --out` directory (or its gpu.jsonl), "
    'or a JSON {"mfu": ..., "bandwidth": ..., "source": ...}; default: the project\'s H200 '
    "measurement",
  )
  flags.mark_flags_as_required(["config", "topology"])
  usage = __doc__.split("\n\n")[1].strip()  # the command line of the module's docstring
  parse = lambda argv: cli_lib.parse_flags(argv, f"usage: {usage}")  # noqa: E731
  app.run(lambda argv: sys.exit(main(argv)), flags_parser=parse)


if __name__ == "__main__":
  run()
