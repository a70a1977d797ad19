"""What the README and docs tell users to type still works: every config override they show
names a field and passes validation, and every command-line flag they show exists."""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from prorl_jax import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(
  p for p in glob.glob(os.path.join(ROOT, "docs", "*.md")) if not p.endswith("config.md")
)
FIELDS = config_lib.flat(config_lib.base_config())


def _text(path):
  with open(path) as f:
    return f.read()


def _commands(text):
  """The shell commands of the ```bash blocks, continuation lines joined, comments dropped."""
  out = []
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    for line in block.replace("\\\n", " ").splitlines():
      line = line.split(" #")[0].strip()
      if line and not line.startswith("#"):
        out.append(line)
  return out


def _override_groups():
  """(where, [(key, value)]) for each command line and each inline `k=v k=v` span that sets
  config keys; `a|b` alternatives are each a group of their own."""
  groups = []
  for path in DOCS:
    text = _text(path)
    name = os.path.relpath(path, ROOT)
    for cmd in _commands(text):
      pairs = re.findall(r"--config\.([\w.]+)=(\S+)", cmd)
      if pairs:
        groups.append((f"{name}: {cmd}", pairs))
    for span in re.findall(r"`([^`\n]+)`", text):
      toks = span.split()
      pairs = [t.split("=", 1) for t in toks]
      if pairs and all(len(p) == 2 and p[0].split(".")[0] in config_lib.sections() for p in pairs):
        alts = [[(k, a) for a in v.replace("\\|", "|").split("|")] for k, v in pairs]
        for i in range(max(len(a) for a in alts)):
          groups.append((f"{name}: `{span}`", [a[min(i, len(a) - 1)] for a in alts]))
  return groups


def _set(cfg, key, value):
  """The override as the command line applies it: the value parsed as the field's type."""
  *sections, leaf = key.split(".")
  node = cfg
  for part in sections:
    node = node[part]
  old = node[leaf]
  if isinstance(old, bool):
    assert value in ("True", "False", "true", "false"), f"{key}={value}: not a bool"
    node[leaf] = value.lower() == "true"
  elif isinstance(old, int):
    node[leaf] = int(value)
  elif isinstance(old, float):
    node[leaf] = float(value)
  else:
    node[leaf] = value


def test_the_docs_show_overrides_at_all():
  keys = {k for _, pairs in _override_groups() for k, _ in pairs}
  assert {"algo.clip_high", "algo.is_correction", "rollout.pipeline", "model.path"} <= keys


@pytest.mark.parametrize("where, pairs", _override_groups(), ids=lambda x: str(x)[:60])
def test_every_override_in_the_docs_is_a_valid_config(where, pairs):
  cfg = config_lib.base_config()
  for key, value in pairs:
    assert key in FIELDS, f"{where}: {key} is not a config field"
    if value.isupper():  # a placeholder: DIR, PATH, NAME
      continue
    _set(cfg, key, value)
  config_lib.validate(cfg)


def _flags_of(module):
  """The long options `python -m MODULE --helpfull` (absl) or `--help` (argparse) lists."""
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")

  def help_text(flag):
    cmd = [sys.executable, "-m", module, flag]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    return out.stdout + out.stderr

  text = help_text("--helpfull")
  if text.startswith("usage: "):  # argparse: --help lists its options
    text = help_text("--help")
  return set(re.findall(r"--(?:\[no\])?([a-z][\w-]*)", text))


def _module_commands():
  by_module: dict[str, list[str]] = {}
  for path in DOCS:
    for cmd in _commands(_text(path)):
      m = re.match(r"python -m (prorl_jax[\w.]*)", cmd)
      if m:
        by_module.setdefault(m.group(1), []).append(cmd)
  return sorted(by_module.items())


def test_the_docs_show_every_entry_point():
  assert {m for m, _ in _module_commands()} >= {
    "prorl_jax.cli.prepare",
    "prorl_jax.main",
    "prorl_jax.cli.export",
    "prorl_jax.cli.eval",
  }


@pytest.mark.parametrize("module, commands", _module_commands(), ids=lambda x: str(x)[:40])
def test_every_flag_in_the_docs_exists(module, commands):
  known = _flags_of(module)
  assert known, f"no flags listed by python -m {module} --help"
  for cmd in commands:
    for flag in re.findall(r"(?:^|\s)--([a-z][\w-]*)", cmd):
      assert flag in known, f"{cmd}: python -m {module} has no --{flag}"


BIN = os.path.dirname(sys.executable)  # the environment's console scripts (hf, prorl-*)


def _shell_commands():
  """Every simple command the docs show (```bash blocks and inline spans that begin with a
  command: `make ...`, `hf ...`, `bash ...`) and the messages and docstrings of the code tell
  users to type, split at && and ;."""
  found = []
  code = sorted(glob.glob(os.path.join(ROOT, "prorl_jax", "**", "*.py"), recursive=True))
  for path in DOCS + code + sorted(glob.glob(os.path.join(ROOT, "configs", "*.py"))):
    text = _text(path)
    name = os.path.relpath(path, ROOT)
    spans = [s for s in re.findall(r"`([^`\n]+)`", text) if re.match(r"(make|hf|bash) \S", s)]
    for line in (_commands(text) if path.endswith(".md") else []) + spans:
      for cmd in re.split(r"\s*(?:&&|;)\s*", line):
        if cmd:
          found.append((name, cmd))
  return sorted(set(found))


MAKE_TARGETS = set(re.findall(r"^([\w-]+):", _text(os.path.join(ROOT, "Makefile")), re.M))


@pytest.mark.parametrize("where, cmd", _shell_commands(), ids=lambda x: str(x)[:60])
def test_every_command_in_the_docs_exists_as_shown(where, cmd):
  words = cmd.split()
  while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
    words = words[1:]
  exe, args = words[0], words[1:]
  if exe.startswith(("launch/", "./")):  # a script of the project
    assert os.access(os.path.join(ROOT, exe), os.X_OK), f"{where}: `{cmd}`: no script {exe}"
    return
  if exe == "python":  # python -m prorl_jax.*: the flag test above
    return
  if exe.startswith(".venv/bin/"):  # the installed command, typed in a fresh shell
    clean = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    out = subprocess.run(
      [exe, "--help"], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, f"{where}: `{cmd}` from a fresh shell: {out.stderr[-500:]}"
    for flag in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", cmd):
      assert flag in out.stdout + out.stderr, f"{where}: `{cmd}`: {exe} has no {flag}"
    return
  if exe == "make":
    targets = [a for a in args if "=" not in a and not a.startswith("-")]
    missing = [t for t in targets if t not in MAKE_TARGETS]
    assert targets and not missing, f"{where}: `{cmd}`: no make target {missing}"
  elif exe in ("bash", "source", "."):
    assert os.path.isfile(os.path.join(ROOT, args[0])), f"{where}: `{cmd}`: no {args[0]}"
  elif os.path.isfile(os.path.join(BIN, exe)):  # a console script: its --help must work
    subs = []
    for a in args:
      if not re.fullmatch(r"[a-z]+", a):
        break
      subs.append(a)
    out = subprocess.run(
      [os.path.join(BIN, exe), *subs, "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"{where}: `{cmd}`: `{exe} {' '.join(subs)} --help` fails"
    for flag in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", cmd):
      assert flag in out.stdout, f"{where}: `{cmd}`: {exe} {' '.join(subs)} has no {flag}"
  else:
    assert shutil.which(exe), f"{where}: `{cmd}`: no command {exe}"


def test_the_docs_show_the_downloads():
  cmds = [c for _, c in _shell_commands()]
  assert any(c.startswith("hf download ") for c in cmds)
  assert any(c.startswith("make venv-gpu") for c in cmds)


def test_the_readme_is_a_front_door():
  """The first screen says what it is, the two commands with their times, and the real run's
  hardware and time; the manual lives in docs/."""
  text = open(os.path.join(ROOT, "README.md")).read()
  assert len(text.encode()) <= 12 * 1024, len(text.encode())
  first = text[: text.index("## The real run: the commands")]
  assert "make demo" in first and "make test" in first and "min" in first
  assert "3,000 steps" in first and "8 H100/H200" in first and "days" in first
  for link in re.findall(r"\]\(((?:docs|bench)/[^)#]+)\)", text):
    assert os.path.isfile(os.path.join(ROOT, link)), link


_FIGURE = re.compile(r"\d[\d.,]*\s?(×|%|k? ?tokens/s| MFU| ?min on| points)")
_SOURCES = ("bench/RESULTS.md", "docs/demo.md")


def _figure_paragraphs(text: str) -> list[tuple[int, str]]:
  """(index, paragraph) of each README paragraph holding a measured figure (a ratio, a share, a
  rate, an MFU, minutes on a machine, points gained); config rules like `1 − that − 5 %` aside."""
  paras = re.split(r"\n\s*\n", text)
  return [(i, p) for i, p in enumerate(paras) if _FIGURE.search(re.sub(r"− \d+ %", "", p))]


def test_every_readme_figure_names_where_it_was_measured():
  """A figure in the README names its source (bench/RESULTS.md or docs/demo.md) in its own
  paragraph or one beside it (a table under the sentence that sources it, a code block over it),
  and every RESULTS section it names by title exists there."""
  text = _text(os.path.join(ROOT, "README.md"))
  paras = re.split(r"\n\s*\n", text)
  unsourced = [
    p[:120]
    for i, p in _figure_paragraphs(text)
    if not any(s in q for q in paras[max(0, i - 1) : i + 2] for s in _SOURCES)
  ]
  assert not unsourced, unsourced
  headings = [h[3:] for h in _text(os.path.join(ROOT, "bench/RESULTS.md")).splitlines()]
  headings = [h for h in headings if h]
  named = re.findall(r'bench/RESULTS\.md, "([^"]+)"', text.replace("\n", " "))
  assert named, "the README names no RESULTS section"
  for title in named:
    assert any(h.startswith(title) for h in headings), f"no RESULTS section {title!r}"


def test_the_figure_check_can_fail():
  assert _figure_paragraphs("make demo # ~7 min on 2 cores\n\nplain words") == [
    (0, "make demo # ~7 min on 2 cores")
  ]
  assert _figure_paragraphs("the trainer takes 1 − that − 5 %") == []


def _section(path: str, title: str) -> str:
  """The text of the `## title...` section of a Markdown file (to the next `## `)."""
  text = _text(os.path.join(ROOT, path))
  start = next(
    m.start() for m in re.finditer(r"^## (.*)$", text, re.M) if m.group(1).startswith(title)
  )
  end = text.find("\n## ", start + 3)
  return text[start : end if end >= 0 else len(text)]


def _int(m: re.Match) -> int:
  return int(m.group(1).replace(",", ""))


def _minutes(m: re.Match) -> float:
  return int(m.group(1)) + int(m.group(2)) / 60 if m.lastindex == 2 else int(m.group(1)) / 60


# Each measured figure of the README: (its pattern there, capturing the value as printed; the
# file and section it comes from; the pattern of the value there; how the README rounds it)
FIGURES = [
  (r"~(\d+) min on 2 cores, pass@1", ("docs/demo.md", None),
   r"\*\*(\d+) min (\d+) s end to end\*\*", lambda m: int(_minutes(m) + 0.5)),
  (r"pass@1 \+(\d+) points \(mean of 4 seeds\)", ("docs/demo.md", None),
   r"over seeds 0–3: serial \+([\d.]+)", lambda m: round(float(m.group(1)))),
  (r"test suite: ~(\d+) min on 2 cores", ("bench/RESULTS.md", "The default test suite"),
   r"\((\d+) s\) end to", lambda m: round(_minutes(m))),
  (r"([\d.]+)k trained tokens/s", ("bench/RESULTS.md", "GPU (H200)"),
   r"\| ([\d,]+) \| \d+ \| \*\*[\d.]+\*\* \|", lambda m: round(_int(m) / 1e3, 1)),
  (r"\(([\d.]+) MFU", ("bench/RESULTS.md", "GPU (H200)"),
   r"\| [\d,]+ \| \d+ \| \*\*([\d.]+)\*\* \|", lambda m: float(m.group(1))),
]  # fmt: skip


def _figure_values(readme: str) -> list[tuple[str, float, float]]:
  """(README pattern, the value the README prints, the value its source gives, rounded alike)."""
  out = []
  for pattern, (path, title), source_pattern, rounded in FIGURES:
    m = re.search(pattern, readme)
    assert m, f"README no longer has {pattern!r}: update FIGURES"
    source = _section(path, title) if title else _text(os.path.join(ROOT, path))
    s = re.search(source_pattern, source)
    assert s, f"{path} ({title}) no longer has {source_pattern!r}"
    out.append((pattern, float(m.group(1)), float(rounded(s))))
  return out


def test_every_readme_figure_is_the_value_its_source_gives():
  readme = _text(os.path.join(ROOT, "README.md"))
  wrong = [(p, shown, source) for p, shown, source in _figure_values(readme) if shown != source]
  assert wrong == [], wrong
  spans = [m.span() for p, *_ in FIGURES for m in [re.search(p, readme)]]
  for f in _FIGURE.finditer(re.sub(r"− \d+ %", lambda m: " " * len(m.group(0)), readme)):
    assert any(a <= f.start() < b for a, b in spans), (
      f"a figure FIGURES does not check: {f.group(0)}"
    )


def test_an_edited_readme_figure_fails_the_value_check():
  readme = _text(os.path.join(ROOT, "README.md"))
  for edit in (("~7 min on 2 cores", "~5 min on 2 cores"), ("(0.42 MFU", "(0.52 MFU"),
               ("~20 min on 2 cores", "~9 min on 2 cores")):  # fmt: skip
    assert edit[0] in readme
    got = _figure_values(readme.replace(*edit))
    assert any(shown != source for _, shown, source in got), edit


def test_every_results_section_says_when_and_at_which_commit():
  """A figure measured before a change that affects it is marked with its commit: every section
  of bench/RESULTS.md names a date and the commit it was measured or recorded at."""
  text = _text(os.path.join(ROOT, "bench/RESULTS.md"))
  headings = re.findall(r"^## (.*)$", text, re.M)
  assert len(headings) > 10
  undated = [h[:60] for h in headings if not re.search(r"\b20\d\d-\d\d-\d\d\b", h)]
  no_commit = [h[:60] for h in headings if not re.search(r"\bat [0-9a-f]{7,}\b", h)]
  assert undated == [] and no_commit == [], (undated, no_commit)
