"""The instruction-following verifier's domain (`rewards.ifeval`): the response is prose; a row
has no reference answer; the honest wrong answer is a plain reply on the prompt's topic; the
attacks disguise, pad, restate or hide what the instructions ask for."""

from __future__ import annotations

from prorl_jax.data import attacks
from prorl_jax.data.domains import DEEP_JSON, HONEST_TEXT, Domain, question


def wrap(text: str) -> str:
  return f"<think>done</think>{text}"


def answer_of(row: dict) -> str | None:
  return None  # instructions, not an answer


def honest(row: dict) -> dict[str, str]:
  return {}


def responses(row: dict, others: list[dict]) -> tuple[None, str, dict[str, str]]:
  q = question(row)
  filler = " ".join(["lorem ipsum dolor sit amet"] * 400)
  raw = {"empty": "", "blank": " \n\t ", "copy_question": q, "longest": filler, "veto": DEEP_JSON}
  wrong = wrap(attacks.topic(q) + " " + HONEST_TEXT)
  return None, wrong, {k: wrap(v) for k, v in raw.items()}


def attacks_of(prompt: str, extra: dict, answer, spec, seed: int) -> dict[str, list[tuple]]:
  instructions = extra.get("instructions") or []
  raw = attacks.ifeval_attacks(prompt, instructions, seed)
  raw["hidden_markup"] = attacks.hidden_markup(prompt, instructions)
  return raw


DOMAIN = Domain(
  wrap=wrap, answer_of=answer_of, honest=honest, responses=responses, attacks_of=attacks_of
)
