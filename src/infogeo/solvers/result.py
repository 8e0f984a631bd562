"""The result of a solver run, shaped like :class:`scipy.optimize.OptimizeResult`."""
from __future__ import annotations

from typing import Any


class OptimizeResult(dict):
    """Result of :meth:`Solver.minimize`: a dict whose keys are also attributes.

    Attributes
    ----------
    x : array
        The final point.
    fun : float
        Cost at ``x``.
    grad_norm : float
        Riemannian norm of the gradient at ``x``.
    nit : int
        Number of steps taken.
    nfev : int
        Number of cost evaluations (line searches and trust-region checks included).
    success : bool
        Whether a convergence criterion (not the iteration limit or a failure) stopped the run.
    message : str
        Why the run stopped.
    history : list of dict
        One entry per iterate: ``iter``, ``x``, ``fun``, ``grad_norm``, ``step_size``
        (and solver-specific fields such as ``radius``).
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    __setattr__ = dict.__setitem__  # type: ignore[assignment]

    def __repr__(self) -> str:
        keys = ("success", "message", "fun", "grad_norm", "nit", "nfev", "x")
        width = max(map(len, keys))
        return "\n".join(f"{k.rjust(width)}: {self[k]!r}" for k in keys if k in self)

    def path(self):
        """The iterates as a ``(n_iterates, dim)`` numpy array (for plotting)."""
        import numpy as np
        from .. import backend as B
        return np.stack([B.to_numpy(h["x"]) for h in self["history"]])
