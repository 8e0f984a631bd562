"""Loading contributed statistical manifolds (the top-level ``manifolds/`` folder).

Each contributed file is a Python module written against infogeo's public API
that defines ``make(**kwargs) -> Manifold``.  :func:`load_manifold` finds a file
by name (``"beta"`` -> ``beta.py``) or takes a path to one.  Names are looked up,
in order, in the folders of the ``INFOGEO_MANIFOLDS_PATH`` environment variable
(``os.pathsep``-separated), in ``manifolds/`` next to the package's source tree,
and in ``<sys.prefix>/share/infogeo/manifolds`` (installed data).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any, List

logger = logging.getLogger(__name__)

ENV_VAR = "INFOGEO_MANIFOLDS_PATH"

__all__ = ["load_manifold", "manifold_search_path", "available_manifolds"]


def manifold_search_path() -> List[Path]:
    """Folders searched for contributed manifolds, in order."""
    paths = [Path(p) for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    paths.append(Path(__file__).resolve().parents[2] / "manifolds")  # src/infogeo/contrib.py -> repo root
    paths.append(Path(sys.prefix) / "share" / "infogeo" / "manifolds")
    return paths


def available_manifolds() -> List[str]:
    """Names of the contributed manifolds found on the search path."""
    names = set()
    for folder in manifold_search_path():
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    return sorted(names)


def _find(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".py" or os.sep in str(name_or_path):
        if not p.is_file():
            raise FileNotFoundError(f"no manifold file at {p}")
        return p
    if not name_or_path.isidentifier():
        raise ValueError(f"a manifold name must be an identifier such as 'beta', got {name_or_path!r}")
    for folder in manifold_search_path():
        cand = folder / f"{name_or_path.lower()}.py"
        if cand.is_file():
            return cand
    raise LookupError(f"no contributed manifold named {name_or_path!r}; available: {available_manifolds()} "
                      f"(searched {[str(f) for f in manifold_search_path()]}; set {ENV_VAR} to add folders)")


def load_manifold(name_or_path: str, **kwargs: Any):
    """Load a contributed manifold by name (``"beta"``, ``"dirichlet"`` ...) or file path.

    Keyword arguments go to the file's ``make`` (e.g. ``load_manifold("dirichlet", k=4)``).

    Examples
    --------
    >>> B = load_manifold("beta")                      # doctest: +SKIP
    >>> B.point(alpha=1.0, beta=1.0)                   # doctest: +SKIP
    """
    path = _find(str(name_or_path))
    mod_name = f"infogeo_contrib_{path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    make = getattr(module, "make", None)
    if not callable(make):
        raise AttributeError(f"{path} defines no make(**kwargs) function returning a Manifold")
    logger.debug("loaded contributed manifold %s from %s", path.stem, path)
    return make(**kwargs)
