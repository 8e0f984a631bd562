r"""The solver loop shared by every method.

Each iteration is ``differential -> sharp -> step``: the cost's differential
(a covector) is turned into the Riemannian gradient (a vector) by the
manifold's metric, and a subclass decides how to move (fixed step, line
search, Newton system, trust region).  The loop owns stopping rules, the
history, the iteration table, the callback and the progress bar, so every
solver reports the same way.
"""
from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from .. import backend as B
from ..backend import tree as _tree
from ..geometry import points as _points
from ..geometry.points import check_count, check_flag, check_real  # noqa: F401  (shared with geometry and stats)
from ..geometry.manifold import Manifold
from ..geometry.vectors import Covector, TangentVector
from ..linalg import NotPositiveDefiniteError
from .result import CONVERGED, FAILED, LIMIT_REACHED, STOPPED_BY_CALLBACK, OptimizeResult

logger = logging.getLogger("infogeo.solvers")


def check_choice(label: str, value: Any, choices: tuple) -> Any:
    """``value`` if it is one of ``choices`` (strings, or ``None``), else a clear error naming ``label``.

    A value of another type (an array, a number) gets a ``TypeError``, not the ambiguous comparison
    that ``value in choices`` would make of it.
    """
    if not (value is None or isinstance(value, str)):
        raise TypeError(f"{label} must be one of {choices}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{label} must be one of {choices}, got {value!r}")
    return value


def _ensure_console_handler() -> None:
    """Verbose runs print their table through logging; attach a stdout handler once if none is set."""
    root_pkg = logging.getLogger("infogeo")
    if not any(getattr(h, "_infogeo_console", False) for h in root_pkg.handlers) and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._infogeo_console = True  # type: ignore[attr-defined]
        root_pkg.addHandler(handler)
    if root_pkg.level == logging.NOTSET or root_pkg.level > logging.INFO:
        root_pkg.setLevel(logging.INFO)


def show_progress(progress: Optional[bool]) -> bool:
    """Whether to draw a progress bar: ``True``/``False`` as asked; ``None`` (auto) only on a terminal.

    A bar on a stderr that is a file or a pipe (a log, CI, a batch job) is pages of carriage-return
    noise, so the automatic choice is to show it only when stderr is interactive.
    """
    if progress is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())
    return bool(progress)


def progress_bar(iterable: Optional[Iterable] = None, progress: Optional[bool] = None, **kwargs: Any):
    """A tqdm bar (over ``iterable`` or with ``total=``) that is shown as :func:`show_progress` decides.

    A hidden bar writes nothing, and its ``update``/``set_postfix``/``close`` do nothing.
    """
    from tqdm.auto import tqdm
    return tqdm(iterable, disable=not show_progress(progress), **kwargs)


def log_every(verbose: Union[bool, int], max_iter: int) -> int:
    """Iterations between two rows of the verbose table: 0 for none.

    ``verbose=k`` (an int) logs every k-th iteration; ``True`` about twenty rows per run.
    """
    if isinstance(verbose, (bool, np.bool_)) or verbose is None:
        return max(1, round(max_iter / 20)) if verbose else 0
    return check_count("verbose (a bool, or log every k-th iteration)", verbose)


@dataclass
class Iterate:
    """What the loop knows about the current point."""

    x: Any
    fun: float
    differential: Covector
    gradient: TangentVector
    grad_norm: float


@dataclass
class Step:
    """What a solver's step returns to the loop."""

    x: Any                       # the next point (the same object when the step was rejected)
    step_size: float = 0.0       # metric norm of the step actually taken
    nfev: int = 0                # cost evaluations the step used
    accepted: bool = True
    failed: Optional[str] = None  # a message if the solver cannot continue
    extra: dict = field(default_factory=dict)  # solver-specific history fields


class Solver:
    """Base class of the solvers: a loop of ``differential -> sharp -> step``.

    Parameters
    ----------
    max_iter : int
        Iteration limit (``result.success`` is False if it is reached).
    grad_tol : float
        Stop when the Riemannian gradient norm has fallen by the factor ``grad_tol`` from its start:
        :math:`\\|\\operatorname{grad} f(x_k)\\|_{x_k} \\le` ``grad_tol`` :math:`\\cdot s` with
        :math:`s` = ``grad_scale``.  A tolerance relative to the scale of the problem (as scipy's
        ``ftol`` is) is invariant under rescaling the cost or the coordinates and is met alike on
        every machine; an absolute one either sits at the rounding level of the gradient (met or
        missed by luck) or stops at once where the cost is small (a non-stationary point reported
        as converged).
    grad_scale : float, optional
        The gradient norm ``grad_tol`` is relative to; by default that of the start,
        :math:`\\|\\operatorname{grad} f(x_0)\\|_{x_0}` (1 if it is 0).  ``grad_scale=1`` makes the
        test absolute.
    step_tol : float
        Stop when an accepted step has metric norm below ``step_tol`` (0, the default: never; a step
        that underflows to 0 is then not taken for convergence).
    fun_tol : float, optional
        Stop when an accepted step changes the cost by less than ``fun_tol``.
    damping : float
        Tikhonov damping used by ``sharp`` (:math:`(G + \\lambda I)^{-1}`), finite and :math:`\\ge 0`.
    verbose : bool or int
        Log a compact iteration table (logger ``infogeo.solvers``, shown on stdout
        unless logging is configured): ``verbose=k`` logs every k-th iteration (and the
        first and last), ``True`` about twenty rows per run.
    progress : bool, optional
        A tqdm progress bar on stderr: ``True`` forces it, ``False`` hides it, ``None``
        (default) shows it only when stderr is a terminal.
    callback : callable, optional
        ``callback(info) -> bool | None`` after each iteration, with ``info`` the
        history entry (``iter``, ``x``, ``fun``, ``grad_norm``, ``step_size`` ...);
        returning True stops the run.
    """

    name = "Solver"

    def __init__(self, *, max_iter: int = 1000, grad_tol: float = 1e-10, grad_scale: Optional[float] = None,
                 step_tol: float = 0.0, fun_tol: Optional[float] = None, damping: float = 0.0,
                 verbose: Union[bool, int] = False, progress: Optional[bool] = None,
                 callback: Optional[Callable[[dict], Any]] = None):
        self.max_iter = check_count("max_iter", max_iter)
        self.grad_tol, self.step_tol = check_real("grad_tol", grad_tol), check_real("step_tol", step_tol)
        self.fun_tol = None if fun_tol is None else check_real("fun_tol", fun_tol)
        self.grad_scale = None if grad_scale is None else check_real("grad_scale", grad_scale, positive=True)
        damping = check_real("damping", damping)
        if not callable(callback) and callback is not None:
            raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
        check_flag("progress (None: automatic)", progress, none=True)
        self.damping, self.verbose, self.progress, self.callback = damping, verbose, progress, callback
        log_every(verbose, self.max_iter)  # a bad value fails here, not at the first run

    # ------------------------------------------------------------ hooks
    def _setup(self, manifold: Manifold, cost: Callable, x: Any) -> None:
        """Per-run state (radius, caches); called once before the loop."""

    def _step(self, manifold: Manifold, cost: Callable, it: Iterate, k: int) -> Step:
        raise NotImplementedError

    # ----------------------------------------------------------- helpers
    def _evaluate(self, manifold: Manifold, cost: Callable, x: Any) -> Iterate:
        # overflow is reported as a clear "diverged" message by the loop, not as numpy warnings
        with np.errstate(over="ignore", invalid="ignore"):
            f, df = manifold.value_and_differential(cost, x)
            g = manifold.metric.sharp(df, damping=self.damping)
            gn2 = float(B.to_numpy(df(g)))
            if math.isfinite(gn2) and gn2 > 1e-250:
                gn = math.sqrt(gn2)
            else:  # |grad|^2 over- or underflows before |grad| does: pair the scaled halves
                m = max(float(np.max(np.abs(B.to_numpy(leaf)))) for leaf in _tree.leaves(df.components))
                r = float(B.to_numpy(_tree.tree_vdot(_tree.tree_map(lambda t: t / m, df.components),
                                                     _tree.tree_map(lambda t: t / m, g.components)))) if m else 0.0
                gn = math.sqrt(max(r, 0.0)) * m
        if not math.isfinite(gn):
            raise ValueError(f"the gradient norm is {gn} at this point (the cost's scale overflows float64)")
        return Iterate(x, float(B.to_numpy(f)), df, g, gn)

    @staticmethod
    def _safe_cost(manifold: Manifold, cost: Callable, x: Any) -> float:
        """Cost at a trial point, ``inf`` outside the manifold or where the cost is not finite."""
        if not manifold.belongs(x):
            return math.inf
        with np.errstate(over="ignore", invalid="ignore"):
            value = float(B.to_numpy(cost(x)))
        return value if math.isfinite(value) else math.inf

    # -------------------------------------------------------------- loop
    def minimize(self, manifold: Manifold, cost: Callable[[Any], Any], x0: Any, *,
                 callback: Optional[Callable[[dict], Any]] = None) -> OptimizeResult:
        """Minimize ``cost`` over ``manifold`` from ``x0``.

        ``cost`` is written with :mod:`infogeo.backend` functions so that it is
        differentiable; ``x0`` is not modified.
        """
        if not isinstance(manifold, Manifold):
            raise TypeError(f"minimize needs a Manifold, got {type(manifold).__name__}")
        if not callable(cost):
            raise TypeError("cost must be callable")
        callback = callback or self.callback
        x = manifold.point(x0)
        self._setup(manifold, cost, x)
        it = self._evaluate(manifold, cost, x)
        nfev = 1
        # relative to the start's gradient (1 where that is 0: the start is then already stationary)
        tol = self.grad_tol * (self.grad_scale if self.grad_scale is not None else (it.grad_norm or 1.0))
        history = [self._entry(0, it, 0.0, {})]
        every = log_every(self.verbose, self.max_iter)
        if every:
            _ensure_console_handler()
            logger.info("%s on %s", self.name, manifold.name)
            logger.info("%6s  %-22s  %-11s  %-11s", "iter", "cost", "|grad|", "step")
            logger.info("%6d  %+.15e  %.5e  %11s", 0, it.fun, it.grad_norm, "")
        bar = progress_bar(progress=self.progress, total=self.max_iter, desc=self.name, leave=False)
        logged = 0

        status, message, k = LIMIT_REACHED, "maximum number of iterations reached", 0
        try:
            for k in range(1, self.max_iter + 1):
                if it.grad_norm <= tol:
                    status, message, k = CONVERGED, f"gradient norm {it.grad_norm:.3g} <= {tol:.3g} (grad_tol)", k - 1
                    break
                step = self._step(manifold, cost, it, k)
                nfev += step.nfev
                if step.failed:
                    status, message, k = FAILED, step.failed, k - 1
                    break
                if step.accepted:
                    if not manifold.belongs(step.x):
                        status, message, k = FAILED, ("the step left the domain of the manifold; use a smaller "
                                                      "step size, line_search='armijo', or update='exp'"), k - 1
                        break
                    try:
                        new = self._evaluate(manifold, cost, step.x)
                    except NotPositiveDefiniteError as exc:  # the metric, not the iteration, failed there
                        status, message, k = FAILED, f"stopped at the new point: {exc}", k - 1
                        break
                    except ValueError as exc:
                        status, message, k = FAILED, f"stopped: {exc} (the iteration diverged)", k - 1
                        break
                    nfev += 1
                    change = abs(new.fun - it.fun)
                    it = new
                history.append(self._entry(k, it, step.step_size, step.extra))
                if every and k % every == 0:
                    logged = k
                    logger.info("%6d  %+.15e  %.5e  %.5e%s", k, it.fun, it.grad_norm, step.step_size,
                                "" if step.accepted else "  (rejected)")
                bar.update(1)
                if not bar.disable:
                    bar.set_postfix(cost=f"{it.fun:.3e}", refresh=False)
                if callback is not None and callback(history[-1]):
                    status, message = STOPPED_BY_CALLBACK, "stopped by the callback"
                    break
                if step.accepted and self.step_tol > 0 and step.step_size <= self.step_tol:
                    status, message = CONVERGED, f"step size {step.step_size:.3g} <= step_tol"
                    break
                if step.accepted and self.fun_tol is not None and change <= self.fun_tol:
                    status, message = CONVERGED, f"cost change {change:.3g} <= fun_tol"
                    break
            else:
                k = self.max_iter
                if it.grad_norm <= tol:
                    status, message = CONVERGED, f"gradient norm {it.grad_norm:.3g} <= {tol:.3g} (grad_tol)"
        finally:
            bar.close()
        if every:
            if logged != k:  # the last row, if it fell between two logged ones
                logger.info("%6d  %+.15e  %.5e  %11s", k, it.fun, it.grad_norm, "")
            logger.info("%s: %s after %d iterations", self.name, message, k)
        # the result's x is its own array: not x0 (a run stopped at iteration 0), nor the history's last x
        return OptimizeResult(x=_points.copy_array(it.x), fun=it.fun, grad_norm=it.grad_norm, jac=it.differential,
                              nit=k, nfev=nfev, success=status == CONVERGED, status=status, message=message,
                              history=history)

    @staticmethod
    def _entry(k: int, it: Iterate, step_size: float, extra: dict) -> dict:
        return {"iter": k, "x": it.x, "fun": it.fun, "grad_norm": it.grad_norm, "step_size": step_size, **extra}
