"""The exchange: commit protocol, corruption handling, leases, exactly-once commits."""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from prorl_jax.records import InvalidEntry, Request, Result
from prorl_jax.rollout.exchange import Exchange
from prorl_jax.rollout.store import NO_VALUE, InvalidExchange, KvStore, LocalStore, open_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The conformance suite: every test that takes `ex` or `store` runs against every backend here
# (rollout/store.py: a directory is a LocalStore, anything else a KvStore).
BACKENDS = {"file": lambda tmp: f"file://{tmp}/exchange", "memory": lambda tmp: "memory://"}


@pytest.fixture(params=sorted(BACKENDS))
def ex(request, tmp_path):
  return Exchange(BACKENDS[request.param](tmp_path), lease_seconds=30)


@pytest.fixture(params=sorted(BACKENDS))
def store(request, tmp_path):
  return open_store(BACKENDS[request.param](tmp_path))


def test_each_url_opens_its_backend(tmp_path):
  assert type(open_store(str(tmp_path / "d"))) is LocalStore
  assert type(open_store(f"file://{tmp_path}/d")).__name__ == "LocalStore"
  assert type(open_store("memory://")) is KvStore
  with pytest.raises(InvalidExchange, match="use a directory"):
    open_store("nosuchscheme://x")


def test_the_store_contract(store, tmp_path):
  """What the weights, queue and results parts rely on, per backend."""
  assert store.read("a/k") == (None, NO_VALUE)
  g1 = store.write("a/k", b"one")
  assert store.read("a/k") == (b"one", g1)
  assert store.write("a/k", b"two", if_equal=NO_VALUE) == b""  # only-if-absent fails
  assert store.write("a/k", b"two", if_equal=b"stale") == b""  # a stale generation fails
  g2 = store.write("a/k", b"two", if_equal=g1)
  assert g2 and g2 != g1 and store.read("a/k")[0] == b"two"
  assert store.write("a/new", b"x", if_equal=NO_VALUE)  # absent: created
  store.write("a/sub/1", b"1")
  store.write("ab", b"not under a/")
  assert store.list("a/") == ["a/k", "a/new", "a/sub/1"]
  store.delete_prefix("a/sub/")
  assert store.list("a/") == ["a/k", "a/new"] and store.read("ab")[0] == b"not under a/"
  store.write("a/k", None)
  assert store.read("a/k")[0] is None
  # whole files: stored with their (size, sha256); fetched only when they match
  data = os.urandom(3 << 19)
  (tmp_path / "f.bin").write_bytes(data)
  assert store.put_file("w/f.bin", str(tmp_path / "f.bin")) == (len(data), _sha(data))
  want = (len(data), _sha(data))
  assert store.get_file("w/f.bin", str(tmp_path / "out" / "f.bin"), want)
  assert (tmp_path / "out" / "f.bin").read_bytes() == data
  assert not store.get_file("w/f.bin", str(tmp_path / "out" / "g.bin"), (len(data), "0" * 64))
  assert not store.get_file("w/none", str(tmp_path / "out" / "h.bin"), want)
  assert sorted(os.listdir(tmp_path / "out")) == ["f.bin"]  # nothing else left behind
  os.symlink(tmp_path / "f.bin", tmp_path / "link")
  with pytest.raises(OSError):
    store.put_file("w/link", str(tmp_path / "link"))  # a symlink is never followed
  store.put_marker("w/manifest.json", b"{}")
  assert store.read("w/manifest.json")[0] == b"{}"
  # refused entries are counted; a quarantined one is moved aside
  store.write("r/bad", b"junk")
  store.quarantine("result", "r/bad", b"junk", "test")
  store.skip("result", "r/torn", "test")
  assert store.read("r/bad")[0] is None and store.read("quarantine/r/bad")[0] == b"junk"
  assert store.stats == {"quarantined_result": 1, "skipped_result": 1}


def _arrays(rows=2, width=3, scores=None, fill=0):
  """A well-formed rollout result of `rows` responses."""
  return {
    "tokens": np.full((rows, width), fill, np.int32),
    "logprobs": np.full((rows, width), -0.5, np.float32),
    "lengths": np.full(rows, width, np.int32),
    "stopped": np.ones(rows, bool),
    "scores": np.asarray(scores if scores is not None else [1.0] * rows, np.float32),
    "verifier_failed": np.zeros(rows, bool),
  }


def _req(ex, i=0):
  return ex.queue.put(
    Request.from_json(
      {
        "prompts": [[1, 2]],
        "n": 2,
        "sampling": {"max_new_tokens": 4},
        "seed": i,
        "min_version": 0,
        "meta": [{"data_source": "chain_sum"}],
      }
    ),
    request_id=f"r{i:03d}",
  )


def test_weights_publish_fetch_and_corruption(ex, tmp_path):
  src = tmp_path / "w"
  src.mkdir()
  (src / "model.safetensors").write_bytes(os.urandom(1000))
  (src / "config.json").write_text("{}")
  ex.weights.publish(1, step=10, src_dir=str(src))
  ex.weights.publish(2, step=20, src_dir=str(src))
  v, path = _newest(ex, str(tmp_path / "cache"))
  assert (
    v == 2
    and open(os.path.join(path, "model.safetensors"), "rb").read()
    == (src / "model.safetensors").read_bytes()
  )
  # v3: data written but no manifest yet -> not visible
  ex.store.write("weights/v00000003/model.safetensors", b"half")
  assert ex.weights.versions() == [1, 2]
  # v4: a truncated file under a committed manifest -> skipped, counted, v2 used instead
  ex.weights.publish(4, step=40, src_dir=str(src))
  ex.store.write("weights/v00000004/model.safetensors", b"truncated")
  v, _ = _newest(ex, str(tmp_path / "cache2"))
  assert v == 2 and ex.stats["skipped_weights"] == 1
  ex.weights.prune(keep=1)
  assert ex.weights.versions() == [4]
  if hasattr(ex.store, "root"):  # pruned versions leave no empty directories behind
    assert os.listdir(os.path.join(ex.store.root, "weights")) == ["v00000004"]
  # a fetched version directory (it holds a manifest of its own) published again, e.g. to
  # evaluate it: its old manifest is not a weight file
  ex.weights.publish(5, step=50, src_dir=path)
  assert "manifest.json" not in ex.weights.manifest(5)["files"]
  v, _ = _newest(ex, str(tmp_path / "cache3"))
  assert v == 5


def test_manifest_checksums_are_of_the_whole_file_across_copy_chunks(ex, tmp_path):
  import hashlib

  src = tmp_path / "w"
  src.mkdir()
  data = os.urandom((5 << 20) // 2 + 7)  # 2.5 MiB + 7: spans several 1 MiB copy chunks
  (src / "model.safetensors").write_bytes(data)
  (src / "empty.txt").write_bytes(b"")
  files = ex.weights.publish(1, step=1, src_dir=str(src))["files"]
  assert files["model.safetensors"] == {
    "size": len(data),
    "sha256": hashlib.sha256(data).hexdigest(),
  }
  assert files["empty.txt"] == {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
  _, path = _newest(ex, str(tmp_path / "cache"))
  assert open(os.path.join(path, "model.safetensors"), "rb").read() == data
  if hasattr(ex.store, "root"):  # no temp files left behind
    assert sorted(os.listdir(os.path.join(ex.store.root, "weights", "v00000001"))) == [
      "empty.txt",
      "manifest.json",
      "model.safetensors",
    ]
  (tmp_path / "nothing").mkdir()  # an empty directory is a clear error, and commits nothing
  with pytest.raises(ValueError, match="holds no files"):
    ex.weights.publish(2, step=2, src_dir=str(tmp_path / "nothing"))
  assert ex.weights.versions() == [1]


def test_sharded_weights_round_trip_and_a_corrupt_shard_is_skipped(ex, tmp_path):
  import jax

  from prorl_jax.model import init_params, load_hf, presets, save_hf
  from prorl_jax.rollout.weights import shard_bytes

  assert shard_bytes(10) == 8 << 20 and shard_bytes(1 << 40) == -(-(1 << 40) // os.cpu_count())
  model_cfg = presets.ModelConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    tie_word_embeddings=False,
    eos_token_id=None,
  )
  params = init_params(model_cfg, jax.random.PRNGKey(0))
  src = str(tmp_path / "w")
  files = save_hf(model_cfg, params, src, max_shard_bytes=20_000)
  shards = [f for f in files if f.endswith(".safetensors")]
  assert len(shards) >= 3
  ex.weights.publish(1, step=1, src_dir=src)
  manifest = ex.weights.publish(2, step=2, src_dir=src)
  assert set(manifest["files"]) == set(os.listdir(src))
  v, path = _newest(ex, str(tmp_path / "cache"))
  _, got = load_hf(path)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(got)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  ex.store.write(f"weights/v00000002/{shards[1]}", b"corrupt")  # one shard of several
  v, _ = _newest(ex, str(tmp_path / "cache2"))
  assert v == 1 and ex.stats["skipped_weights"] == 1


def test_a_cached_version_from_another_run_is_replaced(tmp_path):
  cache = str(tmp_path / "cache")
  for run, payload in (("a", b"weights of run a"), ("b", b"weights of run b")):
    src = tmp_path / f"src-{run}"
    src.mkdir()
    (src / "model.safetensors").write_bytes(payload)
    ex = Exchange(f"file://{tmp_path}/exchange-{run}")
    ex.weights.publish(0, step=0, src_dir=str(src))
    v, path = _newest(ex, cache)  # same version number, same cache directory
    assert v == 0 and open(os.path.join(path, "model.safetensors"), "rb").read() == payload


def test_results_commit_and_each_corruption_is_skipped(ex):
  for i in range(4):
    _req(ex, i)
  claims = [ex.queue.claim("w") for _ in range(4)]
  assert sorted(c.request_id for c in claims) == ["r000", "r001", "r002", "r003"]
  arrays = dict(_arrays(scores=[1.0, 0.0]), tokens=np.arange(6, dtype=np.int32).reshape(2, 3))
  for c in claims[:3]:
    assert ex.queue.commit(c, Result(**arrays, policy_version=1))
  got = ex.results.read("r000")
  np.testing.assert_array_equal(got.tokens, arrays["tokens"])
  assert got.policy_version == 1
  # truncated data key
  m1 = json.loads(ex.store.read("results/r001/manifest.json")[0])
  ex.store.write(m1["data_key"], ex.store.read(m1["data_key"])[0][:20])
  assert ex.results.read("r001") is None
  # a manifest whose checksum is wrong
  m2 = json.loads(ex.store.read("results/r002/manifest.json")[0])
  ex.store.write("results/r002/manifest.json", json.dumps(dict(m2, sha256="0" * 64)).encode())
  assert ex.results.read("r002") is None
  # data without a manifest (a worker died between the two writes)
  ex.store.write("results/r003/data-0-w.npz", b"orphan")
  assert ex.results.read("r003") is None and not ex.results.committed("r003")
  assert ex.stats["skipped_result"] == 2
  # a corrupt result is requeued and a worker can claim it again
  ex.queue.requeue("r001")
  c = ex.queue.claim("w2")
  assert c.request_id == "r001"


def test_corrupt_request_is_skipped(ex):
  _req(ex, 0)
  raw = ex.store.read("requests/r000.json")[0]
  ex.store.write("requests/r000.json", raw[:-10])
  assert ex.queue.claim("w") is None and ex.stats["skipped_request"] == 1


def test_expired_lease_is_reclaimed_and_only_one_commit_wins(ex):
  ex.queue.lease_seconds = 0.3
  _req(ex, 0)
  a = ex.queue.claim("a")
  assert ex.queue.claim("b") is None  # held
  time.sleep(0.4)
  b = ex.queue.claim("b")
  assert b is not None and b.attempt == 1 and ex.stats["reclaimed"] == 1
  assert not ex.queue.heartbeat(a)  # a lost its lease
  assert ex.queue.heartbeat(b)
  assert ex.queue.commit(b, Result(**_arrays(fill=1), policy_version=0))
  assert not ex.queue.commit(a, Result(**_arrays(fill=2), policy_version=0))  # too late: never both
  np.testing.assert_array_equal(ex.results.read("r000").tokens, np.ones((2, 3)))


WORKER = textwrap.dedent("""
    import sys, time, numpy as np
    sys.path.insert(0, {root!r})
    from prorl_jax.records import Result
    from prorl_jax.rollout.exchange import Exchange
    ex = Exchange({url!r}, lease_seconds=30)
    done = []
    idle = time.time()
    while time.time() - idle < 2.0:
      c = ex.queue.claim(sys.argv[1])
      if c is None:
        time.sleep(0.01)
        continue
      arrays = {{"tokens": np.zeros((2, 1), np.int32), "logprobs": np.zeros((2, 1), np.float32),
                "lengths": np.ones(2, np.int32), "stopped": np.ones(2, bool),
                "scores": np.ones(2, np.float32), "verifier_failed": np.zeros(2, bool)}}
      if ex.queue.commit(c, Result(**arrays, policy_version=0)):
        done.append(c.request_id)
      idle = time.time()
    print(" ".join(done))
""")


def test_two_worker_processes_commit_each_request_exactly_once(tmp_path):
  url = f"file://{tmp_path}/ex"
  ex = Exchange(url)
  for i in range(30):
    _req(ex, i)
  script = tmp_path / "w.py"
  script.write_text(WORKER.format(root=ROOT, url=url))
  procs = [
    subprocess.Popen([sys.executable, str(script), f"w{k}"], stdout=subprocess.PIPE, text=True)
    for k in range(2)
  ]
  outs = [p.communicate(timeout=120)[0].split() for p in procs]
  done = outs[0] + outs[1]
  assert sorted(done) == [f"r{i:03d}" for i in range(30)]  # every request, once
  assert all(ex.results.read(f"r{i:03d}") is not None for i in range(30))


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from prorl_jax.rollout.store import NO_VALUE, open_store
    store, errors = open_store({url!r}), []
    for i in range({n}):
      rid = f"r{{i % 8}}"
      for key, value, cond in ((f"results/{{rid}}/data.npz", b"d", None),
                               (f"results/{{rid}}/manifest.json", b"m", NO_VALUE),
                               (f"results/{{rid}}/manifest.json", None, None)):
        try:
          store.write(key, value, if_equal=cond)
        except Exception as e:
          errors.append(str(e).splitlines()[0][:100])
    print(len(errors), sorted(set(errors))[:3])
""")


def test_deleting_a_prefix_never_breaks_a_write_under_it_in_another_process(tmp_path):
  # The trainer retires a result (deleting results/<id>/) while a worker commits or deletes keys
  # under it: a range delete that takes the writer's lock file with it fails the writer.
  url, n = f"file://{tmp_path}/ex", 1500
  store = open_store(url)
  script = tmp_path / "writer.py"
  script.write_text(WRITER.format(root=ROOT, url=url, n=n))
  proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
  deletes = 0
  while proc.poll() is None:
    store.delete_prefix(f"results/r{deletes % 8}/")
    deletes += 1
  assert proc.communicate(timeout=60)[0].strip() == "0 []"
  assert deletes > n // 4  # the two ran side by side
  for i in range(8):
    store.delete_prefix(f"results/r{i}/")
  assert store.list("results/") == [] and os.listdir(tmp_path / "ex") in ([], ["results"])


# ------------------------------------------------------------------ forged and malformed entries
def _newest(ex, dest_root: str, min_version: int = 0):
  """(version, local dir) of the newest committed version that fetches and verifies."""
  for v in reversed(ex.weights.versions()):
    if v < min_version:
      return None
    path = ex.weights.fetch(v, os.path.join(dest_root, f"v{v:08d}"))
    if path is not None:
      return v, path
  return None


def _publish_one(ex, tmp_path, version=1, payload=b"real weights"):
  src = tmp_path / f"src{version}"
  src.mkdir(exist_ok=True)
  (src / "model.safetensors").write_bytes(payload)
  (src / "config.json").write_text("{}")
  return ex.weights.publish(version, step=version, src_dir=str(src))


def _sha(data: bytes) -> str:
  import hashlib

  return hashlib.sha256(data).hexdigest()


def test_forged_manifest_names_write_nothing_outside_the_cache(ex, tmp_path):
  _publish_one(ex, tmp_path, 1)
  target = tmp_path / "escape.txt"
  absolute = tmp_path / "absolute.txt"
  payload = b"pwned"
  for name in (f"../../../{target.name}", str(absolute), "sub/../../x", ".hidden", "a\x00b"):
    forged = {
      "version": 2,
      "step": 2,
      "time": 0,
      "files": {
        name: {"size": len(payload), "sha256": _sha(payload)},
        "config.json": {"size": 2, "sha256": _sha(b"{}")},
      },
    }
    ex.store.write("weights/v00000002/config.json", b"{}")
    ex.store.write("weights/v00000002/manifest.json", json.dumps(forged).encode())
    cache = tmp_path / "cache" / "sub" / "deeper"
    assert ex.weights.fetch(2, str(cache / "v00000002")) is None
    v, _ = _newest(ex, str(cache))
    assert v == 1  # the forged version is passed over, the real one served
  assert not target.exists() and not absolute.exists()
  assert not list(tmp_path.rglob("escape.txt")) and not list(tmp_path.rglob("x"))
  assert ex.stats["quarantined_weights"] == 5
  assert ex.weights.versions() == [1]  # the forged manifest is out of the way, kept aside
  assert ex.store.read("quarantine/weights/v00000002/manifest.json")[0] is not None


def test_bytes_with_a_wrong_hash_never_become_visible(ex, tmp_path):
  _publish_one(ex, tmp_path, 1)
  good = ex.weights.manifest(1)
  bad = dict(good, version=2, files=dict(good["files"]))
  bad["files"]["model.safetensors"] = {"size": 12, "sha256": "0" * 64}
  for name in good["files"]:
    ex.store.write(f"weights/v00000002/{name}", b"real weights" if "model" in name else b"{}")
  ex.store.write("weights/v00000002/manifest.json", json.dumps(bad).encode())
  cache = tmp_path / "cache"
  assert ex.weights.fetch(2, str(cache / "v00000002")) is None
  assert not cache.exists() or list(cache.iterdir()) == []  # no temp dir or file left behind
  assert ex.stats["skipped_weights"] == 1


def test_symlinks_in_a_local_store_are_never_followed(tmp_path):
  ex = Exchange(f"file://{tmp_path}/exchange")
  _publish_one(ex, tmp_path, 1)
  secret = tmp_path / "host-secret.txt"
  secret.write_bytes(b"host secret")
  root = tmp_path / "exchange" / "weights"
  # v2: a weight file that is a symlink to a host file, listed with that file's hash
  (root / "v00000002").mkdir()
  os.symlink(secret, root / "v00000002" / "model.safetensors")
  (root / "v00000002" / "manifest.json").write_text(
    json.dumps(
      {
        "version": 2,
        "step": 2,
        "files": {
          "model.safetensors": {"size": len(b"host secret"), "sha256": _sha(b"host secret")}
        },
      }
    )
  )
  # v3: the whole version directory is a symlink to a directory elsewhere
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  (elsewhere / "model.safetensors").write_bytes(b"host secret")
  (elsewhere / "manifest.json").write_text(
    json.dumps(
      {
        "version": 3,
        "step": 3,
        "files": {
          "model.safetensors": {"size": len(b"host secret"), "sha256": _sha(b"host secret")}
        },
      }
    )
  )
  os.symlink(elsewhere, root / "v00000003")
  cache = tmp_path / "cache"
  for v in (2, 3):
    assert ex.weights.fetch(v, str(cache / f"v{v:08d}")) is None
  assert _newest(ex, str(cache))[0] == 1
  assert not any(p.read_bytes() == b"host secret" for p in cache.rglob("*") if p.is_file())


@pytest.mark.parametrize(
  "doc",
  [
    [],
    "manifest",
    {"version": 1},
    {"version": 1, "step": 0, "files": "model"},
    {"version": 1, "step": 0, "files": {"model.safetensors": {"size": "big", "sha256": "x"}}},
    {"version": 7, "step": 0, "files": {"m": {"size": 1, "sha256": "0" * 64}}},
    {"version": 1, "step": -1, "files": {"m": {"size": 1, "sha256": "0" * 64}}},
    {"version": 1, "step": 0, "files": {"m": {"size": True, "sha256": "0" * 64}}},
  ],
)
def test_a_weights_manifest_of_the_wrong_structure_is_quarantined(ex, tmp_path, doc):
  ex.store.write("weights/v00000001/manifest.json", json.dumps(doc).encode())
  assert ex.weights.manifest(1) is None
  assert _newest(ex, str(tmp_path / "cache")) is None  # no crash
  assert ex.stats["quarantined_weights"] == 1 and ex.weights.versions() == []


@pytest.mark.parametrize(
  "lease",
  [
    b"[1, 2]",
    b'{"expires": "soon"}',
    b'"x"',
    b'{"worker": "w", "attempt": -3, "expires": 1e300}',
    b'{"worker": "w", "attempt": 0, "expires": NaN}',
  ],
)
def test_a_malformed_lease_counts_as_expired(ex, lease):
  _req(ex, 0)
  ex.store.write("leases/r000.json", lease)
  c = ex.queue.claim("w")
  assert c is not None and c.request_id == "r000"
  assert ex.stats["corrupt_lease"] == 1


def test_a_request_of_the_wrong_structure_is_quarantined_and_claims_go_on(ex):
  import hashlib

  for bad_body in (
    {"id": "r000", "prompts": "hello", "n": 2},
    {"id": "r000", "prompts": [[1]], "n": 0, "sampling": {}, "meta": [{}]},
    {"id": "other", "prompts": [[1]], "n": 1, "sampling": {"max_new_tokens": 1}, "meta": [{}]},
    # well formed but for the verifier: never scored by a stand-in
    {"id": "r000", "prompts": [[1]], "n": 1, "sampling": {"max_new_tokens": 1}, "meta": [{}]},
  ):
    raw = json.dumps(bad_body, sort_keys=True).encode()
    ex.store.write(
      "requests/r000.json",
      json.dumps({"body": bad_body, "sha256": hashlib.sha256(raw).hexdigest()}).encode(),
    )
    _req(ex, 1)
    c = ex.queue.claim("w")
    assert c is not None and c.request_id == "r001"
    ex.queue.retire("r001")
  assert ex.stats["quarantined_request"] == 4
  with pytest.raises(ValueError, match="plain file name"):
    _req_id = "../escape"
    req = {
      "prompts": [[1]],
      "n": 1,
      "sampling": {"max_new_tokens": 1},
      "meta": [{"data_source": "x"}],
    }
    ex.queue.put(Request.from_json(req), request_id=_req_id)


@pytest.mark.parametrize(
  "change",
  [
    {"scores": np.array([np.nan, 1.0], np.float32)},
    {"scores": np.array([-0.5, 1.0], np.float32)},
    {"scores": np.array([1.5, 1.0], np.float32)},
    {"scores": np.array([1.0], np.float32)},
    {"lengths": np.array([4, 3], np.int32)},
    {"logprobs": np.array([[0.0, np.inf, 0.0], [0.0] * 3], np.float32)},
    {"verifier_failed": np.array([0.0, 1.0])},
    {"tokens": None},
  ],
)
def test_a_result_with_bad_arrays_is_quarantined(ex, change, monkeypatch):
  _req(ex, 0)
  arrays = {k: v for k, v in dict(_arrays(), **change).items() if v is not None}
  missing = {k for k, v in change.items() if v is None}  # a writer that leaves them out
  stored = Result.stored
  monkeypatch.setattr(
    Result,
    "stored",
    lambda r: tuple(
      {k: v for k, v in part.items() if k not in missing} if i == 0 else part
      for i, part in enumerate(stored(r))
    ),
  )
  arrays.update({k: _arrays()[k] for k in missing})
  assert ex.queue.commit(ex.queue.claim("w"), Result(**arrays, policy_version=0))
  assert ex.results.read("r000", rows=2) is None
  assert ex.stats["quarantined_result"] == 1 and not ex.results.committed("r000")


def test_a_result_of_the_wrong_row_count_or_manifest_is_rejected(ex):
  _req(ex, 0)
  assert ex.queue.commit(ex.queue.claim("w"), Result(**_arrays(rows=2), policy_version=0))
  assert ex.results.read("r000", rows=2) is not None
  assert ex.results.read("r000", rows=4) is None  # the request asked for 4 rows
  ex.queue.retire("r000")
  _req(ex, 1)
  assert ex.queue.commit(ex.queue.claim("w"), Result(**_arrays(), policy_version=0))
  m = json.loads(ex.store.read("results/r001/manifest.json")[0])
  for forged in (
    dict(m, data_key="../../weights/v00000001/model.safetensors"),
    dict(m, policy_version="latest"),
    dict(m, probe_mismatch={"max": "nan"}),
    dict(m, request_id="r000"),
    [m],
  ):
    ex.store.write("results/r001/manifest.json", json.dumps(forged).encode())
    assert ex.results.read("r001") is None
  assert ex.stats["quarantined_result"] == 6


def test_a_commit_after_retire_is_ignored_and_counted(ex):
  _req(ex, 0)
  c = ex.queue.claim("w")
  ex.queue.retire("r000")  # the trainer gave up on it
  assert not ex.queue.commit(c, Result(**_arrays(), policy_version=0))
  assert ex.store.list("results/") == [] and ex.stats["commit_after_retire"] == 1


def test_a_cached_copy_is_hashed_again_before_reuse(tmp_path):
  ex = Exchange(f"file://{tmp_path}/exchange")
  _publish_one(ex, tmp_path, 1, payload=b"the real weights")
  cache = tmp_path / "cache"
  v, path = _newest(ex, str(cache))
  with open(os.path.join(path, "model.safetensors"), "r+b") as f:  # same size, other bytes
    f.write(b"THE")
  v, path = _newest(ex, str(cache))
  assert open(os.path.join(path, "model.safetensors"), "rb").read() == b"the real weights"
  assert ex.stats["cache_replaced"] == 1
  (cache / "v00000001" / "extra.bin").write_bytes(b"x")  # a file the manifest does not list
  assert ex.weights.fetch(1, str(cache / "v00000001")) is not None
  assert ex.stats["cache_replaced"] == 2 and not (cache / "v00000001" / "extra.bin").exists()


def test_the_worker_cache_keeps_the_newest_two_versions(tmp_path):
  from prorl_jax.rollout.worker import Worker

  ex = Exchange(f"file://{tmp_path}/exchange")
  cache = tmp_path / "cache"
  w = Worker(ex, engine=None, cache_dir=str(cache), worker_id="w", pool=object())
  for v in range(1, 5):
    _publish_one(ex, tmp_path, v, payload=f"weights {v}".encode())
    ex.weights.fetch(v, str(cache / f"v{v:08d}"))
  (cache / "v00000005.tmp-abcd1234").mkdir()  # an interrupted fetch
  w.weights.prune(keep={4, 3})
  assert sorted(os.listdir(cache)) == ["v00000003", "v00000004"]


def test_records_round_trip_through_the_exchange_json(ex):
  from prorl_jax.records import PromptMeta, Request, SamplingParams

  req = Request(
    prompts=[[1, 2, 3], [4]],
    n=3,
    sampling=SamplingParams(max_new_tokens=5, temperature=0.6, top_p=0.95, stop_token_ids=(7,)),
    meta=[PromptMeta("chain_sum", "12", {"k": 1}, "u0"), PromptMeta("math", "x", {}, "u1")],
    seed=9,
    min_version=1,
    max_version=2,
    routing={"math": "math"},
  )
  ex.queue.put(req, request_id="r777")
  claim = ex.queue.claim("w")
  assert claim is not None and claim.request == req
  assert req.rows == 6


_GOOD = {
  "prompts": [[1, 2]],
  "n": 2,
  "sampling": {"max_new_tokens": 4, "temperature": 0.6, "top_k": 5, "stop_token_ids": [7]},
  "meta": [{"data_source": "math", "reference": "3", "extra": {"k": 1}, "uid": "u"}],
  "seed": 9,
  "min_version": 1,
  "max_version": 2,
  "routing": {"math": "math"},
}


@pytest.mark.parametrize(
  "change, field",
  [
    ({"prompts": [[1, "2"]]}, "prompts"),
    ({"prompts": [[1, True]]}, "prompts"),
    ({"n": 2.0}, "n"),
    ({"sampling": {"max_new_tokens": 4, "top_k": "5"}}, "top_k"),
    ({"sampling": {"max_new_tokens": 4, "temperature": -1}}, "temperature"),
    ({"sampling": {"max_new_tokens": 4, "stop_token_ids": ["</s>"]}}, "stop_token_ids"),
    ({"sampling": None}, "sampling"),
    ({"seed": "9"}, "seed"),
    ({"seed": True}, "seed"),
    ({"max_version": -1}, "max_version"),
    ({"meta": [{"data_source": "math", "extra": []}]}, "extra"),
    ({"meta": [{"data_source": "math", "uid": 3}]}, "uid"),
    ({"routing": {"math": 1}}, "routing"),
  ],
)
def test_one_request_schema_for_the_record_and_the_exchange(ex, change, field):
  good = Request.from_json(_GOOD)
  assert good.sampling.top_k == 5 and good.meta[0].extra == {"k": 1} and good.max_version == 2
  bad = dict(_GOOD, **change)
  with pytest.raises(InvalidEntry, match=field):
    Request.from_json(bad)
  # the same body written by a hostile process: the exchange quarantines it, a worker never sees it
  import hashlib

  body = dict(bad, id="r000")
  raw = json.dumps(body, sort_keys=True).encode()
  ex.store.write(
    "requests/r000.json",
    json.dumps({"body": body, "sha256": hashlib.sha256(raw).hexdigest()}).encode(),
  )
  assert ex.queue.load("r000") is None and ex.stats["quarantined_request"] == 1
  ex.queue.put(good, request_id="r001")
  assert ex.queue.claim("w").request == good
  with pytest.raises(TypeError, match="takes a records.Request"):
    ex.queue.put(_GOOD, request_id="r002")


def test_a_result_manifest_carries_the_engines_numeric_stats_only():
  from prorl_jax.records import InvalidEntry
  from prorl_jax.rollout.entries import check_result_manifest

  doc = {
    "request_id": "r1",
    "worker": "w0",
    "attempt": 0,
    "data_key": "results/r1/data-0-w0.npz",
    "size": 10,
    "sha256": "a" * 64,
    "policy_version": 3,
  }
  assert check_result_manifest(dict(doc), "r1") == doc  # engine_stats is optional
  ok = dict(doc, engine_stats={"peak_pages": 12, "page_bytes": 4096.0})
  assert check_result_manifest(ok, "r1")["engine_stats"]["peak_pages"] == 12
  for bad in ({"peak_pages": -1}, {"peak_pages": "12"}, {"x": float("nan")}, [1]):
    with pytest.raises(InvalidEntry, match="engine_stats must map names to finite numbers"):
      check_result_manifest(dict(doc, engine_stats=bad), "r1")


def test_an_engines_counts_are_typed_and_read_back_as_written():
  from prorl_jax.records import EngineStats, Generation

  stats = EngineStats(peak_pages=12, page_bytes=4096, decode_steps=7, weight_swaps=0)
  assert EngineStats.from_json(stats.to_json()) == stats
  assert stats.peak_kv_bytes == 12 * 4096.0
  assert EngineStats().to_json() == {} and EngineStats().peak_kv_bytes is None
  # a name from a newer writer is left out, never mistaken for another count
  assert EngineStats.from_json({"peak_pages": 3.0, "prefill_steps": 9}) == EngineStats(3)
  with pytest.raises(TypeError):
    EngineStats(decode_step=1)  # a misspelt count fails where it is written
  gen = Generation.of([[5, 6]], [[-0.5, -1.0]], [2], [True])
  assert (gen.tokens.dtype, gen.logprobs.dtype, gen.lengths.dtype, gen.stopped.dtype) == (
    np.int32,
    np.float32,
    np.int32,
    np.bool_,
  )
  assert gen.versions is None and gen.stats == EngineStats()


def test_a_result_is_stored_by_itself_and_read_back_field_for_field(tmp_path):
  """`Result.stored` is the one writer of a result's stored form and `Result.of` its one reader:
  every field, none at its default, comes back from the exchange as it was committed (the
  claim's worker and attempt in place of the result's own)."""
  import dataclasses

  from prorl_jax.records import EngineStats

  ex = Exchange(f"file://{tmp_path}/ex")
  _req(ex)
  claim = ex.queue.claim("w7")
  arrays = dict(_arrays(scores=[1.0, 0.25]), versions=np.asarray([[3, 3, 4]] * 2, np.int32))
  sent = Result(
    **arrays,
    policy_version=3,
    worker="ignored",
    attempt=9,
    probe_mismatch={"max": 0.5, "mean": 0.125},
    verifier_stats={"math/scored": 2},
    weights_wait_s=1.5,
    engine_stats=EngineStats(peak_pages=4, page_bytes=64, decode_steps=3, weight_swaps=1),
    generate_s=2.5,
    score_s=0.75,
    reasons=("ok", "wrong answer"),
  )
  defaults = Result(**_arrays(), policy_version=0)
  for f in dataclasses.fields(Result):
    if f.name == "versions":
      assert defaults.versions is None and sent.versions is not None
    elif f.name not in Result.ARRAYS:
      assert getattr(sent, f.name) != getattr(defaults, f.name), f"{f.name} left at its default"
  assert ex.queue.commit(claim, sent)
  got = ex.results.read(claim.request_id)
  assert (got.worker, got.attempt) == ("w7", claim.attempt)
  for f in dataclasses.fields(Result):
    want = getattr(sent, f.name) if f.name not in ("worker", "attempt") else getattr(got, f.name)
    if isinstance(want, np.ndarray):
      np.testing.assert_array_equal(getattr(got, f.name), want, err_msg=f.name)
      assert getattr(got, f.name).dtype == want.dtype, f.name
    else:
      assert getattr(got, f.name) == want, f.name
  # a manifest of an older writer (no seconds, no reasons) still reads, each at its default
  m = json.loads(ex.store.read(f"results/{claim.request_id}/manifest.json")[0])
  old = {k: v for k, v in m.items() if k not in ("generate_s", "score_s", "reasons")}
  again = Result.of(old, {k: getattr(sent, k) for k in Result.ARRAYS})
  assert (again.generate_s, again.score_s, again.reasons) == (None, None, ())
