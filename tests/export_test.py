"""`python -m prorl_jax.cli.export`: an Orbax checkpoint step as a HF directory transformers
loads."""

import json
import os

import jax
import numpy as np
import optax
import pytest

from prorl_jax.cli import export as export_cli
from prorl_jax.demo import tiny_base
from prorl_jax.evaluation import export
from prorl_jax.model import forward, load_hf
from prorl_jax.parallel.sharding import make_mesh
from prorl_jax.trainer import train_step as ts
from prorl_jax.trainer.checkpoint import Checkpointer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  """A run directory with two checkpoints of a tiny model whose params moved off the base."""
  root = tmp_path_factory.mktemp("run")
  base = tiny_base.build(str(root / "base"))
  model_cfg, params = load_hf(base)
  tx = optax.adamw(1e-3)
  ck = Checkpointer(str(root / "checkpoints"), keep=3, async_save=False)
  states = {}
  for step in (3, 5):
    moved = jax.tree.map(lambda p, s=step: p + 0.01 * s, params)
    states[step] = ts.create_train_state(
      model_cfg, tx, make_mesh(), jax.random.PRNGKey(0), params=moved
    )
    ck.save(step, states[step], {"step": step})
  ck.close()
  with open(root / "config.json", "w") as f:
    json.dump({"model_path": base, "config": {}}, f)
  return root, model_cfg, states


def test_export_writes_the_newest_policy_that_transformers_loads(run_dir, tmp_path):
  import torch
  import transformers

  root, model_cfg, states = run_dir
  out = str(tmp_path / "hf")
  assert export_cli.main([str(root), out, "--dtype=float32"]) == 0
  cfg2, got = load_hf(out)
  for a, b in zip(jax.tree.leaves(states[5].params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # step 5, not 3 or the base
  assert os.path.isfile(os.path.join(out, "tokenizer.json"))
  hf = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
  tokens = np.array([[1, 5, 7, 9, 2, 4]])
  want = np.asarray(forward(cfg2, got, tokens))
  with torch.no_grad():
    ref = hf(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(want, ref, atol=1e-4)


def test_export_of_a_named_step_in_bf16(run_dir, tmp_path):
  root, _, states = run_dir
  out = str(tmp_path / "hf")
  assert export_cli.main([str(root / "checkpoints" / "3"), out]) == 0
  model_cfg, got = load_hf(out, dtype="float32")
  want = jax.tree.map(
    lambda p: np.asarray(p.astype(jax.numpy.bfloat16), np.float32), states[3].params
  )
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_array_equal(a, np.asarray(b))
  import glob

  import torch
  from safetensors import safe_open

  for path in glob.glob(os.path.join(out, "*.safetensors")):
    with safe_open(path, framework="pt") as f:
      assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


@pytest.mark.parametrize(
  "args,msg",
  [
    (["{tmp}/nothing", "{tmp}/out"], "holds no Orbax checkpoint"),
    (["{root}", "{tmp}/out", "--base={tmp}"], "has no config.json"),
    (["{root}", "{tmp}/out", "--dtype=int8"], "--dtype=int8: value should be one of"),
    (["{root}", "{root}"], "exists and is not empty"),
  ],
)
def test_export_errors_are_one_line(run_dir, tmp_path, capsys, args, msg):
  root, _, _ = run_dir
  (tmp_path / "nothing").mkdir()
  argv = [a.format(tmp=tmp_path, root=root) for a in args]
  assert export_cli.main(argv) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith("error: ") and msg in err and "\n" not in err


def test_export_without_a_run_record_asks_for_the_base(run_dir, tmp_path, capsys):
  root, _, _ = run_dir
  ck = tmp_path / "elsewhere" / "checkpoints"
  ck.parent.mkdir()
  os.symlink(root / "checkpoints", ck)
  assert export_cli.main([str(ck), str(tmp_path / "out")]) == 2
  assert "pass --base=HF_DIR" in capsys.readouterr().err


def test_a_model_is_found_from_a_run_dir_a_step_a_hf_dir_or_a_published_version(run_dir, tmp_path):
  """The run directory's own config.json (the run record) is not taken for a HF config: a run
  directory means its newest checkpoint, exported once."""
  from prorl_jax.rollout.exchange import Exchange

  root, _, states = run_dir
  path, label = export.resolve_model(str(root), str(tmp_path / "a"))
  assert label == str(root / "checkpoints" / "5") and path == str(tmp_path / "a" / "model-step-5")
  _, got = load_hf(path, dtype="float32")
  want = jax.tree.map(
    lambda p: np.asarray(p.astype(jax.numpy.bfloat16), np.float32), states[5].params
  )
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_array_equal(a, np.asarray(b))
  mtime = os.path.getmtime(os.path.join(path, "config.json"))
  assert export.resolve_model(str(root), str(tmp_path / "a"))[0] == path  # exported once
  assert os.path.getmtime(os.path.join(path, "config.json")) == mtime
  step3, label3 = export.resolve_model(str(root / "checkpoints" / "3"), str(tmp_path / "a"))
  assert label3 == str(root / "checkpoints" / "3") and step3.endswith("model-step-3")
  assert export.resolve_model(path, str(tmp_path / "b")) == (path, path)  # a HF directory as is
  url = f"file://{tmp_path}/ex"
  Exchange(url).weights.publish(7, 0, path)
  got7, label7 = export.resolve_model(f"{url}@7", str(tmp_path / "c"))
  assert label7 == f"{url}@7" and export.is_hf_dir(got7)
  with pytest.raises(export.ExportError, match="version 8 is not published"):
    export.resolve_model(f"{url}@8", str(tmp_path / "c"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(export.ExportError, match="neither a run directory, a checkpoint"):
    export.resolve_model(str(tmp_path / "empty"), str(tmp_path / "d"))


def test_an_exported_model_is_readable_by_others(run_dir, tmp_path):
  import stat

  root, _, _ = run_dir
  out = tmp_path / "hf"
  old = os.umask(0o022)
  try:
    assert export_cli.main([str(root), str(out)]) == 0
  finally:
    os.umask(old)
  for name in os.listdir(out):
    mode = stat.S_IMODE(os.stat(out / name).st_mode)
    assert mode & 0o044 == 0o044, (name, oct(mode))  # group and others may read (umask 022)
