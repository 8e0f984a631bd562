"""The error of an estimator used before ``fit``: scikit-learn's ``NotFittedError`` where it is installed
(what its tools and users catch), else a class of the same bases (``ValueError``, ``AttributeError``).

scikit-learn is optional and heavy (it loads ``scipy.stats``), so it is imported only when the error is
raised or ``infogeo.stats.NotFittedError`` is read.
"""
from __future__ import annotations

import functools
from typing import Any

__all__ = ["check_fitted", "not_fitted_error"]


class _NotFittedError(ValueError, AttributeError):
    """An estimator used before ``fit`` (without scikit-learn)."""


@functools.lru_cache(maxsize=None)
def not_fitted_error() -> type:
    """scikit-learn's ``NotFittedError``, or ``_NotFittedError`` without scikit-learn."""
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:
        return _NotFittedError
    return NotFittedError


def __getattr__(name: str) -> Any:
    if name == "NotFittedError":
        return not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_fitted(estimator: Any, attribute: str) -> None:
    """Raise ``NotFittedError`` unless ``fit`` has set ``attribute`` on ``estimator``."""
    if not hasattr(estimator, attribute):
        raise not_fitted_error()(f"this {type(estimator).__name__} is not fitted yet; call fit(X) first")
