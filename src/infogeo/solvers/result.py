"""The result of a solver run, shaped like :class:`scipy.optimize.OptimizeResult`."""
from __future__ import annotations

from typing import Any

#: ``status`` codes, as in :class:`scipy.optimize.OptimizeResult` (0 is success)
CONVERGED, LIMIT_REACHED, STOPPED_BY_CALLBACK, FAILED = 0, 1, 2, 3
#: a word per status code, for legends and tables
OUTCOMES = {CONVERGED: "converged", LIMIT_REACHED: "iteration limit", STOPPED_BY_CALLBACK: "stopped by callback",
            FAILED: "failed"}


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
    status : int
        Why the run stopped, as a code: ``0`` a convergence criterion (``success``), ``1`` the
        iteration (or evaluation) limit, ``2`` the callback, ``3`` the method failed (divergence,
        a step that left the domain, no decrease found, a system that is not positive definite).
    message : str
        Why the run stopped.
    history : list of dict
        One entry per iterate: ``iter``, ``x``, ``fun``, ``grad_norm``, ``step_size``
        (and solver-specific fields such as ``radius``).
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if "status" not in self and "success" in self:
            self["status"] = CONVERGED if self["success"] else FAILED

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc

    __setattr__ = dict.__setitem__  # type: ignore[assignment]

    def __repr__(self) -> str:
        keys = ("success", "status", "message", "fun", "grad_norm", "nit", "nfev", "x")
        width = max(map(len, keys))
        return "\n".join(f"{k.rjust(width)}: {self[k]!r}" for k in keys if k in self)

    @property
    def outcome(self) -> str:
        """``status`` as a word (``"converged"``, ``"iteration limit"``, ``"stopped by callback"``, ``"failed"``)."""
        return OUTCOMES.get(self.get("status"), f"status {self.get('status')}")

    def path(self):
        """The iterates as a ``(n_iterates, dim)`` numpy array (for plotting)."""
        import numpy as np
        from .. import backend as B
        return np.stack([B.to_numpy(h["x"]) for h in self["history"]])
