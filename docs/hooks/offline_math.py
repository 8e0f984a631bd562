"""MkDocs build hook: serve MathJax from the site itself, so that the mathematics renders offline.

The MathJax 3 distribution comes from the ``django-static-mathjax`` package of the ``docs`` /
``dev`` extras (a plain copy of MathJax's ``es5/`` build, Apache-2.0, no dependencies; the
package imports as ``mathjax``).  At build time this hook copies the parts a page needs
(the TeX-to-SVG component and the lazily loaded menu, accessibility and TeX-extension
modules) into ``assets/mathjax/`` of the site; ``mkdocs.yml`` loads
``assets/mathjax/tex-svg.js`` from there.  SVG output draws the glyphs as paths, so there
are no web fonts to fetch either.  Nothing is fetched from the network, at build
time or when a page is read.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterator

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

TARGET = "assets/mathjax"
# what tex-svg.js loads: itself, then (on demand) the menu, the a11y modules, TeX extensions
PARTS = ("tex-svg.js", "ui", "a11y", "input/tex/extensions")


def mathjax_root() -> Path:
    """The ``es5/`` folder of the installed MathJax distribution."""
    spec = importlib.util.find_spec("mathjax")
    root = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if root is None or not (root / "tex-svg.js").is_file():
        raise PluginError("MathJax is not installed: pip install -e '.[docs]' (it brings django-static-mathjax, "
                          "whose 'mathjax' package holds the MathJax 3 files the site serves)")
    return root


def mathjax_files(root: Path) -> Iterator[Path]:
    """The files of ``root`` that the site serves, as paths relative to ``root``."""
    for part in PARTS:
        path = root / part
        if path.is_file():
            yield Path(part)
        else:
            yield from (p.relative_to(root) for p in sorted(path.rglob("*")) if p.is_file())


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = mathjax_root()
    for rel in mathjax_files(root):
        files.append(File.generated(config, f"{TARGET}/{rel.as_posix()}", abs_src_path=str(root / rel)))
    return files
