"""The evaluation suite's report: one table per domain, our column beside the published numbers
and beside other models measured by this harness (`--compare`), with a note for every setting in
which a compared column differs; written as JSON, Markdown and a PNG."""

from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np

from prorl_jax.data import suite as suite_lib

REFERENCES = os.path.join(
  os.path.dirname(os.path.abspath(__file__)), "reference_numbers.json"
)  # the published numbers beside ours


DOMAIN_TITLES = {
  "math": "Math",
  "code": "Code",
  "stem": "STEM",
  "instruction_following": "Instruction following",
  "logic": "Logic puzzles",
}


class SuiteError(ValueError):
  """A user-fixable problem (a model path, a flag); printed as one line."""


def write_json(path: str, obj) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with tempfile.NamedTemporaryFile("w", dir=os.path.dirname(path), delete=False) as f:
    json.dump(obj, f)
  os.replace(f.name, path)


def model_title(label: str) -> str:
  """A model's name for people: RUN_NAME step N for a checkpoint step, else the directory name
  (or EXCHANGE@VERSION as given)."""
  parts = os.path.normpath(label).split(os.sep)
  if len(parts) >= 3 and parts[-1].isdigit() and parts[-2] == "checkpoints":
    return f"{parts[-3]} step {parts[-1]}"
  return parts[-1] if "@" not in label else label


def percent(v) -> str:
  return "n/a" if v is None else f"{100 * v:.2f}%"


def load_references(path: str) -> dict:
  """The published numbers to print beside ours: {"columns": {id: {label, source}},
  "numbers": {benchmark: {id: percent or null}}}."""
  try:
    with open(path) as f:
      ref = json.load(f)
    assert isinstance(ref["columns"], dict) and isinstance(ref["numbers"], dict)
  except (OSError, ValueError, KeyError, AssertionError, TypeError) as e:
    raise SuiteError(
      f"--references={path}: not a reference-numbers file ({e}); see {REFERENCES} for the format"
    ) from None
  return ref


def load_compare(items: list[str]) -> dict:
  """{label: {"dir", "model", "settings", "files", "numbers": {benchmark: percent}}} from
  LABEL=DIR items, DIR an earlier `eval --suite` output (its report.json)."""
  out: dict[str, dict] = {}
  for item in items:
    label, _, path = item.partition("=")
    label = label.strip()
    if not label or not path or "|" in label:
      raise SuiteError(
        f"--compare {item!r}: want LABEL=DIR (a LABEL without '|'), DIR an earlier "
        "eval --suite --out"
      )
    if label in out:
      raise SuiteError(f"--compare {item!r}: the label {label!r} is given twice")
    try:
      with open(os.path.join(path, "report.json")) as f:
        rep = json.load(f)
      numbers = {
        n: None if s["pass@1"] is None else 100 * s["pass@1"] for n, s in rep["benchmarks"].items()
      }
      settings = rep["settings"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
      raise SuiteError(
        f"--compare {item!r}: no readable report in {path} ({type(e).__name__}: {e}); "
        f"write one with python -m prorl_jax.cli.eval --suite=prorl-eval ... --out={path}"
      ) from None
    out[label] = {
      "dir": os.path.abspath(path),
      "model": rep.get("model"),
      "settings": settings,
      "files": rep.get("files", {}),
      "numbers": numbers,
    }
  return out


_COMPARED_SETTINGS = ("temperature", "top_p", "max_response_len", "max_prompt_len", "samples")


def compare_differences(col: dict, settings: dict, files: dict) -> list[str]:
  """How a measured column's run differs from ours: settings, and benchmark files."""
  diff = []
  for k in _COMPARED_SETTINGS:
    theirs, ours = col["settings"].get(k), settings.get(k)
    if k == "samples" and isinstance(theirs, dict) and isinstance(ours, dict):
      diff += [
        f"{d} samples {theirs[d]} (here {n})"
        for d, n in ours.items()
        if d in theirs and theirs[d] != n
      ]
    elif theirs != ours:
      diff.append(f"{k} {theirs} (here {ours})")
  changed = [n for n, sha in files.items() if n in col["files"] and col["files"][n] != sha]
  if changed:
    diff.append(f"other benchmark files for {', '.join(changed)}")
  return diff


def build_report(
  results: dict,
  manifest: dict,
  *,
  label: str,
  settings: dict,
  samples: dict,
  references: dict,
  measured: dict | None = None,
) -> dict:
  """The report of one model's suite results: per benchmark our pass@1 (or mean score), the
  published numbers beside it, the measured columns of `compare`, with the settings and the
  files' sha256 each was measured with."""
  measured = measured or {}
  settings = dict(settings, samples=samples)
  files = {
    n: manifest["files"][manifest["benchmarks"][n]["file"]]["sha256"]
    for n in results
    if n in manifest.get("benchmarks", {})
  }
  domains: dict[str, list[str]] = {}
  for name, r in results.items():
    domains.setdefault(r["domain"], []).append(name)
  table = {}
  for domain in [d for d in suite_lib.DOMAINS if d in domains] + sorted(
    set(domains) - set(suite_lib.DOMAINS)
  ):
    rows = []
    for name in domains[domain]:
      s = results[name]["summary"]
      rows.append(
        {
          "benchmark": name,
          "ours": None if s["pass@1"] is None else 100 * s["pass@1"],
          "metric": s["metric"],
          "prompts": s["prompts"],
          "samples": s["samples"],
          "verifier_failures": s["verifier_failures"],
          "dropped_too_long": s.get("dropped_too_long", 0),
          "reference": {
            c: references["numbers"].get(name, {}).get(c) for c in references["columns"]
          },
          "measured": {m: col["numbers"].get(name) for m, col in measured.items()},
        }
      )
    vals = [r["ours"] for r in rows if r["ours"] is not None]
    table[domain] = {"rows": rows, "average": float(np.mean(vals)) if vals else None}
  return {
    "model": label,
    "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    "settings": settings,
    "domains": table,
    "reference_columns": references["columns"],
    "measured_columns": {
      m: {
        "dir": col["dir"],
        "model": col["model"],
        "differences": compare_differences(col, settings, files),
      }
      for m, col in measured.items()
    },
    "files": files,
    "benchmarks": {n: r["summary"] for n, r in results.items()},
    "data": {"suite": manifest.get("suite"), "sources": manifest.get("sources", {})},
  }


def _fmt(v) -> str:
  return "—" if v is None else f"{v:.2f}"


def _series(report: dict, rows: list[dict]) -> list[tuple[str, list]]:
  """(label, a value per row) of each number column: published, measured, then ours."""
  out = [
    (c["label"], [r["reference"][cid] for r in rows])
    for cid, c in report["reference_columns"].items()
  ]
  out += [(f"{m} (measured)", [r["measured"][m] for r in rows]) for m in report["measured_columns"]]
  return out + [("This model", [r["ours"] for r in rows])]


def report_markdown(report: dict) -> str:
  """The report as Markdown: one table per domain, then the notes on settings in which a compared
  column differs from ours."""
  cols = report["reference_columns"]
  measured = report["measured_columns"]
  st = report["settings"]
  lines = [
    f"# Evaluation of {report['model']}",
    "",
    f"{report['created']}; temperature {st['temperature']}, top-p {st['top_p']}, "
    f"up to {st['max_response_len']} response tokens; samples per prompt: "
    + ", ".join(f"{d} {n}" for d, n in st["samples"].items())
    + ". "
    "Math, code and STEM: pass@1 (mean over samples of a fully correct answer); "
    "instruction following and logic: the mean score. Percent.",
    "",
  ]
  for domain, t in report["domains"].items():
    series = _series(report, t["rows"])
    head = ["Benchmark"] + [label for label, _ in series]
    lines += [
      f"## {DOMAIN_TITLES.get(domain, domain)}",
      "",
      "| " + " | ".join(head) + " |",
      "|" + "---|" * len(head),
    ]
    for i, r in enumerate(t["rows"]):
      note = []
      if r["verifier_failures"]:
        note.append(f"{r['verifier_failures']} verifier failures")
      if r["dropped_too_long"]:
        note.append(f"{r['dropped_too_long']} prompts too long")
      cells = [_fmt(v[i]) for _, v in series[:-1]]
      ours = _fmt(r["ours"]) + (f" ({'; '.join(note)})" if note else "")
      lines.append("| " + " | ".join([r["benchmark"], *cells, ours]) + " |")
    avg = [
      _fmt(float(np.mean(v))) if all(x is not None for x in v) else "—" for _, v in series[:-1]
    ]
    lines += ["| **average** | " + " | ".join(avg + [_fmt(t["average"])]) + " |", ""]
  lines += ["Published numbers (— where the source gives none or it is not transcribed):", ""]
  lines += [f"- {c['label']}: {c['source']}" for c in cols.values()]
  if measured:
    lines += ["", "Measured by this harness (`--compare`; — where that report has no number):", ""]
    for m, c in measured.items():
      same = (
        "differs: " + "; ".join(c["differences"])
        if c["differences"]
        else "same settings and benchmark files"
      )
      lines.append(f"- {m}: {c['model']}, report {c['dir']}; {same}")
  return "\n".join(lines) + "\n"


def report_png(report: dict, path: str) -> None:
  """The report as a bar chart per domain at `path`."""
  import matplotlib  # lazy: only the PNG needs it (a second or two to import)

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # after the backend is chosen

  rows = [r for t in report["domains"].values() for r in t["rows"]]
  series = _series(report, rows)
  x = np.arange(len(rows))
  width = 0.8 / len(series)
  fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(rows)), 4.5))
  for k, (name, vals) in enumerate(series):
    ax.bar(
      x + (k - (len(series) - 1) / 2) * width,
      [np.nan if v is None else v for v in vals],
      width,
      label=name,
    )
  ax.set_xticks(x, [r["benchmark"] for r in rows], rotation=45, ha="right")
  ax.set_ylabel("pass@1 / mean score (%)")
  ax.set_ylim(0, 100)
  ax.legend(fontsize=8)
  ax.set_title(model_title(str(report["model"])))
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def write_report(report: dict, out_dir: str) -> None:
  write_json(os.path.join(out_dir, "report.json"), report)
  with open(os.path.join(out_dir, "report.md"), "w") as f:
    f.write(report_markdown(report))
  report_png(report, os.path.join(out_dir, "report.png"))
