r"""LaTeX read as typeset: the text a reader sees when the LaTeX is printed.

pylatexenc's LaTeX parser (`latexwalker`) reads the source into nodes; `_Writer` writes them back
as what a reader sees, keeping the structure math comparisons need (`\frac`, `\sqrt`, `^`, groups,
matrices) and dropping what only changes the look:

- spacing (`\,`, `\;`, `\ `, `~`, `\quad`, `\hspace{..}`) is a space; a space between digit groups
  of three (`3\,430`, `1\;000`) joins them;
- fonts and text boxes (`\text`, `\mathrm`, `\mathbf`, `\textbf`, `\operatorname`, `\mbox`,
  `\boxed`) are their content; a bold, hatted or arrowed `i`, `j`, `k` is a unit vector (`\hat{i}`);
- `\left`, `\right` and the `\big` family are the delimiter; `\dfrac`, `\tfrac`, `\cfrac` are
  `\frac`; `\dbinom` is `\binom`; `\ldots`, `\cdots`, `\dots` and `…` are `\ldots`;
- a degree in any spelling (`^\circ`, `^{\circ}`, `\degree`, `\textdegree`, `\ang{..}`, `℃`) is
  `°`; `\langle a, b\rangle` is `(a, b)`; `\pmod{7}` is ` (mod 7)`, `\bmod` is ` mod `;
- siunitx: `\SI{3}{\meter\per\second}`, `\qty{300}{W}`, `\num{1.2e3}`, `\si{\kilo\gram}` are the
  number and the unit as printed (`3 m/s`, `300 W`, `1.2\times10^{3}`, `kg`);
- `\phantom` and text coloured invisible (`\textcolor{white}{..}`, `{\color{white} ..}`) show
  nothing; `\char"2C` is the character it prints;
- a system in an environment (`cases`, `aligned`, `align`, `array`, ...) is its rows joined by
  `, ` without the alignment marks; matrices keep their environment.

Two answers that typeset to the same text are the same answer (`same`). `answer(text)` is the
typeset reading of a math answer (math delimiters dropped); `prose(text)` typesets only the LaTeX
inside prose (math spans and runs of macros) and leaves the rest as written. Unparsable input is
returned as written.
"""

from __future__ import annotations

import functools
import re

# siunitx's units and prefixes as printed
_SI_UNITS = {
  "metre": "m", "meter": "m", "second": "s", "gram": "g", "kilogram": "kg", "ampere": "A",
  "kelvin": "K", "mole": "mol", "candela": "cd", "hertz": "Hz", "newton": "N", "pascal": "Pa",
  "joule": "J", "watt": "W", "coulomb": "C", "volt": "V", "farad": "F", "ohm": "Ω",
  "siemens": "S", "weber": "Wb", "tesla": "T", "henry": "H", "lumen": "lm", "lux": "lx",
  "becquerel": "Bq", "gray": "Gy", "sievert": "Sv", "katal": "kat", "degreeCelsius": "°C",
  "celsius": "°C", "litre": "L", "liter": "L", "electronvolt": "eV", "minute": "min",
  "hour": "h", "day": "d", "degree": "°", "radian": "rad", "steradian": "sr", "percent": "%",
  "bar": "bar", "angstrom": "Å", "dalton": "Da", "tonne": "t", "hectare": "ha", "bel": "B",
  "decibel": "dB", "astronomicalunit": "au", "atomicmassunit": "u", "mmHg": "mmHg",
}  # fmt: skip
_SI_PREFIXES = {
  "yocto": "y", "zepto": "z", "atto": "a", "femto": "f", "pico": "p", "nano": "n",
  "micro": "µ", "milli": "m", "centi": "c", "deci": "d", "deca": "da", "deka": "da",
  "hecto": "h", "kilo": "k", "mega": "M", "giga": "G", "tera": "T", "peta": "P", "exa": "E",
}  # fmt: skip
_SPACES = {",", ";", ":", " ", ">", "quad", "qquad", "enspace", "enskip", "thinspace",
           "medspace", "thickspace", "space", "nobreakspace"}  # fmt: skip
_NOTHING = {"!", "negthinspace", "negmedspace", "negthickspace", "displaystyle", "textstyle",
            "scriptstyle", "scriptscriptstyle", "limits", "nolimits", "mathstrut", "strut",
            "left", "right", "middle", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl",
            "Bigr", "biggl", "biggr", "Biggl", "Biggr", "bigm", "Bigm", "nonumber", "notag",
            "centering", "small", "footnotesize", "large", "Large", "normalsize"}  # fmt: skip
_FONTS = {"text", "textrm", "textnormal", "textbf", "textit", "textsf", "texttt", "textup",
          "textmd", "textsl", "emph", "mathrm", "mathbf", "mathit", "mathsf", "mathtt",
          "mathnormal", "boldsymbol", "bm", "pmb", "mbox", "hbox", "operatorname", "boxed",
          "fbox", "framebox", "ensuremath", "underline", "mathop", "textsuperscript",
          "colorbox", "mathbin", "mathrel", "mathord"}  # fmt: skip
_BOLD = {"mathbf", "boldsymbol", "bm", "pmb", "textbf", "vec", "hat", "overrightarrow", "widehat"}
_WORD = {"ldots": r"\ldots ", "dots": r"\ldots ", "cdots": r"\ldots ", "dotsc": r"\ldots ",
         "dotsb": r"\ldots ", "dotso": r"\ldots ", "textellipsis": r"\ldots ", "degree": "°",
         "textdegree": "°", "celsius": "°C", "degreeCelsius": "°C", "langle": "(", "rangle": ")",
         "lbrace": r"\{", "rbrace": r"\}", "lbrack": "[", "rbrack": "]", "lvert": "|",
         "rvert": "|", "vert": "|", "lVert": r"\|", "rVert": r"\|", "leq": r"\le ",
         "leqslant": r"\le ", "le": r"\le ", "geq": r"\ge ", "geqslant": r"\ge ", "ge": r"\ge ",
         "lt": "<", "gt": ">", "neq": r"\ne ", "ne": r"\ne ", "bmod": " mod ",
         "imath": "i", "jmath": "j", "%": r"\%", "$": r"\$", "&": "&", "#": "#", "_": "_",
         "textbackslash": "\\", "{": r"\{", "}": r"\}", "\\": ", ", "newline": ", ",
         "cr": ", "}  # fmt: skip
_INVISIBLE = {"white", "transparent", "none", "White"}
_SYSTEMS = {"cases", "dcases", "rcases", "aligned", "align", "align*", "alignat", "alignat*",
            "alignedat", "gather", "gather*", "gathered", "split", "eqnarray", "eqnarray*",
            "array", "equation", "equation*", "displaymath", "math", "subequations",
            "center", "flalign", "flalign*", "multline", "multline*"}  # fmt: skip
_THIN = "\u2009"  # a space written by a spacing command (joins digit groups)
_SIZED = "\x00"  # where `\left`, `\right` or a `\big` stood


@functools.cache
def _context():
  from pylatexenc import latexwalker, macrospec  # lazy: loaded in the verifier pool process

  m, e = macrospec.MacroSpec, macrospec.EnvironmentSpec
  macros = [m(n, "{{") for n in ("frac", "dfrac", "tfrac", "cfrac", "binom", "dbinom", "tbinom")]
  macros += [m(n, "{") for n in _FONTS | _BOLD | {"phantom", "hphantom", "vphantom", "pmod"}]
  macros += [m(n, "{") for n in ("mod", "pod", "hspace", "vspace", "hspace*", "color", "unit")]
  macros += [m("sqrt", "[{"), m("textcolor", "[{{"), m("SI", "[{[{"), m("qty", "[{{")]
  macros += [m("si", "[{"), m("num", "[{"), m("ang", "[{"), m("tothe", "{"), m("raiseto", "{")]
  macros += [m("overline", "{"), m("dot", "{"), m("SIrange", "[{{{"), m("qtyrange", "[{{{")]
  envs = [e("array", "[{"), e("alignat", "{"), e("alignat*", "{"), e("alignedat", "{")]
  db = latexwalker.get_default_latex_context_db()
  db.add_context_category("typeset", prepend=True, macros=macros, environments=envs)
  return latexwalker, db


_CHAR = re.compile(r"\\char\s*(?:\"([0-9A-Fa-f]+)|'([0-7]+)|`\\?(.)|(\d+))")
_PERCENT = re.compile(r"(?<!\\)%")


def _char(m: re.Match) -> str:
  if m.group(3):
    return m.group(3)
  if m.group(1) or m.group(2):
    code = int(m.group(1), 16) if m.group(1) else int(m.group(2), 8)
  else:
    code = int(m.group(4))
  c = chr(code) if 0 < code < 0x110000 else ""
  return "\\" + c if c in "{}%$&#_\\" else c


class _Writer:
  """Writes a node list back as the text a reader sees (see the module docstring)."""

  def __init__(self, lw):
    self.lw = lw

  def nodes(self, nodes) -> str:
    out, hidden = [], False
    for i, n in enumerate(nodes or []):
      if isinstance(n, self.lw.LatexMacroNode) and n.macroname == "color":
        hidden = self.arg_text(n, 0).strip() in _INVISIBLE  # a switch: to the group's end
        continue
      if hidden:
        continue
      if isinstance(n, self.lw.LatexGroupNode) and (n.delimiters or ("{",))[0] == "{":
        out.append(self.group(n, "".join(out[-1:]).rstrip()[-1:] in ("^", "_")))
        continue
      out.append(self.node(n, nodes[i + 1] if i + 1 < len(nodes) else None))
    return "".join(out)

  def group(self, n, script: bool) -> str:
    """Braces print nothing: a group is its content, but for a superscript's or subscript's
    (`10^{-3}`) and the digit-group comma `{,}`."""
    inner = self.nodes(n.nodelist)
    return f"{{{inner}}}" if script or inner == "," else inner

  def node(self, n, following) -> str:
    lw = self.lw
    if isinstance(n, lw.LatexCharsNode):
      return n.chars.replace("…", r"\ldots ").replace("⟨", "(").replace("⟩", ")")
    if isinstance(n, lw.LatexGroupNode):
      inner = self.nodes(n.nodelist)
      o, c = n.delimiters if n.delimiters else ("{", "}")
      return f"{o}{inner}{c}" if o == "{" and inner.strip() not in ("", "°") else inner
    if isinstance(n, lw.LatexMathNode):
      return self.nodes(n.nodelist)
    if isinstance(n, lw.LatexEnvironmentNode):
      return self.environment(n)
    if isinstance(n, lw.LatexMacroNode):
      return self.macro(n, following)
    if isinstance(n, lw.LatexSpecialsNode):
      return {"~": _THIN, "&": " & "}.get(n.specials_chars, n.specials_chars)
    return ""  # comments

  def arg(self, n, k):
    args = n.nodeargd.argnlist if n.nodeargd else []
    return args[k] if k < len(args) else None

  def arg_text(self, n, k) -> str:
    a = self.arg(n, k)
    if a is None:
      return ""
    return self.nodes(a.nodelist) if isinstance(a, self.lw.LatexGroupNode) else self.node(a, None)

  def macro(self, n, following) -> str:
    name = n.macroname
    if name.startswith(("big", "Big")):
      name = "left"
    handler = _MACROS.get(name)
    if handler is not None:
      return handler(self, n)
    return _WORD[name] if name in _WORD else self.unknown(n)

  def fraction(self, n) -> str:
    kind = "frac" if "frac" in n.macroname else "binom"
    return f"\\{kind}{{{self.arg_text(n, 0)}}}{{{self.arg_text(n, 1)}}}"

  def root(self, n) -> str:
    index = self.arg_text(n, 0)
    return f"\\sqrt{'[' + index + ']' if index else ''}{{{self.arg_text(n, 1)}}}"

  def font(self, n) -> str:
    name, inner = n.macroname, self.arg_text(n, 0)
    if name in _BOLD and inner.strip() in ("i", "j", "k"):
      return f"\\hat{{{inner.strip()}}}"  # a unit vector
    return inner if name in _FONTS else f"\\{name}{{{inner}}}"

  def coloured(self, n) -> str:
    return "" if self.arg_text(n, 1).strip() in _INVISIBLE else self.arg_text(n, 2)

  def modulus(self, n) -> str:
    if n.macroname == "mod":
      return " mod " + self.arg_text(n, 0)
    return f" (mod {self.arg_text(n, 0).strip()})"

  def si_range(self, n) -> str:
    unit = self.si_unit(self.arg(n, 3))
    low, high = self.si_number(self.arg_text(n, 1)), self.si_number(self.arg_text(n, 2))
    return f"{low} {unit} to {high} {unit}"

  def unknown(self, n) -> str:
    args = n.nodeargd.argnlist if n.nodeargd else []
    parts = []
    for a in args:
      if a is None:
        continue
      if isinstance(a, self.lw.LatexGroupNode):
        o, c = a.delimiters or ("{", "}")
        parts.append(f"{o}{self.nodes(a.nodelist)}{c}")
      else:
        parts.append("{" + self.node(a, None) + "}")
    name = n.macroname
    space = " " if name.isalpha() and not parts else ""
    return f"\\{name}{''.join(parts)}{space}"

  def siunitx(self, n) -> str:
    name = n.macroname
    if name in ("si", "unit"):
      return self.si_unit(self.arg(n, 1))
    if name == "num":
      return self.si_number(self.arg_text(n, 1))
    if name == "ang":
      parts = [p.strip() for p in self.arg_text(n, 1).split(";")]
      return f"{parts[0] or 0}°" if len(parts) == 1 else "°".join(parts) + "°"
    number = self.si_number(self.arg_text(n, 1))
    unit = self.si_unit(self.arg(n, 3 if name == "SI" else 2))
    return f"{number} {unit}".strip()

  @staticmethod
  def si_number(text: str) -> str:
    s = text.strip().replace(" ", "")
    m = re.fullmatch(r"([+-]?[\d.,]+)[eE]([+-]?\d+)", s)
    return f"{m.group(1)}\\times10^{{{int(m.group(2))}}}" if m else s

  def si_unit(self, arg) -> str:
    """siunitx's unit macros as printed: prefixes, `\\per`, powers."""
    if arg is None:
      return ""
    nodes = arg.nodelist if isinstance(arg, self.lw.LatexGroupNode) else [arg]
    unit = _Units()
    for node in nodes:
      if isinstance(node, self.lw.LatexMacroNode):
        unit.macro(node.macroname, lambda node=node: self.arg_text(node, 0).strip())
      elif text := self.node(node, None).strip():
        unit.out.append(text.replace(".", " ").replace("~", " "))
    return " ".join(unit.out).replace(" /", "/")

  def environment(self, n) -> str:
    name = n.environmentname
    inner = self.nodes(n.nodelist)
    if name in _SYSTEMS:
      rows = [r.replace(" & ", " ").strip() for r in inner.split(", ")]
      return ", ".join(r for r in rows if r)
    body = inner.replace(", ", r" \\ ")  # a matrix keeps its rows and environment
    return f"\\begin{{{name}}}{body}\\end{{{name}}}"


class _Units:
  """siunitx's unit macros read in order: a prefix or a power waits for its unit."""

  def __init__(self):
    self.out, self.prefix, self.per, self.power = [], "", False, ""

  def macro(self, name: str, argument) -> None:
    if name in _SI_PREFIXES:
      self.prefix += _SI_PREFIXES[name]
    elif name == "per":
      self.per = True
    elif name in ("square", "cubic"):
      self.power = "2" if name == "square" else "3"
    elif name in ("squared", "cubed", "tothe") and self.out:
      self.out[-1] += "^{%s}" % ({"squared": "2", "cubed": "3"}.get(name) or argument())
    elif name in _SI_UNITS:
      power = f"^{{{self.power}}}" if self.power else ""
      self.out.append(("/" if self.per else "") + self.prefix + _SI_UNITS[name] + power)
      self.prefix, self.per, self.power = "", False, ""
    else:
      self.out.append(_WORD.get(name, "\\" + name))


def _constant(text: str):
  return lambda writer, n: text


_MACROS = {
  **{name: _constant(_THIN) for name in _SPACES | {"hspace", "hspace*"}},
  # the delimiter after `\\left`, `\\right` or a `\\big` is printed; `.` is the empty one
  **{name: _constant(_SIZED) for name in ("left", "right", "middle")},
  **{name: _constant("") for name in _NOTHING | {"phantom", "hphantom", "vphantom", "vspace"}},
  **{name: _Writer.fraction for name in ("frac", "dfrac", "tfrac", "cfrac")},
  **{name: _Writer.fraction for name in ("binom", "dbinom", "tbinom")},
  **{name: _Writer.font for name in _BOLD | _FONTS},
  **{name: _Writer.modulus for name in ("pmod", "pod", "mod")},
  **{name: _Writer.siunitx for name in ("SI", "qty", "num", "si", "unit", "ang")},
  **{name: _Writer.si_range for name in ("SIrange", "qtyrange")},
  "sqrt": _Writer.root,
  "textcolor": _Writer.coloured,
  "circ": _constant("°"),
}
_GROUPS = re.compile(rf"(?<![\d.])\d{{1,3}}(?:{_THIN}\d{{3}})+(?![\d])")
_DEGREE = re.compile(r"\^\s*°|\^\s*\{\s*°\s*\}")


def _parse(text: str) -> str:
  lw, db = _context()
  source = _PERCENT.sub(r"\\%", _CHAR.sub(_char, text))
  try:
    nodes, _, _ = lw.LatexWalker(source, latex_context=db, tolerant_parsing=True).get_latex_nodes()
  except Exception:  # noqa: BLE001 - a parser failure leaves the text as written
    return text
  return _Writer(lw).nodes(nodes)


@functools.lru_cache(maxsize=1 << 14)
def answer(text: str) -> str:
  """A math answer as typeset (see the module docstring): math delimiters dropped, spacing one
  space, digit groups joined, degrees `°`."""
  s = text.replace("℃", "°C").replace("℉", "°F")
  if "\\" in s or "$" in s or "~" in s or "{" in s or "…" in s or "⟨" in s:
    s = _parse(s)
  s = re.sub(f"{_SIZED}\\s*\\.", "", s).replace(_SIZED, "")
  if s.lstrip().startswith("\\{") and "\\}" not in s:  # the brace that opens a system
    s = s.lstrip()[2:]
  s = _GROUPS.sub(lambda m: m.group(0).replace(_THIN, ""), s)
  s = _DEGREE.sub("°", s.replace(_THIN, " "))
  s = re.sub(r"\s*°", "°", s)
  return re.sub(r"[ \t]+", " ", s).strip()


def same(a: str, b: str) -> bool:
  """Do two answers typeset to the same text (spaces aside)?"""
  return re.sub(r"\s+", "", answer(a)) == re.sub(r"\s+", "", answer(b))


# LaTeX inside prose: math spans, and runs of control words with their brace arguments
_BRACES = r"\{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\}"
_LATEX = re.compile(
  r"\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<![\\$])\$(?!\s)[^$\n]+?(?<!\s)\$"
  rf"|\{{\s*\\[A-Za-z]+(?:[^{{}}]|{_BRACES})*\}}"
  rf"|(?:\\(?:[A-Za-z]+\*?|char\s*(?:\"[0-9A-Fa-f]+|'[0-7]+|`\\?.|\d+))\s*(?:\[[^\]\n]*\])?(?:{_BRACES})*)+",
  re.S,
)


@functools.lru_cache(maxsize=256)
def prose(text: str) -> str:
  """Prose with the LaTeX in it typeset (`\\text{dyn}\\text{asty}` is `dynasty`, `\\phantom{..}`
  shows nothing, `$\\char"2C$` is a comma); everything else as written."""
  if "\\" not in text and "$" not in text:
    return text

  def one(m: re.Match) -> str:
    return _parse(m.group(0)).replace(_THIN, " ")

  return _LATEX.sub(one, text).replace(_SIZED, "")


def warm() -> None:
  """Loads pylatexenc's parser and its context (before the pool forks its children)."""
  answer(r"\dfrac{1}{2}")
