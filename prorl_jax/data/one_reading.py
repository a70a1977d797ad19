"""Ways to meet an instruction in one reading only, generated: text in the characters that no
reader of the rendered response sees (`hidden`: hidden HTML, CSS, collapsed details, alt text,
comments, `\\phantom`, white LaTeX), and text a reader sees that the characters never spell
(`shown_only_word`, `shown_only_comma`: split by LaTeX or markup, entity-encoded, stored
reversed under a bidirectional override; `restyled_upper`: CSS capitals), and Markdown structure
typed as escaped literals (`escaped_markup`). The instruction-following reward judges both
readings (`rewards.ifeval.readings`), so every one of these is refused; the tests generate them
for each instruction."""

from __future__ import annotations

# Where text is in the characters but not shown: each wraps `s` (Markdown with inline HTML and
# LaTeX, as a response writes it). A reader of the rendered response sees none of it.
HIDDEN = {
  "display:none": '<span style="display:none">{s}</span>',
  "visibility:hidden": '<span style="visibility: hidden">{s}</span>',
  "opacity:0": '<span style="opacity:0">{s}</span>',
  "font-size:0": '<span style="font-size:0px">{s}</span>',
  "white text": '<span style="color:#FFFFFF">{s}</span>',
  "font color": '<font color="white">{s}</font>',
  "hidden attribute": "\n\n<div hidden>\n{s}\n</div>\n\n",
  "collapsed details": "\n\n<details><summary>Notes</summary>{s}</details>\n\n",
  "template": "<template>{s}</template>",
  "script": "<script>/* {s} */</script>",
  "style": "<style>/* {s} */</style>",
  "alt text": '<img src="chart.png" alt="{s}">',
  "markdown alt text": "![{s}](chart.png)",
  "html comment": "<!-- {s} -->",
  "phantom": "$\\phantom{{\\text{{{s}}}}}$",
  "latex white": "{{\\color{{white}} {s}}}",
  "textcolor white": "\\textcolor{{white}}{{{s}}}",
  "link destination": "[see](https://example.com/{u})",
}


def hidden(s: str) -> dict[str, str]:
  """`s` in every place of HIDDEN."""
  return {k: v.format(s=s, u=s.replace(" ", "_")) for k, v in HIDDEN.items()}


def shown_only_word(word: str) -> dict[str, str]:
  """`word` as a reader sees it, typed so that its characters never spell it: split by LaTeX,
  markup or emphasis, entity-encoded, stored reversed under a bidirectional override."""
  a, b = word[: len(word) // 2], word[len(word) // 2 :]
  return {
    "two text boxes": f"$\\text{{{a}}}\\text{{{b}}}$",
    "latex outside math": f"\\text{{{a}}}\\text{{{b}}}",
    "empty tag": f"{a}<b></b>{b}",
    "bold inside": f"{a}**{b[:2]}**{b[2:]}" if len(b) > 2 else f"{a}**{b}**",
    "entity": f"&#{ord(word[0])};{word[1:]}",
    "reversed": f"\u202e{word[::-1]}\u202c",
    "tag inside": f"{a}<span>{b}</span>",
  }


def shown_only_comma() -> dict[str, str]:
  """A comma a reader sees, typed without a comma character."""
  return {
    "char": '$\\char"2C$',
    "entity": "&#44;",
    "named entity": "&comma;",
    "combining comma below": "\u0326",
  }


def restyled_upper(text: str) -> dict[str, str]:
  """Lower-case text that a reader sees in capitals (CSS)."""
  return {
    "text-transform": f'<span style="text-transform:uppercase">{text}</span>',
    "small caps": f'<span style="font-variant: small-caps">{text}</span>',
    "block transform": f'<div style="text-transform: uppercase">\n{text}\n</div>',
  }


def escaped_markup(items: list[str]) -> dict[str, str]:
  """Markdown structure typed as escaped literal characters: no reader sees bullets, highlights
  or a divider."""
  return {
    "escaped bullets": "\n".join(f"\\* {x}" for x in items),
    "entity bullets": "\n".join(f"&ast; {x}" for x in items),
    "escaped dash bullets": "\n".join(f"\\- {x}" for x in items),
    "escaped highlights": " ".join(f"\\*{x}\\*" for x in items),
    "entity highlights": " ".join(f"&ast;{x}&ast;" for x in items),
  }
