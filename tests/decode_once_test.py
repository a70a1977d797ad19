"""The decoder layer's math exists once, in `prorl_jax/model/`: outside it no module normalises
(an rsqrt of a mean of squares), rotates (RoPE's frequency tables), projects (q/k/v, the output,
the SwiGLU gate) or calls the layer's parts; the engines reach the math only through
`layer.decode_layer` / `layer.decode_stack` with their own `attend`."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "prorl_jax"
PARTS = {"rms_norm", "apply_rope", "rope_tables", "silu", "RMSNorm"}
WEIGHTS = {"qkv", "qkv_bias", "q_norm", "k_norm", "input_norm", "post_attn_norm"}
PROJECTIONS = {f"{p}_proj" for p in ("q", "k", "v", "o", "gate", "up", "down")}


def _name(node) -> str:
  return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def decoder_math(source: str) -> list[str]:
  """What in `source` is a piece of the decoder layer's math (see the module docstring)."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Call) and _name(node.func) in PARTS:
      found.append(f"line {node.lineno}: calls {_name(node.func)}")
    if isinstance(node, ast.Call) and _name(node.func) == "rsqrt":
      inner = {_name(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
      if "mean" in inner:
        found.append(f"line {node.lineno}: an RMSNorm (rsqrt of a mean)")
    if isinstance(node, ast.Name | ast.Attribute) and _name(node) == "inv_freq":
      found.append(f"line {node.lineno}: RoPE frequencies")
    if isinstance(node, ast.Attribute) and node.attr in WEIGHTS:
      found.append(f"line {node.lineno}: reads a layer weight .{node.attr}")
    if isinstance(node, ast.Constant) and node.value in PROJECTIONS | WEIGHTS:
      found.append(f"line {node.lineno}: names a layer weight {node.value!r}")
  return found


def test_the_decoder_layers_math_is_only_in_model():
  found = {}
  for path in sorted(ROOT.rglob("*.py")):
    if path.parent.name == "model" and path.parent.parent == ROOT:
      continue
    hits = decoder_math(path.read_text())
    if hits:
      found[str(path.relative_to(ROOT))] = hits
  assert found == {}, "the decoder layer's math belongs in prorl_jax/model/ (layer.decode_layer)"
  # it is there, once: the layer's parts are defined in layer.py and nowhere else in model/
  defined = {}
  for path in sorted((ROOT / "model").glob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.FunctionDef) and node.name in PARTS | {"decode_layer"}:
        defined.setdefault(node.name, []).append(path.name)
  assert defined == {n: ["layer.py"] for n in ("rms_norm", "apply_rope", "rope_tables")} | {
    "decode_layer": ["layer.py"]
  }


def test_the_scan_finds_each_kind_of_second_implementation():
  """The scan, broken once per form a second implementation can take."""
  seconds = [
    "y = rms_norm(x, w, 1e-6, dt)",
    "y = layer.apply_rope(q, cos, sin)",
    "y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)",
    "inv_freq = 1.0 / (theta ** (jnp.arange(0, d, 2) / d))",
    "y = x @ w.qkv + w.qkv_bias",
    "k = rms_norm_of(k, weights.k_norm)",
    "k = params['layers']['attn']['k_proj']['kernel']",
    "h = jax.nn.silu(g) * u",
  ]
  for source in seconds:
    assert decoder_math(source), source
  # what is not the layer's math passes: a whitening rsqrt, a plain matmul, the one layer's call
  for source in [
    "s = jax.lax.rsqrt(var + eps)",
    "y = x @ head",
    "x, c = layer.decode_layer(cfg, w, x, rope, attend)",
  ]:
    assert decoder_math(source) == [], source
