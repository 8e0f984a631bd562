r"""Exponential families as Riemannian manifolds (Amari 1998; Amari & Nagaoka 2000, Ch. 2-3).

An exponential family has densities

.. math:: p_\theta(x) = h(x)\,\exp\big(\theta^T t(x) - \psi(\theta)\big),

with sufficient statistics :math:`t`, natural parameters :math:`\theta` in the
natural domain :math:`\Theta`, log-partition :math:`\psi` and base measure
:math:`h`.  Everything else follows from :math:`\psi` alone:

* moments (mean parameters) :math:`\eta = \nabla\psi(\theta) = E[t(x)]`;
* Fisher information :math:`F(\theta) = \nabla^2\psi(\theta) = \mathrm{Cov}[t(x)]`;
* :math:`\mathrm{KL}(p_{\theta_1}\|p_{\theta_2}) = D_\psi(\theta_2, \theta_1)`, the
  Bregman divergence of :math:`\psi`;
* the score :math:`\nabla_\theta \log p_\theta(x) = t(x) - \eta`;
* the dual (mean) chart :math:`\eta`, in which the Fisher metric is
  :math:`F(\theta)^{-1} = \nabla^2\varphi(\eta)` with :math:`\varphi` the Legendre
  dual of :math:`\psi`.

A family is a :class:`~infogeo.geometry.charts.ChartedManifold` whose points are
arrays of shape ``(..., dim)`` in one chart (``"natural"``, ``"mean"``,
``"standard"``); every operation broadcasts over the leading axes and validates
its points and samples once per call.

Concrete families subclass :class:`ExponentialFamily` and override what they
know in closed form (charts, Fisher matrices, KL, geodesics); tests check every
override against the autodiff default.  A family prototyped from :math:`t` and
:math:`\psi` declares the same through public arguments: ``standard_chart``
(a :class:`Chart` with parameter names and, where known, a closed-form Fisher
matrix) and ``geodesics`` (:class:`ClosedGeodesics`); ``manifolds/`` shows how.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, Optional

import numpy as np

from .. import backend as B
from ..divergences import Bregman, bregman_value
from ..geometry import points as _points
from ..geometry.charts import Chart, ChartedManifold, per_point
from ._inputs import named_coordinates, numpy_only, split_parameters, unaliased
from .fisher import ClosedGeodesics, FisherMetric
from .legendre import legendre_primitive
from .observations import Observations

__all__ = ["Chart", "ClosedGeodesics", "ExponentialFamily", "FisherMetric"]

#: the public methods that take natural parameters theta first; every family's own version is checked
_NATURAL_METHODS = ("log_partition", "moments", "fisher_natural", "fisher_natural_vp", "in_natural_domain")


def _checks_theta(method: Callable) -> Callable:
    """``method(self, theta, ...)`` with ``theta`` checked once at the boundary: real coordinates of
    shape ``(..., dim)`` (integers cast to float, never truncated), finite.  A wrong length, NaN, ``None``
    or a 0-d value is a clear error instead of a number for another family, a NaN or a raw IndexError;
    ``in_natural_domain`` answers ``False`` for a non-finite theta of the right shape."""
    if getattr(method, "_checks_theta", False):
        return method
    name = method.__name__

    @functools.wraps(method)
    def checked(self, theta, *args, **kwargs):
        try:
            theta = _points.as_coordinates(theta, self.dim, f"natural parameter theta ({name})", self.name)
        except ValueError:
            if (name == "in_natural_domain" and tuple(getattr(theta, "shape", np.shape(theta)))[-1:] == (self.dim,)
                    and not _points.all_finite(theta)):
                return False
            raise
        return method(self, theta, *args, **kwargs)
    checked._checks_theta = True
    return checked


class ExponentialFamily(Observations, ChartedManifold):
    r"""An exponential family :math:`p_\theta(x) = h(x)\exp(\theta^T t(x) - \psi(\theta))`.

    Prototype a family by giving :math:`t` and :math:`\psi`; moments, Fisher,
    KL, score, the mean chart and geodesics follow by autodiff.

    Parameters
    ----------
    sufficient_statistics : callable
        ``t(x)``: observations with a leading sample axis, shape ``(n, ...)``,
        to statistics of shape ``(n, dim)``.
    log_partition : callable
        :math:`\psi(\theta)`, written with :mod:`infogeo.backend` functions.
    dim : int
        Number of natural parameters.
    log_base_measure : callable, optional
        :math:`\log h(x)`, shape ``(n,)``; zero by default.
    natural_domain : callable, optional
        ``theta -> bool``: whether :math:`\theta` lies in the natural domain
        (default: :math:`\psi(\theta)` finite).  ``natural_domain_description``
        says what the domain is in error messages.
    sampler : callable, optional
        ``sampler(theta, n, rng) -> observations``.
    chart : {"natural", "mean", "standard"}
        The chart points are expressed in.
    standard_chart : Chart, optional
        The family's usual parametrisation (its ``name`` is replaced by
        ``"standard"``), ideally with ``parameters`` naming its coordinates and a
        closed-form ``fisher``.  Default: the natural chart.
    geodesics : ClosedGeodesics, optional
        Closed-form exp, log and distance; without them the generic ODE
        geodesics of :class:`~infogeo.geometry.metric.Metric` are used.
    vectorized : bool
        Declare that every function given here (``t``, ``psi``, the charts,
        ``fisher`` and the geodesics) broadcasts over leading axes and works on
        either backend; batches then run in one call instead of point by point.
    name : str, optional

    Examples
    --------
    A Poisson family, from :math:`t(x) = x`, :math:`\psi(\theta) = e^\theta`,
    :math:`h(x) = 1/x!`::

        P = ExponentialFamily(lambda x: x[:, None] * 1.0, lambda th: B.exp(th[0]), dim=1,
                              log_base_measure=lambda x: -gammaln(x + 1))
        P.in_chart("mean").fisher(B.array([4.0]))   # 1/4

    The same family in its usual parameter, the rate :math:`\lambda = e^\theta`::

        rate = Chart("standard", B.log, B.exp, description="rate > 0",
                     parameters={"rate": ()}, fisher=lambda lam: B.reshape(1 / lam, (1, 1)))
        P = ExponentialFamily(..., standard_chart=rate)
        P.point(rate=4.0), P.parameters(P.point(rate=4.0))   # array([4.]), {"rate": 4.0}
    """

    #: name of the chart in which closed-form geometry (_geo_exp/_geo_log/_geo_dist) works
    geometry_chart: Optional[str] = None
    default_chart: str = "standard"
    #: whether every method broadcasts over leading axes on either backend (else batches loop)
    _vectorized: bool = False
    _geo_vectorized: bool = False
    #: closed forms ("exp", "log", "dist") that take batches in numpy though not on either backend
    _geo_numpy_batches: frozenset = frozenset()
    #: why a geodesic map ("exp", "log", "dist") runs in numpy only, for the TypeError on torch input
    _numpy_geodesics_why: dict = {}
    _standard_chart: Optional[Chart] = None
    _geodesics: Optional[ClosedGeodesics] = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        for name in _NATURAL_METHODS:   # a family's override is validated like the generic method
            f = cls.__dict__.get(name)
            if callable(f):
                setattr(cls, name, _checks_theta(f))

    def __init__(self, sufficient_statistics: Optional[Callable] = None,
                 log_partition: Optional[Callable] = None, dim: Optional[int] = None, *,
                 log_base_measure: Optional[Callable] = None,
                 natural_domain: Optional[Callable[[Any], bool]] = None,
                 natural_domain_description: str = "",
                 sampler: Optional[Callable] = None, chart: Optional[str] = None,
                 standard_chart: Optional[Chart] = None,
                 geodesics: Optional[ClosedGeodesics] = None,
                 vectorized: Optional[bool] = None,
                 name: Optional[str] = None):
        if dim is None:
            raise ValueError("dim (the number of natural parameters) is required")
        if sufficient_statistics is not None:
            self._t_fn = sufficient_statistics
        if log_partition is not None:
            self._psi_fn = log_partition
        if not (hasattr(self, "_psi_fn") or type(self).log_partition is not ExponentialFamily.log_partition):
            raise ValueError("an ExponentialFamily needs log_partition (psi)")
        self._log_h_fn = log_base_measure
        self._domain_fn = natural_domain
        self._domain_desc = natural_domain_description or "natural parameters where psi is finite"
        self._sampler = sampler
        if vectorized is not None:
            self._vectorized = self._geo_vectorized = bool(vectorized)
        super().__init__(dim, None, name=name or type(self).__name__)
        if standard_chart is not None and not isinstance(standard_chart, Chart):
            raise TypeError(f"standard_chart must be a Chart, got {type(standard_chart).__name__}")
        self._standard_chart = standard_chart
        self._charts: Dict[str, Chart] = self._make_charts()
        for c in self._charts.values():
            sizes = c.parameter_sizes()
            if sizes and sum(sizes.values()) != self.dim:
                raise ValueError(f"the parameters {dict(c.parameters)} of chart {c.name!r} take "
                                 f"{sum(sizes.values())} coordinates; expected dim = {self.dim}")
        if geodesics is not None:
            if not isinstance(geodesics, ClosedGeodesics):
                raise TypeError(f"geodesics must be ClosedGeodesics, got {type(geodesics).__name__}")
            if geodesics.chart not in self._charts:
                raise ValueError(f"geodesics are written in chart {geodesics.chart!r}, which {self.name} "
                                 f"does not have; expected one of {sorted(self._charts)}")
            self._geodesics = geodesics
            self.geometry_chart = geodesics.chart
            self._geo_vectorized = bool(geodesics.vectorized)
        self._set_chart(chart or self.default_chart)

    # ------------------------------------------------------------ charts
    def _make_charts(self) -> Dict[str, Chart]:
        """Natural, mean (Legendre dual by Newton) and standard (declared, or the natural) charts."""
        ident = Chart("natural", lambda x: x, lambda th: th, self._check_natural,
                      "natural parameters theta")
        theta_of_eta = numpy_only(legendre_primitive(self), f"the mean chart of {self.name} inverts the moment map")
        mean = Chart("mean", theta_of_eta, self.moments, self._check_mean_generic,
                     "mean parameters eta = E[t(x)]")
        std = self._standard_chart if self._standard_chart is not None else ident
        return {"natural": ident, "mean": mean, "standard": dataclasses.replace(std, name="standard")}

    def _set_chart(self, chart: str) -> None:
        super()._set_chart(chart)
        self.metric = FisherMetric(self)

    def to_natural(self, x: Any):
        r"""Natural parameters :math:`\theta` of the point ``x``."""
        return self.to_chart(x, "natural")

    def to_mean(self, x: Any):
        r"""Mean parameters :math:`\eta = E[t(x)]` of the point ``x``."""
        return self.to_chart(x, "mean")

    def _natural(self, x: Any):
        return self._to_chart(x, "natural")

    # ------------------------------------------------------------ points
    def _check_natural(self, theta: Any) -> None:
        if not self.in_natural_domain(theta):
            raise ValueError(f"point is outside the natural domain of {self.name}: expected {self._domain_desc}")

    def _check_mean_generic(self, eta: Any) -> None:
        # the moment space is the open image of the natural domain: a point belongs
        # iff the Legendre inversion finds a natural parameter for it
        self._charts["mean"].to_natural(eta)

    @_checks_theta
    def in_natural_domain(self, theta: Any) -> bool:
        """Whether ``theta`` lies in the natural domain."""
        if self._domain_fn is not None:
            return bool(self._domain_fn(theta))
        with np.errstate(all="ignore"):
            try:
                # a batch is inside when every point is
                return bool(np.all(np.isfinite(np.asarray(B.to_numpy(self.log_partition(theta)), dtype=float))))
            except (ValueError, FloatingPointError, np.linalg.LinAlgError):
                return False

    def _natural_start(self, eta: np.ndarray) -> np.ndarray:
        """Starting natural parameter for the Legendre inversion (override for a better guess)."""
        return np.zeros(self.dim)

    def point(self, coords: Any = None, **parameters: Any):
        """A validated point from coordinates in the current chart, or from named parameters.

        ``M.point(shape=2.0, rate=3.0)`` takes the parameter names declared by the
        standard chart (:attr:`Chart.parameters`) and returns the point in the
        current chart.  Parameters with leading axes give a batch of points.
        """
        if (coords is None) == (not parameters):
            raise ValueError(f"give exactly one of coords or the named parameters {self._parameter_names()}")
        if coords is not None:
            return super().point(coords)
        shapes = dict(self._charts["standard"].parameters or {})
        if set(parameters) != set(shapes):
            raise ValueError(f"{self.name} takes the parameters {self._parameter_names()}, got {sorted(parameters)}")
        return self.from_chart(named_coordinates(parameters, shapes), "standard")

    def parameters(self, p: Any) -> Dict[str, Any]:
        """The named parameters of the point ``p`` (floats, or numpy arrays for vector parameters or batches)."""
        shapes = dict(self._charts["standard"].parameters or {})
        if not shapes:
            raise ValueError(f"{self.name} declares no parameter names "
                             "(pass standard_chart=Chart(..., parameters=...))")
        return split_parameters(B.to_numpy(self.to_chart(p, "standard")), shapes)

    def _parameter_names(self) -> list:
        return list((self._charts["standard"].parameters or {}).keys())

    def natural_point(self, theta: Any):
        """The point (in the current chart) with natural parameters ``theta``."""
        return self.from_chart(theta, "natural")

    def random_point(self, rng: Optional[np.random.Generator] = None, scale: float = 1.0):
        """A random point: a random natural parameter (redrawn until inside the domain)."""
        rng = _points.random_generator(rng)
        for _ in range(1000):
            theta = scale * rng.standard_normal(self.dim)
            if self.in_natural_domain(theta):
                return self.from_chart(theta, "natural")
        raise RuntimeError(f"could not draw a random point of {self.name}; override random_point")

    # ------------------------------------------------------------ the family
    @_checks_theta
    def log_partition(self, theta: Any):
        r""":math:`\psi(\theta)`."""
        return self._psi_fn(theta)

    def sufficient_statistics(self, x: Any):
        """:math:`t(x)` for a batch of observations (leading sample axis) -> ``(n, dim)``."""
        t = unaliased(self._t_fn(x), x)   # a t(x) = x must not hand back the caller's array
        t = B.reshape(t, (-1, self.dim)) if getattr(t, "ndim", 2) == 1 and self.dim == 1 else t
        return t

    def log_base_measure(self, x: Any):
        r""":math:`\log h(x)` for a batch of observations -> ``(n,)``, one value per row of :math:`t(x)`."""
        if self._log_h_fn is None:
            return np.zeros(len(self.sufficient_statistics(x)))
        return self._log_h_fn(x)

    @property
    def has_base_measure(self) -> bool:
        r"""Whether :math:`h` is declared (else :math:`h = 1` and :math:`\log h` is not evaluated)."""
        return self._log_h_fn is not None or type(self).log_base_measure is not ExponentialFamily.log_base_measure

    @_checks_theta
    def moments(self, theta: Any):
        r"""Mean parameters :math:`\eta = \nabla\psi(\theta)` (autodiff unless overridden); batches broadcast."""
        if len(theta.shape) > 1 and self._vectorized:  # psi maps (..., dim) -> (...): grad of the sum, per point
            return B.grad(lambda t: B.sum(self.log_partition(t)), theta)
        return per_point(lambda t: B.grad(self.log_partition, t), theta)

    @_checks_theta
    def fisher_natural(self, theta: Any):
        r"""Fisher information in natural coordinates, :math:`\nabla^2\psi(\theta)`."""
        return B.hessian(self.log_partition, theta)

    @_checks_theta
    def fisher_natural_vp(self, theta: Any, v: Any):
        r""":math:`\nabla^2\psi(\theta)\,v` by a Hessian-vector product (no matrix formed)."""
        return B.hvp(self.log_partition, theta, v)

    def fisher(self, x: Any):
        r"""Fisher matrix at ``x`` (shape ``(..., dim, dim)``) in the current chart.

        Natural: :math:`\nabla^2\psi`; mean: :math:`(\nabla^2\psi)^{-1}` at
        :math:`\theta(\eta)` (Legendre duality); any other chart:
        :math:`J^T \nabla^2\psi\, J` with :math:`J = \partial\theta/\partial x`.
        """
        x = self._as_point(x)
        closed = self._charts[self.chart].fisher
        if closed is not None:
            F = per_point(closed, x, vectorized=self._charts[self.chart].vectorized)
        else:
            # autodiff Fisher matrices are per point; closed forms of vectorised families take the batch
            own_closed = type(self)._fisher_closed is not ExponentialFamily._fisher_closed
            F = per_point(self._fisher, x, vectorized=self._vectorized and own_closed)
        # a valid but extreme point overflows (a standard deviation of 1e-300) or underflows (a variance of 1e200): an
        # error, not a NaN or zero metric
        return _points.metric_result(F, f"the Fisher matrix of {self.name}", x)

    def _fisher(self, x: Any):
        closed = self._fisher_closed(x)
        return closed if closed is not None else self._fisher_autodiff(x)

    def _fisher_closed(self, x: Any):
        """Closed-form Fisher matrix in the current chart, or ``None`` (subclasses)."""
        return None

    def _fisher_autodiff(self, x: Any):
        theta = self._natural(x)
        F = self.fisher_natural(theta)
        if self.chart == "natural":
            return F
        if self.chart == "mean":
            return B.inv(F)
        J = B.jacobian(self._natural, x)
        return B.matmul(B.transpose(J), B.matmul(F, J))

    # ------------------------------------------------------------ statistics
    def kl(self, p: Any, q: Any):
        r""":math:`\mathrm{KL}(p\|q)`; points (or broadcasting batches) in the current chart.

        Generic: the Bregman divergence of :math:`\psi`,
        :math:`\psi(\theta_q) - \psi(\theta_p) - \nabla\psi(\theta_p)^T(\theta_q - \theta_p)`.
        """
        p, q = self._pair(p, q)
        return per_point(self._kl, p, q, vectorized=self._vectorized)

    def _kl(self, p: Any, q: Any):
        tp, tq = self._natural(p), self._natural(q)
        if len(tp.shape) == 1 and len(tq.shape) == 1:
            return Bregman(self.log_partition)(tq, tp)
        psi = self.log_partition  # vectorised: psi maps (..., dim) -> (...)
        g = B.grad(lambda t: B.sum(psi(t)), tp)
        return bregman_value(psi, psi(tq), psi(tp), g, tq, tp, batched=True)

    # ------------------------------------------------------------ closed geometry hooks
    # built-in families override these; prototyped ones pass geodesics=ClosedGeodesics(...)
    def _geo_exp(self, x, v):
        return self._closed_geodesics().exp(x, v)

    def _geo_log(self, x, y):
        return self._closed_geodesics().log(x, y)

    def _closed_geodesics(self) -> ClosedGeodesics:
        if self._geodesics is None:
            raise NotImplementedError(f"{self.name} has no closed-form geodesics")
        return self._geodesics

    def _geo_dist(self, x, y):
        if self._geodesics is not None and self._geodesics.dist is not None:
            return self._geodesics.dist(x, y)
        v = self._geo_log(x, y)
        fam = self.in_chart(self.geometry_chart)
        return B.sqrt(B.sum(v * fam.metric.mv(x, v), axis=-1))

    def __repr__(self) -> str:
        return f"<{self.name}: a {self.dim}-dimensional statistical manifold in the {self.chart} chart>"

