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


@functools.lru_cache(maxsize=64)
def rendered(text: str) -> str:
  """The text a reader sees, with structural markup kept (see the module docstring); cached, as
  a response's every instruction check and its substance check read the same rendering."""
  lines = text.splitlines()
  out: list[str] = []
  depth, pending = 0, ""
  for t in _parser().parse(text):
    if t.type in ("bullet_list_open", "ordered_list_open"):
      depth += 1
    elif t.type in ("bullet_list_close", "ordered_list_close"):
      depth -= 1
      out.append("\n")
    elif t.type == "list_item_open":
      pending += _marker(t, depth - 1)
    elif t.type == "blockquote_open":
      pending += "> "
    elif t.type == "heading_open":  # ATX or setext: written as ATX (`## Title`)
      pending += "#" * int(t.tag[1]) + " "
    elif t.type == "inline":
      out.append(pending + _inline(t.children or []))
      pending = ""
    elif t.type in ("paragraph_close", "heading_close"):
      out.append("\n" if t.hidden else "\n\n")
    elif t.type == "hr":
      out.append(lines[t.map[0]].strip() + "\n\n")
    elif t.type == "fence":
      out.append(f"{pending}{t.markup}{t.info}\n{t.content}{t.markup}\n\n")
      pending = ""
    elif t.type == "code_block":
      out.append(t.content + "\n")
    elif t.type == "html_block":
      shown = _COMMENT.sub("", t.content)
      if shown.strip():
        out.append(pending + shown + "\n")
        pending = ""
  text = re.sub(r"[ \t]+\n", "\n", "".join(out))
  return re.sub(r"\n{3,}", "\n\n", text).strip()
