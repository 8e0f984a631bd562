r"""Griffe extension: render the reStructuredText of infogeo's docstrings as Markdown.

The docstrings are numpy-style and use Sphinx roles for mathematics and cross-references
(``:math:`\psi```, ``.. math::``, ``:class:`~infogeo.geometry.metric.Metric```, double
backticks).  mkdocstrings renders docstrings as Markdown, so before they are parsed this
extension rewrites

* ``:math:`x``` into inline arithmatex math ``\(x\)``, and ``.. math:: x`` (with its
  indented continuation lines) into a display block ``$$ x $$``;
* ``:class:`` / ``:func:`` / ``:meth:`` / ``:mod:`` / ``:attr:`` / ``:exc:`` roles into
  *optional* autorefs links: a link where the target is documented, plain code otherwise
  (Python's and torch's own objects are not in this site);
* interactive examples (runs of ``>>>`` / ``...`` lines and their output) into fenced
  ``pycon`` code blocks, without their ``# doctest:`` directives;
* double backticks into single ones, and a paragraph's closing ``::`` (an RST literal-block
  marker) into ``:``;

and it shows a factory class's ``__new__`` signature as its constructor (see
:func:`_constructor_from_new`) and the signature's defaults in the parameter tables (see
:func:`_signature_defaults`).

Only the docstring text changes; the source files are untouched.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import griffe

_INLINE_MATH = re.compile(r":math:`([^`]+)`")
_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|attr|exc|obj|data):`(~?)([^`]+)`")
_DOUBLE_TICKS = re.compile(r"``([^`]+)``")
_LITERAL_MARKER = re.compile(r"(\S)::$", re.MULTILINE)
_PROMPT = re.compile(r"^(\s*)>>> ")
_DOCTEST_DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")


def _doctest_blocks(text: str) -> str:
    """Fence each run of ``>>>`` lines (with continuation and output lines, up to a blank line) as code.

    Unfenced, Markdown reads ``>>>`` as three nested quotes and joins the lines into one
    paragraph.  The ``# doctest: +SKIP`` directives are for the test runner, not the reader.
    """
    lines = text.split("\n")
    out: list = []
    i = 0
    while i < len(lines):
        m = _PROMPT.match(lines[i])
        if not m or (out and out[-1].strip().startswith("```")):
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(_DOCTEST_DIRECTIVE.sub("", lines[i][len(indent):] if lines[i].startswith(indent) else lines[i]))
            i += 1
        if out and out[-1].strip() and not re.fullmatch(r"\s*-+", out[-1]):  # not right under a section header
            out.append("")
        out.extend([f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"])
    return "\n".join(out)


def _display_math(text: str) -> str:
    """``.. math:: body`` plus its more-indented continuation lines -> display math.

    At the left margin this is a ``$$`` block.  An indented one sits inside a list item, where
    Markdown would need four-space indentation to keep a block in the item; there it becomes
    inline display math joined to the item's paragraph (the blank lines around it dropped).
    """
    lines = text.split("\n")
    out: list = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)\.\. math::\s*(.*)$", line)
        if not m:
            out.append(line)
            i += 1
            continue
        indent, body = m.group(1), [m.group(2)] if m.group(2) else []
        i += 1
        while i < len(lines) and lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) > len(indent):
            body.append(lines[i].strip())
            i += 1
        if not indent:
            out.extend(["$$", *body, "$$"])
            continue
        while out and not out[-1].strip():
            out.pop()
        out.append(f"{indent}\\(\\displaystyle {' '.join(body)}\\)")
        while i < len(lines) and not lines[i].strip():
            i += 1
    return "\n".join(out)


def _resolve(target: str, obj: griffe.Object) -> str:
    """A role's target as an absolute dotted path (relative ``.name`` targets resolved from ``obj``'s module)."""
    target = target.rstrip("()")
    if target.startswith("."):
        module = obj.module if not obj.is_module else obj
        base = module.path if module.is_package else module.path.rsplit(".", 1)[0]
        dots = len(target) - len(target.lstrip("."))
        for _ in range(dots - 1):
            base = base.rsplit(".", 1)[0]
        return f"{base}.{target.lstrip('.')}"
    if "." not in target:  # a bare name: look it up next to the object
        scope = obj if obj.is_class or obj.is_module else obj.parent
        while scope is not None:
            if target in scope.members:
                return f"{scope.path}.{target}"
            scope = scope.parent
    return target


def convert(text: str, role: Callable[[str, bool], str]) -> str:
    """RST math, roles, double backticks and literal markers as Markdown.

    ``role(target, short)`` renders a cross-reference role (``short`` for a ``~`` target).
    """
    text = _display_math(text)
    text = _INLINE_MATH.sub(lambda m: rf"\({m.group(1)}\)", text)
    text = _ROLE.sub(lambda m: role(m.group(3), m.group(2) == "~"), text)
    text = _DOUBLE_TICKS.sub(r"`\1`", text)
    return _doctest_blocks(_LITERAL_MARKER.sub(r"\1:", text))


def rst_to_markdown(text: str, obj: griffe.Object) -> str:
    """The Markdown version of one docstring of ``obj`` (see the module docstring for the rules)."""
    def role(target: str, short: bool) -> str:
        path = _resolve(target, obj)
        title = path.rsplit(".", 1)[-1] if short else target.lstrip(".")
        return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'
    return convert(text, role)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def _constructor_from_new(cls: griffe.Class) -> None:
    """Give a class whose constructor is its own ``__new__`` (a factory such as ``Gaussian``) that signature.

    Griffe takes a class's signature from ``__init__`` only, so such a class would be shown
    with an inherited ``__init__``'s parameters, and its documented parameters flagged as
    unknown.  A synthetic ``__init__`` with ``__new__``'s parameters (``cls`` -> ``self``)
    makes the page show what ``Cls(...)`` really accepts.
    """
    new = cls.members.get("__new__")
    if new is None or new.is_alias or "__init__" in cls.members or not new.is_function:
        return
    params = [griffe.Parameter("self", kind=p.kind) if i == 0 else p for i, p in enumerate(new.parameters)]
    init = griffe.Function("__init__", parameters=griffe.Parameters(*params), returns="None",
                           lineno=new.lineno, endlineno=new.endlineno)
    cls.set_member("__init__", init)


def _signature_defaults(obj: griffe.Object) -> None:
    """Show each documented parameter's default from the signature, the value the code really uses.

    The numpy parser takes a default from the braces of a choice type (its first entry) and,
    for a line documenting several parameters (``a, b : float``), gives them all the first
    one's default; the signature is authoritative.  Parsing here caches the sections that
    mkdocstrings renders (same parser and options, set when the package was loaded).
    """
    if obj.docstring is None or obj.docstring.parser is None:
        return
    try:
        params = obj.parameters  # type: ignore[union-attr]
    except (AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return
    for section in obj.docstring.parsed:
        if section.kind is griffe.DocstringSectionKind.parameters:
            for item in section.value:
                if item.name in params:
                    item.value = params[item.name].default


class RstRoles(griffe.Extension):
    """Rewrite every docstring of a package once it is fully loaded (so bare names can be looked up)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:  # noqa: D102
        for obj in _walk(pkg):
            if obj.is_class:
                _constructor_from_new(obj)
            if obj.docstring is not None:
                obj.docstring.value = rst_to_markdown(obj.docstring.value, obj)
                if obj.is_function or obj.is_class:
                    _signature_defaults(obj)
