"""The bytes `dist.broadcast` sends between trainer processes: plain data, no pickle."""

import math

import numpy as np
import pytest

from prorl_jax.parallel import dist


def test_pack_round_trips_types_and_values_exactly():
  obj = (
    [
      {
        "uid": "s1:0",
        "tokens": np.arange(6, dtype=np.int32).reshape(2, 3),
        "raw_scores": np.array([1.0, 0.0], np.float32),
        "policy_version": 3,
        "stopped": np.array([True, False]),
      }
    ],
    {
      "verifier/code/scored": 16,
      "mismatch/probe_max": np.float32(0.25),
      "note": None,
      "nan": float("nan"),
      "ok": True,
      "pair": (1, [2.5, "x"]),
    },
  )
  got = dist.unpack(dist.pack(obj))
  assert isinstance(got, tuple) and isinstance(got[0], list) and isinstance(got[1]["pair"], tuple)
  g, info = got[0][0], got[1]
  assert g["uid"] == "s1:0" and g["policy_version"] == 3 and type(g["policy_version"]) is int
  for k in ("tokens", "raw_scores", "stopped"):
    assert g[k].dtype == obj[0][0][k].dtype and np.array_equal(g[k], obj[0][0][k])
  assert type(info["mismatch/probe_max"]) is np.float32 and info["mismatch/probe_max"] == 0.25
  assert info["note"] is None and info["ok"] is True and math.isnan(info["nan"])
  assert info["pair"] == (1, [2.5, "x"]) and info["verifier/code/scored"] == 16
  assert dist.unpack(dist.pack(None)) is None and dist.unpack(dist.pack({})) == {}


def test_pack_refuses_what_is_not_plain_data():
  with pytest.raises(TypeError, match="not set"):
    dist.pack({"a": {1, 2}})
  with pytest.raises(TypeError, match="not dict"):
    dist.pack({1: "int key"})
  with pytest.raises(TypeError, match="not object"):
    dist.pack([object()])


def test_pack_round_trips_a_record_and_refuses_other_classes():
  from prorl_jax.records import Group
  from tests import loop_helpers

  g = loop_helpers.group([1.0, 0.0], uid="s1:0", policy_version=3, verifier_failed=[False, True])
  (got,) = dist.unpack(dist.pack([g]))
  assert isinstance(got, Group) and got.uid == "s1:0" and got.policy_version == 3
  for f in ("tokens", "raw_scores", "verifier_failed", "prompt_ids"):
    a, b = getattr(got, f), getattr(g, f)
    assert a.dtype == b.dtype and np.array_equal(a, b)

  class NotARecord:
    pass

  with pytest.raises(TypeError, match="not NotARecord"):
    dist.pack(NotARecord())
  forged = dist.pack({"x": 1}).replace(b'{"d": {"x": 1}}', b'{"r": "np", "f": {}}')
  forged = len(b'{"r": "np", "f": {}}').to_bytes(8, "little") + forged[8:]
  with pytest.raises(TypeError, match="not a record"):
    dist.unpack(forged)
