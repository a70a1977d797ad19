"""What the exchange accepts from its store: plain names, and the schema of every entry.

Any process that can write the store is treated as hostile, so every entry is checked before it
is used: a name is one plain path component (letters, digits, `._-`, no leading dot, at most 200
characters), and each JSON entry (weights manifest, request, lease, result manifest) and each
result's arrays match their schema. A check raises `InvalidEntry` naming the field and why.
"""

from __future__ import annotations

import json
import re

import numpy as np

from prorl_jax.records import InvalidEntry, Request, require
from prorl_jax.records import is_int as _is_int
from prorl_jax.records import is_num as _is_num

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
_SHA = re.compile(r"[0-9a-f]{64}")


def is_plain_name(name) -> bool:
  return isinstance(name, str) and bool(_NAME.fullmatch(name))


def safe_name(name, what: str = "name") -> str:
  """`name` if it is one plain path component (no '/', no '..', not absolute, no leading dot);
  raises InvalidEntry otherwise."""
  if not is_plain_name(name):
    raise InvalidEntry(
      f"{what} {name!r} is not a plain file name ([A-Za-z0-9._-], no leading "
      "dot, at most 200 characters)"
    )
  return name


def parse_object(data: bytes) -> dict:
  try:
    doc = json.loads(data)
  except ValueError as e:
    raise InvalidEntry(f"not valid JSON ({e})") from None
  require(isinstance(doc, dict), f"not a JSON object but {type(doc).__name__}")
  return doc


def check_weights_manifest(doc: dict, version: int) -> dict:
  """The weights manifest of `version`, checked: its version and step, and every file name safe
  with an integer size and a hex sha256; raises InvalidEntry otherwise."""
  require(
    doc.get("version") == version and _is_int(doc.get("version")),
    f"version {doc.get('version')!r} is not {version}",
  )
  require(_is_int(doc.get("step")), f"step {doc.get('step')!r} is not an integer >= 0")
  files = doc.get("files")
  require(isinstance(files, dict) and files, "files must be a non-empty object")
  for name, meta in files.items():
    safe_name(name, "weights file")
    require(name != "manifest.json", "files must not list manifest.json")
    require(
      isinstance(meta, dict)
      and _is_int(meta.get("size"))
      and isinstance(meta.get("sha256"), str)
      and bool(_SHA.fullmatch(meta["sha256"])),
      f"file {name!r} needs an integer size >= 0 and a hex sha256",
    )
  return doc


def check_request(body: dict, rid: str) -> Request:
  """The request body `rid` as a `Request`, checked (`Request.from_json`, and its id); raises
  InvalidEntry otherwise."""
  require(isinstance(body, dict) and body.get("id") == rid, f"id is not {rid!r}")
  return Request.from_json(body)


def check_lease(doc: dict) -> dict:
  require(isinstance(doc.get("worker"), str), "worker must be a string")
  require(_is_int(doc.get("attempt")), "attempt must be an integer >= 0")
  require(_is_num(doc.get("expires")), "expires must be a finite number")
  return doc


def check_result_manifest(doc: dict, rid: str) -> dict:
  """The result manifest of `rid`, checked: its request id, worker, attempt, data key (the one
  that attempt writes), size, sha256 and policy version; raises InvalidEntry otherwise."""
  require(doc.get("request_id") == rid, f"request_id {doc.get('request_id')!r} is not {rid!r}")
  worker = safe_name(doc.get("worker"), "worker")
  require(_is_int(doc.get("attempt")), "attempt must be an integer >= 0")
  want_key = f"results/{rid}/data-{doc['attempt']}-{worker}.npz"
  require(doc.get("data_key") == want_key, f"data_key {doc.get('data_key')!r} is not {want_key!r}")
  require(_is_int(doc.get("size")), "size must be an integer >= 0")
  require(
    isinstance(doc.get("sha256"), str) and bool(_SHA.fullmatch(doc["sha256"])),
    "sha256 must be 64 hex digits",
  )
  require(_is_int(doc.get("policy_version")), "policy_version must be an integer >= 0")
  mm = doc.get("probe_mismatch")
  require(
    mm is None
    or (isinstance(mm, dict) and all(_is_num(mm.get(k)) and mm[k] >= 0 for k in ("max", "mean"))),
    "probe_mismatch must be null or {max, mean} finite numbers >= 0",
  )
  vs = doc.get("verifier_stats", {})
  require(
    isinstance(vs, dict) and all(isinstance(k, str) and _is_int(v) for k, v in vs.items()),
    "verifier_stats must map names to integers >= 0",
  )
  es = doc.get("engine_stats", {})
  require(
    isinstance(es, dict)
    and all(isinstance(k, str) and _is_num(v) and v >= 0 for k, v in es.items()),
    "engine_stats must map names to finite numbers >= 0",
  )
  return doc


RESULT_ARRAYS = {
  "tokens": "i",
  "logprobs": "f",
  "lengths": "i",
  "stopped": "b",
  "scores": "f",
  "verifier_failed": "b",
}


def check_result_arrays(arrays: dict, rows: int | None = None) -> dict:
  """A rollout result: tokens/logprobs [R, N] (and optionally versions [R, N]),
  lengths/stopped/scores/verifier_failed [R];
  lengths in [0, N], log-probs finite over each response, scores finite and in [0, 1]."""
  for key, kind in RESULT_ARRAYS.items():
    a = arrays.get(key)
    require(a is not None, f"array {key!r} is missing")
    require(
      a.dtype.kind == kind or (kind == "i" and a.dtype.kind == "u"),
      f"array {key!r} has dtype {a.dtype}, want kind {kind!r}",
    )
  tok, lp = arrays["tokens"], arrays["logprobs"]
  require(
    tok.ndim == 2 and lp.shape == tok.shape,
    f"tokens {tok.shape} and logprobs {lp.shape} must be the same [rows, slots]",
  )
  r, width = tok.shape
  require(rows is None or r == rows, f"{r} rows, the request asks for {rows}")
  for key in ("lengths", "stopped", "scores", "verifier_failed"):
    require(arrays[key].shape == (r,), f"array {key!r} has shape {arrays[key].shape}, want ({r},)")
  lengths = arrays["lengths"]
  require(bool(((lengths >= 0) & (lengths <= width)).all()), f"lengths outside [0, {width}]")
  live = np.arange(width)[None, :] < lengths[:, None]
  require(bool(np.isfinite(lp[live]).all()), "log-probs are not finite")
  s = arrays["scores"]
  good = np.isfinite(s) & (s >= 0) & (s <= 1)
  require(bool(good.all()), f"scores must be finite and in [0, 1], got {s[~good][:3].tolist()}")
  ver = arrays.get("versions")  # optional: the weights version of each token (in-flight updates)
  if ver is not None:
    require(
      ver.shape == tok.shape and ver.dtype.kind in "iu",
      f"array 'versions' must be integers of shape {tok.shape}",
    )
    require(bool((ver[live] >= 0).all()), "versions of generated tokens must be >= 0")
  return arrays
