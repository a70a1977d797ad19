"""The math verifier's domain (`rewards.math`): a boxed answer, written in the forms models write
it (`data.honest.MATH_WRAPPERS`, digit groups); a tower of powers is its veto attempt."""

from __future__ import annotations

from prorl_jax.data import honest as honest_lib
from prorl_jax.data.domains import Domain
from prorl_jax.rewards.common import last_boxed

VETO = "9^{9^{9^{9}}}"


def wrap(text: str) -> str:
  return f"<think>done</think>\\boxed{{{text}}}"


def answer_of(row: dict) -> str | None:
  ref = str(row["reference"])
  return last_boxed(ref) if "\\boxed" in ref else ref


def honest_forms(answer: str) -> dict[str, str]:
  """{style: response} for a math reference's value."""
  out = {}
  for i, form in enumerate(honest_lib.math_forms(answer)):
    for j, w in enumerate(honest_lib.MATH_WRAPPERS):
      out[f"math/{i}/{j}"] = honest_lib.THINK + w.format(x=form)
  return out


def honest(row: dict) -> dict[str, str]:
  ref = answer_of(row)
  return {} if ref is None else honest_forms(ref)


DOMAIN = Domain(wrap=wrap, answer_of=answer_of, honest=honest, veto=VETO)
