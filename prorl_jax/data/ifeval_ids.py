"""IFEval's instruction ids and arguments (google/IFEval and the datasets built on it) as the
ifeval verifier's instructions."""

from __future__ import annotations

# IFEval's instruction ids (google/IFEval, Llama-Nemotron RL) -> the instruction types here,
# with IFEval's kwargs renamed.
IFEVAL_IDS: dict[str, tuple[str, dict[str, str]]] = {
  "length_constraints:number_words": ("words", {"relation": "relation", "num_words": "num"}),
  "length_constraints:number_sentences": (
    "sentences",
    {"relation": "relation", "num_sentences": "num"},
  ),
  "keywords:existence": ("keywords_include", {"keywords": "keywords"}),
  "keywords:forbidden_words": ("keywords_exclude", {"forbidden_words": "keywords"}),
  "keywords:frequency": (
    "keyword_frequency",
    {"keyword": "keyword", "frequency": "num", "relation": "relation"},
  ),
  "keywords:letter_frequency": (
    "letter_frequency",
    {"letter": "letter", "let_frequency": "num", "let_relation": "relation"},
  ),
  "detectable_format:json_format": ("json_format", {}),
  "detectable_format:number_bullet_lists": ("markdown_bullets", {"num_bullets": "num"}),
  "detectable_format:multiple_sections": (
    "sections",
    {"section_spliter": "splitter", "num_sections": "num"},
  ),
  "detectable_format:title": ("title", {}),
  "change_case:english_lowercase": ("lowercase", {}),
  "change_case:english_capital": ("uppercase", {}),
  "change_case:capital_word_frequency": (
    "capital_words",
    {"capital_frequency": "num", "capital_relation": "relation"},
  ),
  "startend:end_checker": ("end_with", {"end_phrase": "phrase"}),
  "startend:quotation": ("quotation", {}),
  "punctuation:no_comma": ("no_commas", {}),
  "detectable_content:number_placeholders": ("placeholders", {"num_placeholders": "num"}),
  "detectable_content:postscript": ("postscript", {"postscript_marker": "marker"}),
  "language:response_language": ("language", {"language": "language"}),
  "length_constraints:number_paragraphs": ("divided_paragraphs", {"num_paragraphs": "num"}),
  "length_constraints:nth_paragraph_first_word": (
    "nth_paragraph_first_word",
    {"num_paragraphs": "num", "nth_paragraph": "nth", "first_word": "word"},
  ),
  "detectable_format:constrained_response": ("constrained_response", {}),
  "detectable_format:number_highlighted_sections": (
    "highlighted_sections",
    {"num_highlights": "num"},
  ),
  "combination:two_responses": ("two_responses", {}),
  "combination:repeat_prompt": ("repeat_prompt", {"prompt_to_repeat": "prompt"}),
}


def from_ifeval(ids: list, kwargs: list) -> list[dict]:
  """IFEval `instruction_id_list` + `kwargs` -> the ifeval verifier's instructions."""
  if not isinstance(ids, list) or not ids:
    raise ValueError("no instruction ids")
  if not isinstance(kwargs, list):  # missing arguments are never read as "no arguments"
    raise ValueError(f"the instructions' arguments are missing (got {type(kwargs).__name__})")
  if not all(kw is None or isinstance(kw, dict) for kw in kwargs):
    raise ValueError("the instructions' arguments are not objects")
  if len(kwargs) != len(ids):
    raise ValueError("instruction ids and kwargs differ in length")
  out = []
  for iid, kw in zip(ids, kwargs):
    if iid not in IFEVAL_IDS:
      raise ValueError(f"unsupported instruction {iid}")
    kind, names = IFEVAL_IDS[iid]
    kw = {k: v for k, v in (kw or {}).items() if v is not None}
    missing = [k for k in names if k not in kw]
    if missing:
      raise ValueError(f"instruction {iid} lacks {missing[0]}")
    out.append({"type": kind, **{names[k]: kw[k] for k in names}})
  return out
