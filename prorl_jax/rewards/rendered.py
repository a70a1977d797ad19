r"""A response's Markdown as a reader sees it once rendered: what a check may count.

`rendered(text)` parses the text as CommonMark (markdown-it-py) and writes back what a reader
sees, keeping the markup a check reads as structure (heading `#`s, bullet and number markers,
emphasis asterisks, thematic breaks, code fences): HTML comments, link destinations and titles,
image URLs and link reference definitions are dropped (they never render), entities are decoded
(`&#44;` is a comma), backslash escapes resolved, and blocks are separated by one blank line. A
title, keyword, P.S. or end phrase hidden in markup the reader never sees is not there.

It is the text as shown, so the rest of what a page or a typesetter shows is applied too:
- inline HTML and HTML blocks are read by a real HTML parser (`html.parser`): an element with
  the `hidden` attribute, CSS that hides it (`display:none`, `visibility:hidden`, `opacity:0`,
  `font-size:0`, text coloured white or transparent, read by tinycss2's declaration parser), a
  closed `<details>` (all but its `<summary>`), `<template>`, `<style>`, `<script>`,
  `<noscript>` and `<head>` show nothing; an image shows no alt text; CSS `text-transform` (and
  small capitals) is applied; the tags of HTML's elements are not text, a tag whose name is no
  HTML element (`<<title>>`) is;
- a character Markdown would read as structure but the writer escaped (`\*`, `&ast;`, `\-`) is
  literal text: never a bullet, a highlight or a divider (written as a look-alike that no check
  reads as markup);
- LaTeX is typeset (`typeset.prose`: `\text{dyn}\text{asty}` is "dynasty", `\phantom{..}` shows
  nothing, `\char"2C` is a comma);
- a line with a bidirectional override (U+202D, U+202E) is read in the order it displays in (the
  Unicode bidirectional algorithm, python-bidi): a word stored reversed under U+202E reads forwards.
"""

from __future__ import annotations

import functools
import html.parser
import re

import markdown_it

from prorl_jax.rewards import typeset

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)


@functools.cache
def _parser() -> markdown_it.MarkdownIt:
  # text_join off: an escape or an entity stays its own token (literal text, never markup)
  return markdown_it.MarkdownIt("commonmark").disable("text_join")


# The elements of HTML (WHATWG's list, with the obsolete ones browsers still draw): a tag with
# another name is text, not markup.
_ELEMENTS = frozenset(
  """a abbr address area article aside audio b base bdi bdo blockquote body br button canvas
  caption cite code col colgroup data datalist dd del details dfn dialog div dl dt em embed
  fieldset figcaption figure font footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html i
  iframe img input ins kbd label legend li link main map mark menu meta meter nav noscript object
  ol optgroup option output p param picture pre progress q rp rt ruby s samp script search
  section select slot small source span strong style sub summary sup table tbody td template
  textarea tfoot th thead time title tr track u ul var video wbr center big tt strike marquee
  blink""".split()
)
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_NEVER_SHOWN = frozenset("template style script noscript head".split())
_INVISIBLE_COLOURS = re.compile(
  r"^(?:transparent|white|#f{3}(?:f{3})?|#f{8}"
  r"|rgba?\(\s*255\s*,\s*255\s*,\s*255\s*(?:,\s*1(?:\.0*)?\s*)?\)|rgba\(.*,\s*0(?:\.0*)?\s*\)"
  r"|hsla?\(\s*\d+\s*,\s*\d+%?\s*,\s*100%.*\))$",
  re.I,
)


def _style(css: str) -> tuple[bool, str | None]:
  """(hides, text transform) of an inline `style` attribute, read by tinycss2."""
  import tinycss2  # lazy: a response with inline CSS is rare

  hides, transform = False, None
  for d in tinycss2.parse_blocks_contents(css, skip_comments=True, skip_whitespace=True):
    if d.type != "declaration":
      continue
    value = tinycss2.serialize(d.value).strip().lower()
    name = d.lower_name
    if (name, value) == ("display", "none") or name == "visibility" and value != "visible":
      hides = True
    elif name in ("opacity", "font-size") and re.fullmatch(r"0*(?:\.0*)?(?:[a-z]+|%)?", value):
      hides = True
    elif name == "color" and _INVISIBLE_COLOURS.match(value):
      hides = True
    elif name == "text-transform" and value in ("uppercase", "lowercase", "capitalize"):
      transform = value
    elif name == "font-variant" and "small-caps" in value:
      transform = "uppercase"
  return hides, transform


class _Html:
  """What the open HTML elements do to the text inside them: hide it, or change its case."""

  def __init__(self):
    self.stack: list[tuple[str, str | None, str | None]] = []  # (tag, hides, transform)

  def open(self, tag: str, attrs: list) -> None:
    if tag in _VOID:
      return
    a = {k.lower(): (v or "") for k, v in attrs}
    hides, transform = _style(a["style"]) if "style" in a else (False, None)
    if "hidden" in a or tag in _NEVER_SHOWN or _INVISIBLE_COLOURS.match(a.get("color", "")):
      hides = True
    mode = "hide" if hides else None
    if tag == "details" and "open" not in a:
      mode = mode or "details"  # shows only its summary
    self.stack.append((tag, mode, transform))

  def close(self, tag: str) -> None:
    for i in range(len(self.stack) - 1, -1, -1):
      if self.stack[i][0] == tag:
        del self.stack[i:]
        return

  @property
  def hidden(self) -> bool:
    for i, (_, mode, _) in enumerate(self.stack):
      if mode == "hide":
        return True
      if mode == "details" and not any(t == "summary" for t, _, _ in self.stack[i + 1 :]):
        return True
    return False

  def show(self, text: str) -> str:
    if self.hidden:
      return ""
    transform = next((t for _, _, t in reversed(self.stack) if t), None)
    if transform == "uppercase":
      return text.upper()
    if transform == "lowercase":
      return text.lower()
    if transform == "capitalize":
      return re.sub(r"\b\w", lambda m: m.group(0).upper(), text)
    return text


class _Tags(html.parser.HTMLParser):
  """HTML read into `_Html`'s state; the text it shows (and any tag that names no HTML element,
  as text) collected by `read`."""

  def __init__(self, state: _Html):
    super().__init__(convert_charrefs=True)
    self.state, self.out = state, []

  def handle_starttag(self, tag, attrs):
    if tag not in _ELEMENTS:
      self.out.append(self.state.show(self.get_starttag_text() or ""))
    elif tag == "br":
      self.out.append(self.state.show("\n"))
    else:
      self.state.open(tag, attrs)

  def handle_startendtag(self, tag, attrs):
    if tag not in _ELEMENTS:
      self.out.append(self.state.show(self.get_starttag_text() or ""))

  def handle_endtag(self, tag):
    if tag in _ELEMENTS:
      self.state.close(tag)
    else:
      self.out.append(self.state.show(f"</{tag}>"))

  def handle_data(self, data):
    self.out.append(self.state.show(data))

  def read(self, markup: str) -> str:
    self.out = []
    self.feed(markup)
    self.close()  # flush: an unclosed tag at the end is text
    return "".join(self.out)


# Characters Markdown reads as structure, written by an escape or an entity: literal text, so
# written as a look-alike that no check reads as markup.
_LITERAL = str.maketrans({"*": "\u2217", "_": "\uff3f", "#": "\uff03", "`": "\u02cb"})
_LITERAL_START = {"-": "\u2010", "+": "\u2795", ">": "\u203a", "=": "\u30a0"}


def _literal(text: str, at_line_start: bool) -> str:
  text = text.translate(_LITERAL)
  if at_line_start and text[:1] in _LITERAL_START:
    text = _LITERAL_START[text[0]] + text[1:]
  return text


def _bracketed(children, i: int) -> bool:
  """Is the tag at `i` inside IFEval's title brackets (`<<title>>`): text, not markup?"""
  before = children[i - 1].content if i > 0 else ""
  after = children[i + 1].content if i + 1 < len(children) else ""
  return before.endswith("<") and after.startswith(">")


def _inline(children, html: _Html) -> str:
  out, opened = [], []
  for i, c in enumerate(children):
    if c.type == "html_inline" and _bracketed(children, i):
      out.append(html.show(c.content))
    elif c.type == "text":
      out.append(html.show(c.content))
    elif c.type == "text_special":  # a backslash escape or an entity: literal text
      start = not "".join(out).strip() or "".join(out).endswith("\n")
      out.append(html.show(_literal(c.content, start)))
    elif c.type == "html_inline":
      out.append(_Tags(html).read(_COMMENT.sub("", c.content)))
    elif c.type in ("softbreak", "hardbreak"):
      out.append(html.show("\n"))
    elif c.type in ("em_open", "strong_open"):  # one that starts inside a word styles part of it
      opened.append("".join(out)[-1:].isalnum())  # (`dyn**as**ty` shows one word)
      out.append("" if opened[-1] else html.show(c.markup))
    elif c.type in ("em_close", "strong_close"):
      out.append("" if opened and opened.pop() else html.show(c.markup))
    elif c.type == "code_inline":
      out.append(html.show(f"{c.markup}{c.content}{c.markup}"))
    # an image shows its picture, not its alt text; link_open / link_close: the link's text stays
  return "".join(out)


def _marker(t, depth: int) -> str:
  indent = "  " * depth
  if t.markup in ".)":  # an ordered list item: its number, then its delimiter
    return f"{indent}{t.info}{t.markup} "
  return f"{indent}{t.markup} "


def without_comments(text: str) -> str:
  """The text with its HTML comments removed (an unclosed one hides the rest)."""
  return _COMMENT.sub("", text)


class _Renderer:
  """Markdown-it's block tokens written back as the text a reader sees, one handler per token
  type (a type without one writes nothing: list and quote closings, emphasis is inline)."""

  def __init__(self, lines: list[str]):
    self.lines, self.out, self.depth, self.pending = lines, [], 0, ""
    self.html = _Html()

  def list_open(self, t):
    self.depth += 1

  def list_close(self, t):
    self.depth -= 1
    self.out.append("\n")

  def item(self, t):
    self.pending += _marker(t, self.depth - 1)

  def quote(self, t):
    self.pending += "> "

  def heading(self, t):  # ATX or setext: written as ATX (`## Title`)
    self.pending += "#" * int(t.tag[1]) + " "

  def inline(self, t):
    self.out.append(self.pending + _inline(t.children or [], self.html))
    self.pending = ""

  def block_close(self, t):
    self.out.append("\n" if t.hidden else "\n\n")

  def hr(self, t):
    self.out.append(self.lines[t.map[0]].strip() + "\n\n")

  def fence(self, t):
    self.out.append(f"{self.pending}{t.markup}{t.info}\n{t.content}{t.markup}\n\n")
    self.pending = ""

  def code(self, t):
    self.out.append(t.content + "\n")

  def html_block(self, t):
    shown = _Tags(self.html).read(_COMMENT.sub("", t.content))
    if shown.strip():
      self.out.append(self.pending + shown + "\n")
      self.pending = ""


_HANDLERS = {
  "bullet_list_open": _Renderer.list_open,
  "ordered_list_open": _Renderer.list_open,
  "bullet_list_close": _Renderer.list_close,
  "ordered_list_close": _Renderer.list_close,
  "list_item_open": _Renderer.item,
  "blockquote_open": _Renderer.quote,
  "heading_open": _Renderer.heading,
  "inline": _Renderer.inline,
  "paragraph_close": _Renderer.block_close,
  "heading_close": _Renderer.block_close,
  "hr": _Renderer.hr,
  "fence": _Renderer.fence,
  "code_block": _Renderer.code,
  "html_block": _Renderer.html_block,
}


_OVERRIDE = re.compile("[\u202d\u202e]")


def _displayed(text: str) -> str:
  """Each line with a bidirectional override in the order it displays in."""
  if not _OVERRIDE.search(text):
    return text
  from bidi import get_display  # lazy: only text with an override needs it

  return "\n".join(get_display(ln) if _OVERRIDE.search(ln) else ln for ln in text.split("\n"))


@functools.lru_cache(maxsize=64)
def rendered(text: str) -> str:
  """The text a reader sees, with structural markup kept (see the module docstring); cached, as
  a response's every instruction check and its substance check read the same rendering."""
  source = typeset.prose(text)
  r = _Renderer(source.splitlines())
  for t in _parser().parse(source):
    if t.type in _HANDLERS:
      _HANDLERS[t.type](r, t)
  out = _displayed("".join(r.out))
  out = re.sub(r"[ \t]+\n", "\n", out)
  return re.sub(r"\n{3,}", "\n\n", out).strip()


def warm() -> None:
  """Loads what the shown reading needs: the Markdown parser, pylatexenc, tinycss2, python-bidi."""
  rendered('<span style="display:none">x</span> $\\text{y}$ \u202ez')
