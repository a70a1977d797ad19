"""A response's Markdown as a reader sees it once rendered: what a check may count.

`rendered(text)` parses the text as CommonMark (markdown-it-py) and writes back what a reader
sees, keeping the markup a check reads as structure (heading `#`s, bullet and number markers,
emphasis asterisks, thematic breaks, code fences): HTML comments, link destinations and titles,
image URLs and link reference definitions are dropped (they never render), entities are decoded
(`&#44;` is a comma), backslash escapes resolved, and blocks are separated by one blank line. A
title, keyword, P.S. or end phrase hidden in markup the reader never sees is not there.
"""

from __future__ import annotations

import functools
import re

import markdown_it

_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)


@functools.cache
def _parser() -> markdown_it.MarkdownIt:
  return markdown_it.MarkdownIt("commonmark")


def _inline(children) -> str:
  out = []
  for c in children:
    if c.type in ("text", "html_inline"):
      out.append(_COMMENT.sub("", c.content) if c.type == "html_inline" else c.content)
    elif c.type in ("softbreak", "hardbreak"):
      out.append("\n")
    elif c.type in ("em_open", "em_close", "strong_open", "strong_close"):
      out.append(c.markup)
    elif c.type == "code_inline":
      out.append(f"{c.markup}{c.content}{c.markup}")
    elif c.type == "image":
      out.append(_inline(c.children or []))
    # link_open / link_close: the link's text stays (it is in the children between them)
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
    self.out.append(self.pending + _inline(t.children or []))
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

  def html(self, t):
    shown = _COMMENT.sub("", t.content)
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
  "html_block": _Renderer.html,
}


@functools.lru_cache(maxsize=64)
def rendered(text: str) -> str:
  """The text a reader sees, with structural markup kept (see the module docstring); cached, as
  a response's every instruction check and its substance check read the same rendering."""
  r = _Renderer(text.splitlines())
  for t in _parser().parse(text):
    if t.type in _HANDLERS:
      _HANDLERS[t.type](r, t)
  out = r.out
  text = re.sub(r"[ \t]+\n", "\n", "".join(out))
  return re.sub(r"\n{3,}", "\n\n", text).strip()
