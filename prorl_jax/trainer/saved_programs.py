"""Compiled programs saved by `prorl-compile --save DIR` and loaded by a run given
`--config.compiled=DIR`: its first step starts without compiling them.

A saved program is the serialised executable (`jax.experimental.serialize_executable`) and, in
DIR/manifest.json, the fingerprint of the program it was compiled from (the SHA-256 of its
lowered StableHLO: the same function, shapes, shardings and devices lower to the same text) and
the devices it was compiled for. A run lowers its own programs (cheap next to compiling them),
and loads an executable only where both match; anything else is compiled as usual, and the log
says which programs were loaded and why the others were not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle

import jax

log = logging.getLogger("prorl_jax.trainer.saved_programs")

MANIFEST = "manifest.json"
# the programs a run swaps in (the inline engine's are the engine's own and compile as usual)
RUN_PROGRAMS = ("logprob", "update/accumulate", "update/apply", "update", "reset_ref")


def fingerprint(program) -> str:
  """SHA-256 of a program's lowered StableHLO."""
  with jax.set_mesh(program_mesh(program)):
    text = program.jitted.lower(*program.args, **program.kwargs).as_text()
  return hashlib.sha256(text.encode()).hexdigest()


def program_mesh(program):
  for x in jax.tree.leaves(program.args):
    mesh = getattr(getattr(x, "sharding", None), "mesh", None)
    if mesh is not None:
      return mesh
  raise ValueError(f"program {program.name} has no argument on a mesh")


def _devices(devices) -> dict:
  return {"kind": devices[0].device_kind, "count": len(devices), "platform": devices[0].platform}


def _file(name: str) -> str:
  return name.replace("/", "-") + ".jaxexe"


def save(results, directory: str, devices) -> list[str]:
  """Writes each compiled program of `results` (`aot.CompiledProgram`) and the manifest; returns
  the names saved."""
  from jax.experimental import serialize_executable  # lazy: only saving serialises

  os.makedirs(directory, exist_ok=True)
  manifest = {"devices": _devices(devices), "programs": {}}
  for res in results:
    if res.executable is None:
      continue
    name = res.program.name
    with open(os.path.join(directory, _file(name)), "wb") as f:
      pickle.dump(serialize_executable.serialize(res.executable), f)
    manifest["programs"][name] = {"file": _file(name), "fingerprint": fingerprint(res.program)}
  with open(os.path.join(directory, MANIFEST), "w") as f:
    json.dump(manifest, f, indent=1)
  return list(manifest["programs"])


def load(programs, directory: str, devices) -> dict:
  """{name: loaded executable} of the `programs` (`aot.Program`s of this run) whose saved
  executable in `directory` matches them and these devices."""
  from jax.experimental import serialize_executable  # lazy: only a run given compiled= loads

  path = os.path.join(directory, MANIFEST)
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"compiled={directory!r} has no {MANIFEST}: write it with "
      "`prorl-compile --config=... --topology=host --save DIR` on these chips"
    )
  with open(path) as f:
    manifest = json.load(f)
  if manifest["devices"] != _devices(devices):
    log.warning(
      "compiled=%s was compiled for %s, this run has %s: compiling as usual",
      directory, manifest["devices"], _devices(devices),
    )  # fmt: skip
    return {}
  loaded, skipped = {}, []
  for p in programs:
    saved = manifest["programs"].get(p.name)
    if p.name not in RUN_PROGRAMS or saved is None or saved["fingerprint"] != fingerprint(p):
      skipped.append(p.name)
      continue
    with open(os.path.join(directory, saved["file"]), "rb") as f:
      payload = pickle.load(f)
    loaded[p.name] = serialize_executable.deserialize_and_load(*payload, execution_devices=devices)
  log.info(
    "compiled=%s: loaded %s; compiling %s (no saved program of this run's shapes)",
    directory, ", ".join(loaded) or "none", ", ".join(skipped) or "none",
  )  # fmt: skip
  return loaded


def use(setup, loaded: dict):
  """`setup` with the loaded executables in place of the programs they were saved from."""
  if not loaded:
    return setup
  swap = {}
  packed = setup.packed_train_step
  if "logprob" in loaded:
    swap["packed_logprobs" if packed is not None else "logprobs"] = loaded["logprob"]
  if "update" in loaded and packed is None:
    swap["train_step"] = loaded["update"]
  if packed is not None:
    packed._add = loaded.get("update/accumulate", packed._add)
    packed._apply = loaded.get("update/apply", packed._apply)
  if "reset_ref" in loaded:
    exe = loaded["reset_ref"]
    swap["reset_ref"] = lambda state: exe(state.params, state.replace(params=None))
  return dataclasses.replace(setup, **swap)
