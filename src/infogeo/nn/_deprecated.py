"""The call forms of infogeo 0.1 that the metric protocol replaced, kept for one release with a warning.

Curvatures and the network metric take the protocol of :class:`~infogeo.geometry.metric.Metric`,
``mv(x, v)`` and ``solve(x, b, damping)``; 0.1 also took ``mv(v)`` and ``solve(b, damping=)`` at
the current point.  Those calls still work and raise a ``FutureWarning``.
"""
from __future__ import annotations

import warnings
from typing import Any


class _OneArgument:
    def __repr__(self) -> str:
        return "<not given>"


#: the default of ``mv``'s ``v`` and ``solve``'s ``b``: not given means the deprecated one-argument call
ONE_ARGUMENT: Any = _OneArgument()


def one_argument(owner: str, method: str, value: Any, instead: str) -> Any:
    """Warn about a one-argument ``mv(v)`` / ``solve(b)`` call (``FutureWarning``, at the caller); return ``value``."""
    warnings.warn(f"{owner}.{method}(v) is deprecated: the metric protocol is {method}(x, ...), x the point "
                  f"(None for the current one); write {instead}", FutureWarning, stacklevel=3)
    return value
