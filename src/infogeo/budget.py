"""Iteration and time budgets for iterative numerical solves.

Every iterative solve in infogeo (geodesic integration and shooting, Legendre
inversion, the full-Gaussian boundary problem) runs under a :class:`Budget`:
at most ``max_iter`` iterations (or function evaluations, for ODE solves) and
at most ``max_time`` seconds of wall time.  When either runs out the solve
raises :class:`BudgetExceededError`, which names the operation, the scale of
its inputs and what to try, instead of running on.

Examples
--------
>>> from infogeo.budget import Budget
>>> b = Budget(max_iter=3, max_time=10.0).start("demo solve")
>>> for _ in range(3):
...     b.tick()
>>> b.tick()
Traceback (most recent call last):
...
infogeo.budget.BudgetExceededError: demo solve: iteration budget of 3 exhausted...
"""
from __future__ import annotations

import dataclasses
import numbers
import time
from dataclasses import dataclass
from typing import Optional

__all__ = ["Budget", "BudgetExceededError"]


class BudgetExceededError(RuntimeError):
    """An iterative solve ran out of its iteration or time budget."""


@dataclass
class Budget:
    """Limits of one iterative solve: ``max_iter`` iterations and ``max_time`` seconds.

    ``Budget`` objects are configuration; :meth:`start` returns a running copy
    that counts.  ``None`` disables a limit (not recommended: hangs become
    possible).

    Attributes
    ----------
    max_iter : int or None
        Maximal number of :meth:`tick` calls (iterations or function evaluations).
    max_time : float or None
        Maximal wall time in seconds since :meth:`start`.
    operation, scale, hint : str
        What is being solved, the scale of its inputs and what to try: they
        make up the :class:`BudgetExceededError` message (set by :meth:`start`).
    """

    max_iter: Optional[int] = 1000
    max_time: Optional[float] = 30.0
    operation: str = "iterative solve"
    scale: str = ""
    hint: str = ""
    _count: int = dataclasses.field(default=0, repr=False)
    _t0: Optional[float] = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        from .geometry.points import positive_int  # here: geometry imports this module
        if self.max_iter is not None:
            positive_int(self.max_iter, "max_iter")
        if self.max_time is not None:
            # a type check first: a string compared with 0 gave a raw TypeError (inf stays: no limit)
            if isinstance(self.max_time, bool) or not isinstance(self.max_time, numbers.Real):
                raise TypeError(f"max_time must be a positive number or None, got {type(self.max_time).__name__} "
                                f"{self.max_time!r}")
            if not self.max_time > 0:
                raise ValueError(f"max_time must be positive or None, got {self.max_time!r}")

    def start(self, operation: str, scale: str = "", hint: str = "") -> "Budget":
        """A running copy of this budget for ``operation``; ``scale`` and ``hint`` go into the error."""
        return dataclasses.replace(self, operation=operation, scale=scale, hint=hint,
                                   _count=0, _t0=time.perf_counter())

    def share(self, max_iter: Optional[int] = None) -> "Budget":
        """A running sub-budget with its own iteration count and this budget's remaining time."""
        remaining = None if self.max_time is None else max(self.max_time - self.elapsed, 1e-9)
        return dataclasses.replace(self, max_iter=self.max_iter if max_iter is None else max_iter,
                                   max_time=remaining, _count=0, _t0=time.perf_counter())

    @property
    def elapsed(self) -> float:
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    @property
    def count(self) -> int:
        return self._count

    def tick(self, n: int = 1) -> None:
        """Count ``n`` iterations; raise :class:`BudgetExceededError` if a limit is passed."""
        if self._t0 is None:
            self._t0 = time.perf_counter()
        self._count += n
        if self.max_iter is not None and self._count > self.max_iter:
            self._fail(f"iteration budget of {self.max_iter} exhausted")
        if self.max_time is not None and self.elapsed > self.max_time:
            self._fail(f"time budget of {self.max_time:.3g} s exhausted after {self._count} iterations")

    def _fail(self, what: str) -> None:
        parts = [f"{self.operation}: {what}"]
        if self.scale:
            parts.append(f"inputs: {self.scale}")
        parts.append("try: " + (self.hint or "a larger Budget(max_iter=..., max_time=...), or better-scaled inputs"))
        raise BudgetExceededError("; ".join(parts))


def as_budget(budget: Optional[Budget], default: Budget) -> Budget:
    """``budget`` if given (type-checked), else ``default``."""
    if budget is None:
        return default
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be an infogeo.budget.Budget, got {type(budget).__name__}")
    return budget
