"""The device mesh, the one logical-axis rules table, and logical names -> shardings.

Mesh axes: `data` (pure data parallel), `fsdp` (data parallel with sharded params and optimizer
state), `tensor` (heads / MLP / vocab split). Every param and activation is named with the logical
axes below; `LOGICAL_RULES` is the only place that maps them to mesh axes. No global mesh: callers
pass the mesh explicitly.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# logical name -> mesh axis (or tuple of axes, or None = replicated). Params use the plain names;
# activations use `act_*` so the batch can be split over fsdp while weights are split over it too.
LOGICAL_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
  ("layers", None),
  ("vocab", "tensor"),
  ("embed", "fsdp"),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("head_dim", None),
  ("mlp", "tensor"),
  ("norm", None),
  ("lora", None),  # a LoRA adapter's rank: small, replicated
  ("act_batch", ("data", "fsdp")),
  ("act_seq", None),
  ("act_embed", None),
  ("act_heads", "tensor"),
  ("act_kv_heads", "tensor"),
  ("act_mlp", "tensor"),
  ("act_vocab", "tensor"),
)
_RULES = dict(LOGICAL_RULES)
log = logging.getLogger("prorl_jax.parallel.sharding")
_logged: set = set()


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices=None) -> Mesh:
  """A (data, fsdp, tensor) mesh; `fsdp=-1` takes all devices left over."""
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices)
  if fsdp == -1:
    if n % (data * tensor):
      raise ValueError(
        f"mesh data={data} x tensor={tensor} does not divide the {n} devices; "
        "choose sizes whose product divides the device count"
      )
    fsdp = n // (data * tensor)
  if data * fsdp * tensor != n:
    raise ValueError(
      f"mesh data={data} x fsdp={fsdp} x tensor={tensor} = {data * fsdp * tensor} "
      f"must equal the device count {n}; set --config.mesh.* accordingly"
    )
  return Mesh(np.asarray(devices).reshape(data, fsdp, tensor), MESH_AXES)


def logical_to_spec(names) -> P:
  """PartitionSpec for a tuple of logical axis names; unknown names and collisions are errors."""
  axes, used = [], set()
  for name in names:
    if name is None:
      axes.append(None)
      continue
    if name not in _RULES:
      raise KeyError(f"logical axis {name!r} has no rule in sharding.LOGICAL_RULES")
    mesh_axes = _RULES[name]
    flat = (mesh_axes,) if isinstance(mesh_axes, str) else (mesh_axes or ())
    if used & set(flat):
      raise ValueError(
        f"logical axes {tuple(names)}: {name!r} maps to mesh axis {mesh_axes!r}, which an "
        "earlier dimension already uses; a mesh axis can split only one dimension"
      )
    used |= set(flat)
    axes.append(mesh_axes)
  return P(*axes)


def fit_spec(spec: P, shape, mesh: Mesh, what: str = "array") -> P:
  """Drops mesh axes from dims they do not divide (2 kv heads on tensor=4), which then stay
  whole on every device; said once per (what, dim, axes) in the log."""
  out = []
  for i, (dim, axes) in enumerate(zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)))):
    size = axes_size(axes, mesh)
    if dim % size:
      key = (what, i, dim, axes)
      if key not in _logged:
        _logged.add(key)
        log.info(
          "%s: dimension %d of size %d is not divisible by mesh axes %s (%d); kept whole",
          what,
          i,
          dim,
          axes,
          size,
        )
      axes = None
    out.append(axes)
  return P(*out)


def axes_size(axes, mesh: Mesh) -> int:
  flat = (axes,) if isinstance(axes, str) else (axes or ())
  return int(np.prod([mesh.shape[a] for a in flat])) if flat else 1


def batch_spec(shape, mesh: Mesh) -> P:
  """The spec of a [batch, ...] array: rows split over (data, fsdp). A batch that the mesh does
  not divide is an error (replicating it would run every row on every device)."""
  spec = logical_to_spec(("act_batch",))
  n = axes_size(spec[0], mesh)
  if shape[0] % n:
    raise ValueError(
      f"a batch of {shape[0]} rows cannot be split over mesh.data x mesh.fsdp = {n} devices; "
      "use a batch size that is a multiple of it"
    )
  return spec


def constrain(x, names, mesh: Mesh | None):
  """`with_sharding_constraint` by logical names; a no-op without a mesh."""
  if mesh is None:
    return x
  spec = fit_spec(logical_to_spec(names), x.shape, mesh, f"activation {tuple(names)}")
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
