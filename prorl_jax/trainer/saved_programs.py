"""Compiled programs saved by `prorl-compile --save DIR` and loaded by a run given
`--config.compiled=DIR`: its first step starts without compiling them.

A saved program is the serialised executable's raw bytes (`jax.experimental.serialize_executable`;
nothing is unpickled: its argument and result structures come from the run's own lowering) and,
in DIR/manifest.json, the fingerprint of the program it was compiled from (the SHA-256 of its
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

from prorl_jax.trainer import aot

log = logging.getLogger("prorl_jax.trainer.saved_programs")

MANIFEST = "manifest.json"
# the programs a run swaps in (the inline engine's are the engine's own and compile as usual)
RUN_PROGRAMS = ("logprob", "update/accumulate", "update/apply", "update", "reset_ref")


def fingerprint(lowered) -> str:
  """SHA-256 of a lowered program's StableHLO."""
  return hashlib.sha256(lowered.as_text().encode()).hexdigest()


def _devices(devices) -> dict:
  return {"kind": devices[0].device_kind, "count": len(devices), "platform": devices[0].platform}


def _file(name: str) -> str:
  return name.replace("/", "-") + ".jaxexe"


def save(results, directory: str, mesh) -> list[str]:
  """Writes each compiled program of `results` (`aot.CompiledProgram`s on `mesh`) as its
  serialised executable, and the manifest; returns the names saved."""
  from jax.experimental import serialize_executable  # lazy: only saving serialises

  os.makedirs(directory, exist_ok=True)
  manifest = {"devices": _devices(list(mesh.devices.flat)), "programs": {}}
  for res in results:
    if res.executable is None:
      continue
    name = res.program.name
    payload, _, _ = serialize_executable.serialize(res.executable)  # trees: from the lowering
    with open(os.path.join(directory, _file(name)), "wb") as f:
      f.write(payload)
    manifest["programs"][name] = {"file": _file(name), "fingerprint": fingerprint(res.lowered)}
  with open(os.path.join(directory, MANIFEST), "w") as f:
    json.dump(manifest, f, indent=1)
  return list(manifest["programs"])


def _manifest(directory: str) -> dict:
  path = os.path.join(directory, MANIFEST)
  if not os.path.isfile(path):
    raise FileNotFoundError(
      f"compiled={directory!r} has no {MANIFEST}: write it with "
      "`prorl-compile --config=... --topology=host --save DIR` on these chips"
    )
  with open(path) as f:
    return json.load(f)


def load(programs, directory: str, mesh) -> dict:
  """{name: loaded executable} of the `programs` (`aot.Program`s of this run on `mesh`) whose
  saved executable in `directory` matches them and these devices. Only raw executables are
  read; their argument and result structures come from this run's own lowering."""
  from jax.experimental import serialize_executable  # lazy: only a run given compiled= loads

  manifest, devices = _manifest(directory), list(mesh.devices.flat)
  if manifest["devices"] != _devices(devices):
    log.warning(
      "compiled=%s was compiled for %s, this run has %s: compiling as usual",
      directory, manifest["devices"], _devices(devices),
    )  # fmt: skip
    return {}
  loaded, skipped = {}, []
  for p in programs:
    saved = manifest["programs"].get(p.name)
    lowered = aot.lower(p, mesh) if p.name in RUN_PROGRAMS and saved else None
    if lowered is None or saved["fingerprint"] != fingerprint(lowered):
      skipped.append(p.name)
      continue
    with open(os.path.join(directory, saved["file"]), "rb") as f:
      payload = f.read()
    loaded[p.name] = serialize_executable.deserialize_and_load(
      payload, lowered.in_tree, lowered.out_tree, execution_devices=devices
    )
  log.info(
    "compiled=%s: loaded %s; compiling %s (no saved program of this run's shapes)",
    directory, ", ".join(loaded) or "none", ", ".join(skipped) or "none",
  )  # fmt: skip
  return loaded


def use(setup, loaded: dict):
  """`setup` with the loaded executables in place of the programs they were saved from (its
  `programs`, a `programs.TrainPrograms`)."""
  if not loaded:
    return setup
  progs, swap = setup.programs, {}
  packed = progs.packed_train_step
  if "logprob" in loaded:
    swap["packed_logprobs" if packed is not None else "logprobs"] = loaded["logprob"]
  if "update" in loaded and packed is None:
    swap["train_step"] = loaded["update"]
  if packed is not None:
    packed._add = loaded.get("update/accumulate", packed._add)
    packed._apply = loaded.get("update/apply", packed._apply)
  if "reset_ref" in loaded:
    swap["reset"] = loaded["reset_ref"]  # (params, the state without them) -> state, as jitted
  return dataclasses.replace(setup, programs=dataclasses.replace(progs, **swap))
