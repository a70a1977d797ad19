"""The compile tool's inline-engine programs are the run's: the decode program `trainer/aot.py`
compiles has the arguments (page pool, page table, decode state) and the static settings (slot
groups, sampling, steps, attention) of the call the run's engine makes, for the tiny run and for
`jax_engine.slots=2` (where the engine runs two slot groups, not four). The pool's arithmetic
and the decode state's fields exist once (`paged.pool_shape`, `SlotTable.abstract_state`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import init_params
from prorl_jax.rollout.engines import jax_engine, paged
from prorl_jax.rollout.engines import slots as slots_lib
from prorl_jax.rollout.inline import worker_config
from prorl_jax.trainer import aot
from prorl_jax.trainer.plan import Plan


def _cfg(**changes):
  from configs import tiny

  cfg = tiny.get_config()
  cfg.rollout.engine = "inline"
  cfg.jax_engine.batching = "continuous"  # the paged engine, whose programs the tool compiles
  for key, value in changes.items():
    section, leaf = key.split(".")
    cfg[section][leaf] = value
  return cfg


class _Stop(Exception):
  pass


def _run_engines_decode(cfg, model_cfg) -> tuple[tuple, dict]:
  """(args, kwargs) of the run's engine's first decode call on the longest prompt."""
  seen = {}

  def spy(*args, **kwargs):
    seen.update(args=args, kwargs=kwargs)
    raise _Stop

  plan = Plan.from_config(cfg)
  engine = jax_engine.JaxEngine(**plan.workers.options)
  wcfg = worker_config(model_cfg, cfg.jax_engine.dtype)
  engine.set_params(wcfg, init_params(wcfg, jax.random.PRNGKey(0)), 0)
  sp = plan.rollout.sampling.stopping_at(wcfg.eos_token_id)
  real = paged.kernels.decode
  paged.kernels.decode = spy
  try:
    with pytest.raises(_Stop):
      engine.generate([[1] * cfg.rollout.max_prompt_len], cfg.rollout.n, sp, seed=0)
  finally:
    paged.kernels.decode = real
  return seen["args"], seen["kwargs"]


def _shape(x):
  return (tuple(x.shape), jnp.dtype(x.dtype))


@pytest.mark.parametrize("changes", [{}, {"jax_engine.slots": 2}], ids=["tiny", "slots=2"])
def test_the_compile_tools_decode_is_the_runs(changes):
  cfg = _cfg(**changes)
  progs, shapes = aot.programs(Plan.from_config(cfg), jax.devices()[:1])
  decode = next(p for p in progs if p.name == "engine/decode")
  args, kwargs = _run_engines_decode(cfg, shapes.model_cfg)
  weights, kp, vp, table, state, key = args
  _, akp, avp, atable, astate, akey = decode.args
  assert [_shape(a) for a in kp] == [_shape(a) for a in akp]
  assert [_shape(a) for a in vp] == [_shape(a) for a in avp]
  assert type(state) is type(astate) is slots_lib.SlotState
  assert [_shape(v) for v in state] == [_shape(v) for v in astate]
  assert _shape(key) == _shape(akey)
  # the run reads the table up to its longest slot's pages; the tool compiles the whole table
  assert table.shape[0] == atable.shape[0] and table.shape[1] <= atable.shape[1]
  pc = paged.PagedConfig(**plan_options(cfg), attention=kwargs["attention"])
  full = paged.pool_shape(
    pc, shapes.model_cfg, cfg.rollout.max_prompt_len + cfg.rollout.max_response_len
  )
  assert atable.shape[1] == full.width
  static = {k: v for k, v in decode.kwargs.items() if k != "model_cfg"}
  assert static == {k: v for k, v in kwargs.items() if k != "model_cfg"}
  assert decode.kwargs["groups"] == min(4, cfg.jax_engine.slots)
  assert decode.kwargs["model_cfg"] == kwargs["model_cfg"]
  w_run = jax.tree.map(_shape, weights)
  w_tool = jax.tree.map(_shape, decode.args[0])
  assert w_run == w_tool


def plan_options(cfg) -> dict:
  e = cfg.jax_engine
  return dict(slots=e.slots, page_size=e.page_size, pages=e.pages, steps_per_sync=e.steps_per_sync)


def test_the_pool_by_hand():
  """16-token pages, 2 slots, sequences of up to 40 tokens and 8 steps a call: 3 pages a
  sequence (48 tokens), each slot with one page to spare, and the trash page: 2 * 4 + 1 = 9."""
  from prorl_jax.model import presets

  pc = paged.PagedConfig(slots=2, page_size=16, steps_per_sync=8)
  shape = paged.pool_shape(pc, presets.tiny(), 40)
  assert shape.pages == 9 and shape.width % paged.kernels.BLOCK_PAGES == 0
  assert shape.width >= 4 and pc.groups == 2
  st = paged.SlotTable.abstract_state(3, lambda shape, dtype: np.zeros(shape, dtype))
  assert st._fields == paged.SlotTable.FIELDS and st.active.dtype == bool and st.pos.shape == (3,)
