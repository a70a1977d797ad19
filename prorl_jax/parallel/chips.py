"""The chips a run compiles for without them: topology names as users write them (v5p-8,
v5e-16, h200-8, 2xh200-8) mapped to the chip's published numbers and to JAX's compile-only
devices (`jax.experimental.topologies`: libtpu for TPUs; the CUDA plugin with a GPU target
config for NVIDIA GPUs, no driver needed).

`CHIPS` is the one table of per-device numbers, each row with its source. A device is what JAX
calls a device on the real slice: a TPU chip (v4's and v5p's two TensorCores are one megacore
device, which is how JAX runs them; libtpu's compile-only v4 topology lists each core unless
asked for the megacore chip config, so the tool asks for it); one NVIDIA GPU.
"""

from __future__ import annotations

import dataclasses
import os
import re

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
  """One device's published numbers: HBM bytes, peak dense bf16 FLOP/s, HBM bytes/s."""

  kind: str  # the short name: v5p, h200
  platform: str  # tpu | cuda
  hbm_bytes: int
  peak_flops: float
  hbm_bw: float
  source: str
  per_host: int  # devices per host of a multi-host slice (a v5e/v6e slice of 8: one host)


CHIPS: dict[str, Chip] = {
  "v4": Chip(
    "v4",
    "tpu",
    32 * GiB,
    275e12,
    1228e9,
    "cloud.google.com/tpu/docs/v4: 32 GiB HBM, 275 TFLOP/s bf16, 1228 GB/s a chip",
    4,
  ),
  "v5e": Chip(
    "v5e",
    "tpu",
    16 * GiB,
    197e12,
    819e9,
    "cloud.google.com/tpu/docs/v5e: 16 GiB HBM, 197 TFLOP/s bf16, 819 GB/s a chip",
    4,
  ),
  "v5p": Chip(
    "v5p",
    "tpu",
    95 * GiB,
    459e12,
    2765e9,
    "cloud.google.com/tpu/docs/v5p: 95 GiB HBM, 459 TFLOP/s bf16, 2765 GB/s a chip",
    4,
  ),
  "v6e": Chip(
    "v6e",
    "tpu",
    32 * GiB,
    918e12,
    1640e9,
    "cloud.google.com/tpu/docs/v6e: 32 GiB HBM, 918 TFLOP/s bf16, 1640 GB/s a chip",
    4,
  ),
  "h100": Chip(
    "h100",
    "cuda",
    84942979072,
    989.4e12,
    3.35232e12,
    "NVIDIA H100 SXM datasheet: 989.4 TFLOP/s dense bf16; XLA's specs/h100_sxm.txtpb: "
    "84942979072 B, 3.35 TB/s",
    8,
  ),
  "h200": Chip(
    "h200",
    "cuda",
    151397597184,
    989.4e12,
    4.8e12,
    "NVIDIA H200 datasheet: 989.4 TFLOP/s dense bf16, 4.8 TB/s; XLA's specs/h200.txtpb: "
    "151397597184 B",
    8,
  ),
  "host": Chip(
    "host",
    "cpu",
    os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    1e11,
    2e10,
    "this host: its memory (os.sysconf); FLOP/s and bandwidth nominal, not this CPU's",
    1,
  ),
}

# TPU v4 and v5p slices are named by TensorCores (two a chip), v5e and v6e by chips.
_CORES_IN_NAME = {"v4", "v5p"}
_SIDES = {1: (1, 1, 1), 2: (2, 1, 1), 4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}
_SIDES |= {64: (4, 4, 4), 128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8)}
_PLANE = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16)}
_PLANE |= {256: (16, 16)}


def _names() -> str:
  """Every name `parse` accepts, from the tables above (TPU slices by their grid tables)."""
  tpus = []
  for kind in ("v4", "v5e", "v5p", "v6e"):
    grids = _SIDES if kind in _CORES_IN_NAME else _PLANE
    sizes = sorted(c * 2 if kind in _CORES_IN_NAME else c for c in grids)
    tpus.append(f"{kind}-" + "/".join(map(str, sizes)))
  return (
    ", ".join(tpus) + ", h100-N and h200-N (N GPUs a node), Mxh100-N and Mxh200-N (M nodes), host"
  )


NAMES = _names()


class TopologyError(ValueError):
  """A topology name this table cannot map; the message lists the names it can."""


@dataclasses.dataclass(frozen=True)
class Topology:
  """A named slice or node: `devices` of one `chip` over `hosts` hosts."""

  name: str
  chip: Chip
  devices: int
  hosts: int
  shape: tuple[int, ...]  # the TPU's chip grid, or (hosts, GPUs a host)

  @property
  def platform(self) -> str:
    return self.chip.platform


def parse(name: str) -> Topology:
  """`v5p-8` -> its chip, device count, hosts and grid (`host`: this host's own devices, for
  executables a run here loads); a name outside the table is a TopologyError naming the ones
  it knows."""
  if name == "host":
    return Topology(name, CHIPS["host"], 0, 1, ())
  m = re.fullmatch(r"(?:(\d+)x)?(h100|h200)-(\d+)", name)
  if m:
    hosts, per = int(m.group(1) or 1), int(m.group(3))
    return Topology(name, CHIPS[m.group(2)], hosts * per, hosts, (hosts, per))
  m = re.fullmatch(r"(v4|v5e|v5p|v6e)-(\d+)", name)
  if not m:
    raise TopologyError(
      f"unknown topology {name!r}; use one of {NAMES} (a TPU name's number any size of the table)"
    )
  kind, n = m.group(1), int(m.group(2))
  chip = CHIPS[kind]
  chips = n // 2 if kind in _CORES_IN_NAME else n
  grid = _SIDES.get(chips) if kind in _CORES_IN_NAME else _PLANE.get(chips)
  if grid is None:
    raise TopologyError(
      f"{name}: no {kind} slice of {chips} chips in the table; use one of {NAMES}"
    )
  devices = chips  # a megacore chip is one device (see the module)
  single_host = kind in ("v5e", "v6e") and chips <= 8
  hosts = 1 if single_host else max(1, chips // 4)
  return Topology(name, chip, devices, hosts, grid)


def target_config(chip: Chip) -> str:
  """The GpuTargetConfigProto text XLA compiles a CUDA program for: the device's published
  numbers (XLA's xla/backends/gpu/target_config/specs/*.txtpb, trimmed to the fields the
  pinned XLA reads)."""
  return f"""gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {int(chip.hbm_bw)}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {chip.hbm_bytes}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 minor: 0 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 8 patch: 0 }}
device_description_str: "NVIDIA {chip.kind.upper()}"
"""


def compile_only_devices(topo: Topology) -> list:
  """JAX's compile-only devices of `topo` (no chip needed: libtpu or the CUDA plugin must be
  installed: `make venv-chips`)."""
  from jax.experimental import topologies  # lazy: only the compile tool asks for chips

  if topo.platform == "cpu":
    import jax  # lazy as topologies above

    return jax.devices()
  if topo.platform == "cuda":
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    shape = f"1x{topo.hosts}x{topo.devices // topo.hosts}"
    desc = topologies.get_topology_desc(
      topo.name, "cuda", target_config=target_config(topo.chip), topology=shape
    )
    return list(desc.devices)
  grid = "x".join(map(str, topo.shape))
  # one host holds the whole grid of a single-host slice (v5e-1: 1x1x1, v5e-8: 2x4x1); a
  # multi-host slice's hosts hold 2x2x1 chips each
  per_host = (tuple(topo.shape) + (1,) * 3)[:3] if topo.hosts == 1 else (2, 2, 1)
  megacore = {"chip_config_name": "megacore"} if topo.chip.kind in _CORES_IN_NAME else {}
  desc = topologies.get_topology_desc(
    platform="tpu",
    topology_name=f"{topo.chip.kind}:{grid}",
    chips_per_host_bounds=per_host,
    **megacore,
  )
  return list(desc.devices)
