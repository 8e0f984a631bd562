r"""MkDocs build hook: navigation and table-of-contents titles show math as plain text.

A heading such as ``# Flows in the charts \(\mu\) and \(\theta\)`` renders as math in the
page body, but the navigation, the table of contents and the browser tab show a title's
*text*, where MathJax never runs: they would show ``\(\mu\)``.  This hook rewrites those
titles (``page.title`` and every entry of ``page.toc``) with :func:`tex_to_text`, which turns
the inline math of a title into Unicode (``μ``, ``θ``, ``ε``, ``‖``, sub/superscripts).
The gallery hook uses the same function for the titles it adds to the navigation.
"""
from __future__ import annotations

import re
from typing import Any

_SYMBOLS = {
    r"\varepsilon": "ε", r"\epsilon": "ε", r"\alpha": "α", r"\beta": "β", r"\gamma": "γ", r"\delta": "δ",
    r"\eta": "η", r"\theta": "θ", r"\lambda": "λ", r"\mu": "μ", r"\nu": "ν", r"\pi": "π", r"\rho": "ρ",
    r"\sigma": "σ", r"\tau": "τ", r"\phi": "φ", r"\varphi": "φ", r"\psi": "ψ", r"\chi": "χ", r"\xi": "ξ",
    r"\omega": "ω", r"\Sigma": "Σ", r"\Delta": "Δ", r"\Gamma": "Γ", r"\Theta": "Θ", r"\Lambda": "Λ",
    r"\Omega": "Ω", r"\nabla": "∇", r"\partial": "∂", r"\|": "‖", r"\to": "→", r"\mapsto": "↦",
    r"\times": "×", r"\otimes": "⊗", r"\cdot": "·", r"\approx": "≈", r"\le": "≤", r"\ge": "≥",
    r"\infty": "∞", r"\sharp": "♯", r"\flat": "♭", r"\in": "∈", r"\top": "ᵀ",
}
_SUB = str.maketrans("0123456789+-=()aeijklmnoprstuvx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ")
_SUP = str.maketrans("0123456789+-=()inTt", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿᵀᵗ")
_INLINE = re.compile(r"\\\((.+?)\\\)|:math:`([^`]+)`|\$([^$]+)\$")
_COMMAND = re.compile(r"\\[A-Za-z]+|\\\|")
_WRAPPER = re.compile(r"\\(?:mathrm|mathbf|mathit|operatorname|text|mathcal|boldsymbol)\s*\{([^{}]*)\}")
_SCRIPT = re.compile(r"([_^])(\{[^{}]*\}|.)")


def _math_to_text(tex: str) -> str:
    text = _WRAPPER.sub(r"\1", tex)
    text = _COMMAND.sub(lambda m: _SYMBOLS.get(m.group(0), m.group(0).lstrip("\\")), text)

    def script(m: re.Match) -> str:
        body = m.group(2).strip("{}")
        table = _SUB if m.group(1) == "_" else _SUP
        converted = body.translate(table)
        # a character without a Unicode sub/superscript keeps the plain form
        return converted if all(c != o or c in " ," for c, o in zip(converted, body)) else m.group(1) + body
    text = _SCRIPT.sub(script, text)
    return text.replace("{", "").replace("}", "").replace("\\", "")


def tex_to_text(title: str) -> str:
    r"""``title`` with every inline math span (``\(..\)``, ``:math:`..```, ``$..$``) as Unicode text."""
    return _INLINE.sub(lambda m: _math_to_text(next(g for g in m.groups() if g is not None)), title)


def _plain_toc(items: Any) -> None:
    for item in items:
        item.title = tex_to_text(item.title)
        _plain_toc(item.children)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Runs after the page's TOC is built and before the nav and the templates read the titles."""
    if page.title:
        page.title = tex_to_text(page.title)
    _plain_toc(page.toc)
    return html
