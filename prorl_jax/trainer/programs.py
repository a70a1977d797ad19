"""The trainer's programs, built in one place: `build(batching, loss, reset_optimizer, model_cfg,
tx, mesh, state_sh)` returns the update (over padded micro-batches or packed slabs), the log-prob
pass and the reference reset, each jitted once on its shardings, with the shapes they run at.

The run (`setup.build`, with the real state) and the compile tool, the fit search and the TPU
pre-flight (`aot.programs`, with the state as shapes) both call it, so what the tool compiles
is what the run runs: no shape or setting of a program is computed twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from prorl_jax.trainer import compiled
from prorl_jax.trainer import train_step as ts


@dataclasses.dataclass(frozen=True)
class TrainPrograms:
  """The trainer's jitted programs and their shapes. Legend: B = rows of a padded mini-batch,
  T = its token columns; a packed slab is [slab_shape] = [rows, row_len] (None: padded)."""

  rows: int  # B: prompts per mini-batch x responses per prompt
  seq: int  # T at most: max_prompt_len + max_response_len
  batch_shardings: Any
  train_step: Callable  # (state, batch) -> (state, metrics): padded micro-batches
  logprobs: Callable  # (params, inputs) -> (logp, entropy) [B, T]
  slab_shape: tuple[int, int] | None
  slab_shardings: Any
  packed_cfg: Any  # the packed passes' model config (None: padded)
  packed_train_step: ts.PackedTrainStep | None  # (state, slabs, counts) -> (state, metrics)
  packed_logprobs: Callable | None  # (params, slab inputs) -> (logp, entropy)
  reset: Callable  # jitted (params, the state without them) -> state: reference = policy

  def reset_ref(self, state):
    """The state with its reference set to its policy (the optimizer per the plan)."""
    return self.reset(state.params, state.replace(params=None))


def packed_row_len(b) -> int:
  """Tokens per packed row: `pack_row_len`, or the whole per-device budget when 0."""
  return b.pack_row_len or b.token_budget


def packed_shapes(b, mesh, model_cfg):
  """(slab shape [rows, row_len], the packed passes' model config) of the batching `b`
  (`token_budget` tokens a device, rows of `pack_row_len`) on `mesh`."""
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  row_len = packed_row_len(b)
  slab_shape = (shards * (b.token_budget // row_len), row_len)
  # A packed sequence is at most `seq` tokens: XLA attention blocks look back only that far.
  packed_cfg = model_cfg.replace(attention_window=b.max_prompt_len + b.max_response_len)
  if packed_cfg.attention_impl == "cudnn":
    # cuDNN's path takes the block-diagonal mask as a dense [T, T] array per row: on a packed
    # row of 16K tokens that mask and its scores cost what packing saves. Pallas' GPU flash
    # attention takes the segment ids themselves: one fused kernel, no [T, T] buffer.
    packed_cfg = packed_cfg.replace(attention_impl="pallas_gpu")
  if packed_cfg.attention_impl in ("splash", "pallas_gpu") and row_len % 128:
    # both kernels' blocks are 128 tokens; the XLA blocks take any row and hold no [T, T]
    packed_cfg = packed_cfg.replace(attention_impl="xla")
  return slab_shape, packed_cfg


def build(
  b, loss: ts.LossConfig, reset_optimizer: bool, model_cfg, tx, mesh, state_sh
) -> TrainPrograms:
  """Every trainer program of a run whose mini-batches are `b` (`plan.Batching`), its loss
  `loss`, its resets `reset_optimizer`, on `mesh` with the state's shardings `state_sh`."""
  rows, seq = b.mini_batch_prompts * b.n, b.max_prompt_len + b.max_response_len
  packed = dict(slab_shape=None, slab_shardings=None, packed_cfg=None)
  packed.update(packed_train_step=None, packed_logprobs=None)
  if b.token_budget:
    slab_shape, packed_cfg = packed_shapes(b, mesh, model_cfg)
    packed = dict(
      slab_shape=slab_shape,
      slab_shardings=compiled.packed_shardings(mesh, slab_shape),
      packed_cfg=packed_cfg,
      packed_train_step=ts.PackedTrainStep(
        packed_cfg, tx, loss, mesh, slab_shape, shardings=state_sh
      ),
      packed_logprobs=compiled.jit_packed_logprob_step(
        packed_cfg, mesh, slab_shape, temperature=loss.temperature
      ),
    )
  return TrainPrograms(
    rows=rows,
    seq=seq,
    batch_shardings=compiled.batch_shardings(mesh, (rows, seq)),
    train_step=compiled.jit_train_step(model_cfg, tx, loss, mesh, (rows, seq), shardings=state_sh),
    logprobs=compiled.jit_logprob_step(
      model_cfg, mesh, (rows, seq), temperature=loss.temperature, micro_batches=loss.micro_batches
    ),
    reset=compiled.reset_reference_jit(model_cfg, tx, mesh, reset_optimizer, shardings=state_sh),
    **packed,
  )
