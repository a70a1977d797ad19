"""The decode loops stream the weights; they never copy or re-slice them per step. XLA can fail
to treat a stacked layer's weights as loop-invariant and re-slice them inside a decode loop
(a copy of every weight per step); both JAX engines take one array per layer instead
(`jax_sampler.prepare`). Checked on the compiled HLO of each loop."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prorl_jax.model import init_params
from prorl_jax.model.presets import ModelConfig
from prorl_jax.records import SamplingParams
from prorl_jax.rollout.engines import jax_sampler, paged_kernels, slots

# dims chosen so that every weight has a shape nothing else has
CFG = ModelConfig(
  vocab_size=200, hidden_size=48, intermediate_size=80, num_layers=2, num_heads=4,
  num_kv_heads=2, head_dim=12, tie_word_embeddings=False,
)  # fmt: skip
WEIGHT_SHAPES = ("48,96", "96", "48,80", "80,48", "48,200", "200,48")  # qkv, its bias, mlp, head


def _weight_copies(hlo: str) -> list[str]:
  """Instructions of a decode loop's body (fused ones included: their metadata names the loop)
  that slice, copy or gather an array of a weight's shape."""
  assert "while(" in hlo, "no loop in the compiled decode"
  bad = []
  for line in hlo.split("\n"):
    m = re.search(r"= f32\[([\d,]*)\]\S* (dynamic-slice|copy|slice|gather|transpose)\(", line)
    op = re.search(r'op_name="([^"]*)"', line)
    # a loop's body, not the prefill's scan over the model's stacked layers (once per prompt)
    if m and op and re.search(r"(?<!Decoder)/while/body", op.group(1)):
      shape = re.sub(r"^(1,)+", "", m.group(1))
      if shape in WEIGHT_SHAPES:
        bad.append(line.strip()[:160])
  return bad


@pytest.fixture(scope="module")
def weights():
  params = init_params(CFG, jax.random.PRNGKey(0))
  return params, jax_sampler.prepare(CFG, params)


SP = SamplingParams(max_new_tokens=8, temperature=1.0)


def test_the_static_decode_loop_never_copies_a_weight(weights):
  params, w = weights
  ones = jnp.ones((2, 8), jnp.int32)
  key, limit = jax.random.PRNGKey(1), jnp.full((2,), 8, jnp.int32)
  lowered = jax_sampler._generate.lower(
    params, w, ones, ones, key, limit, model_cfg=CFG, sp=SP, pad_id=0
  )
  assert _weight_copies(lowered.compile().as_text()) == []


def test_the_paged_decode_loop_never_copies_a_weight(weights):
  _, w = weights
  s, pages, page = 4, 9, 4
  kp = tuple(jnp.zeros((pages, 2, 12, page)) for _ in range(2))
  vp = tuple(jnp.zeros((pages, 2, page, 12)) for _ in range(2))
  zeros = jnp.zeros(s, jnp.int32)
  state = slots.SlotState(zeros, zeros, zeros, zeros, jnp.ones(s, bool), zeros)
  table = jnp.asarray(np.arange(1, 9).reshape(s, 2) % pages, jnp.int32)
  lowered = paged_kernels.decode.lower(
    w, kp, vp, table, state, jax.random.PRNGKey(1), model_cfg=CFG, sp=SP, steps=4, groups=2
  )
  hlo = lowered.compile().as_text()
  assert _weight_copies(hlo) == []


def test_the_check_sees_a_weight_sliced_inside_a_loop():
  # the failure it guards against: stacked layer weights indexed by the loop counter
  def loop(stacked, x):
    def body(i, x):
      return x @ jax.lax.dynamic_index_in_dim(stacked, i % 3, keepdims=False)[:, :48]

    return jax.lax.fori_loop(0, 5, body, x)

  hlo = jax.jit(loop).lower(jnp.ones((3, 48, 96)), jnp.ones((2, 48))).compile().as_text()
  assert len(_weight_copies(hlo)) == 1
