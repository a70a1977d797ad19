"""Instruction checks judge what a reader sees (`rewards.rendered`): text placed only where
Markdown never renders it (an HTML comment, a link's destination or title, an image's URL, a link
reference definition) does not meet an instruction, in any of those places; the same text where
it is seen does. Entities are what they render as."""

import pytest

from prorl_jax.rewards import ifeval
from prorl_jax.rewards.rendered import rendered

BODY = (
  "Tides rise and fall twice a day because the moon pulls on the oceans, and the sun adds a "
  "smaller pull of its own."
)
# the instruction, and the text that meets it when a reader sees that text
NEEDS = [
  ({"type": "title"}, "<<Moon and Tides>>"),
  ({"type": "keywords_include", "keywords": ["gravitation"]}, "gravitation"),
  ({"type": "postscript", "marker": "P.S."}, "P.S. the moon is far away"),
  ({"type": "end_with", "phrase": "Is there anything else I can help with?"}, None),
  ({"type": "placeholders", "num": 1}, "[address]"),
  ({"type": "keyword_frequency", "keyword": "lunar", "relation": "at least", "num": 2}, None),
]
END = "Is there anything else I can help with?"


def _hidden(place: str, s: str) -> str:
  return {
    "inline comment": f"{BODY} <!-- {s} -->",
    "block comment": f"{BODY}\n\n<!--\n{s}\n-->",
    "unclosed comment": f"{BODY}\n\n<!-- {s}",
    "link destination": f"{BODY} See [the chart](https://example.com/{s.replace(' ', '%20')}).",
    "link title": f'{BODY} See [the chart](https://example.com "{s}").',
    "image url": f"{BODY} ![chart](https://example.com/{s.replace(' ', '_')}.png)",
    "reference definition": f'{BODY}\n\n[chart]: https://example.com "{s}"',
  }[place]


PLACES = [
  "inline comment",
  "block comment",
  "unclosed comment",
  "link destination",
  "link title",
  "image url",
  "reference definition",
]


def _text_for(ins, s):
  if ins["type"] == "end_with":
    return END
  if ins["type"] == "keyword_frequency":
    return "lunar lunar"
  return s


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("ins, s", NEEDS, ids=lambda x: x["type"] if isinstance(x, dict) else "")
def test_text_the_reader_never_sees_meets_no_instruction(ins, s, place):
  s = _text_for(ins, s)
  assert not ifeval.check(_hidden(place, s), ins), (place, rendered(_hidden(place, s)))
  seen = f"{BODY}\n\n{s}" if ins["type"] != "title" else f"{s}\n\n{BODY}"
  assert ifeval.check(seen, ins), seen


@pytest.mark.parametrize(
  "text, ins, ok",
  [
    # an entity renders as its character: a comma written as &#44; is a comma
    (f"{BODY.replace(',', '')} then &#44; more", {"type": "no_commas"}, False),
    ("Tides are b&#97;d news", {"type": "keywords_exclude", "keywords": ["bad"]}, False),
    # ... but credit needs both readings: the characters never spell the keyword
    ("Tides are b&#97;d news", {"type": "keywords_include", "keywords": ["bad"]}, False),
    # the link's text is seen: a keyword there counts
    (
      "Read about [gravitation](https://x.org) here.",
      {"type": "keywords_include", "keywords": ["gravitation"]},
      True,
    ),
    # markup a check reads as structure survives rendering
    ("* one thing\n* two things\n* three", {"type": "markdown_bullets", "num": 3}, True),
    (
      "Intro\n\n*first highlight* and *second one*",
      {"type": "highlighted_sections", "num": 2},
      True,
    ),
    (
      "SECTION 1\nthe moon pulls\n\nSECTION 2\nthe sun pulls",
      {"type": "sections", "splitter": "SECTION", "num": 2},
      True,
    ),
    ('{"tide": "high", "path": "a\\\\b"}', {"type": "json_format"}, True),
    ('```json\n{"tide": "high"}\n```', {"type": "json_format"}, True),
    ('<!-- note -->{"tide": "high"}', {"type": "json_format"}, True),
    ("first part\n\n***\n\nsecond part here", {"type": "divided_paragraphs", "num": 2}, True),
  ],
)
def test_what_renders_is_what_counts(text, ins, ok):
  assert ifeval.check(text, ins) is ok, rendered(text)


def test_rendering_keeps_structure_and_drops_only_the_unseen():
  src = (
    "Title\n=====\n\nHello [world](http://x.com/kw 'kw') <!-- kw -->\n\n[kw]: http://kw\n\n"
    "1. first\n2. second\n\n******\n\n> quoted"
  )
  assert rendered(src) == "# Title\n\nHello world\n\n1. first\n2. second\n\n******\n\n> quoted"
