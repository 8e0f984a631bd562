"""Adapters to other geometry libraries.

* :mod:`infogeo.interop.pymanopt` — infogeo manifolds as pymanopt manifolds and back;
* :mod:`infogeo.interop.geomstats` — points of geomstats' information-geometry spaces;
* :mod:`infogeo.interop.laplace` — laplace-torch curvature backends (``InfogeoGGN``, ``InfogeoEF``).

The submodules import their library on first use, so ``import infogeo`` needs neither.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["pymanopt", "geomstats", "laplace"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
