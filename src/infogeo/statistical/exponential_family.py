r"""Exponential families as Riemannian manifolds (seed 000, Sec. 4; seed 003).

An exponential family has densities

.. math:: p_\theta(x) = h(x)\,\exp\big(\theta^T t(x) - \psi(\theta)\big),

with sufficient statistics :math:`t`, natural parameters :math:`\theta` in the
natural domain :math:`\Theta`, log-partition :math:`\psi` and base measure
:math:`h`.  Everything else follows from :math:`\psi` alone:

* moments (mean parameters) :math:`\eta = \nabla\psi(\theta) = E[t(x)]` (Eq. 13);
* Fisher information :math:`F(\theta) = \nabla^2\psi(\theta) = \mathrm{Cov}[t(x)]`
  (Eqs. 16–17), with Hessian-vector products for free;
* :math:`\mathrm{KL}(p_{\theta_1}\|p_{\theta_2}) = D_\psi(\theta_2, \theta_1)`, the
  Bregman divergence of :math:`\psi`;
* the score :math:`\nabla_\theta \log p_\theta(x) = t(x) - \eta` (Eq. 15);
* the dual (mean) chart :math:`\eta`, in which the Fisher metric is
  :math:`F(\theta)^{-1} = \nabla^2\varphi(\eta)` with :math:`\varphi` the Legendre
  dual of :math:`\psi` (Eq. 19).

A statistical manifold here is a :class:`~infogeo.geometry.manifold.Manifold`
whose points are flat coordinate arrays in one *chart* (``"natural"``,
``"mean"``, ``"standard"``).  ``M.in_chart(name)`` is the same family in another
chart; points map with :meth:`ExponentialFamily.to_chart`, tangent vectors push
forward by the chart Jacobian :math:`J` and covectors pull back by
:math:`J^T`; the metric in a new chart is :math:`J^T G J`.

Concrete families subclass :class:`ExponentialFamily` and override what they
know in closed form (charts, Fisher matrices, KL, geodesics); tests check every
override against the autodiff default.  A family prototyped from :math:`t` and
:math:`\psi` declares the same through public arguments: ``standard_chart``
(a :class:`Chart` with parameter names and, where known, a closed-form Fisher
matrix) and ``geodesics`` (:class:`ClosedGeodesics`); ``manifolds/`` shows how.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from .. import backend as B
from ..divergences import Bregman
from ..geometry.manifold import Manifold
from ..geometry.metric import Metric
from ..geometry.vectors import Covector, TangentVector
from .legendre import legendre_primitive

logger = logging.getLogger(__name__)

__all__ = ["Chart", "ClosedGeodesics", "ExponentialFamily", "FisherMetric"]


@dataclass
class Chart:
    r"""A coordinate system on a family, given by its maps to and from natural parameters.

    A prototyped family declares its usual parametrisation with one of these
    (``ExponentialFamily(..., standard_chart=Chart(...))``); ``parameters``
    then gives ``M.point(**named)`` and ``M.parameters(p)`` for free.

    Attributes
    ----------
    name : str
    to_natural, from_natural : callable
        ``x -> theta`` and ``theta -> x``, written with :mod:`infogeo.backend`
        functions so that autodiff gives the chart Jacobians.
    check : callable, optional
        ``check(x)`` raises ``ValueError`` naming what is wrong if ``x`` is not
        a valid point in this chart.
    description : str
        What a valid point is (used in error messages and docs).
    parameters : mapping of str to shape, optional
        Names and shapes of the parameters whose flattened values, concatenated
        in order, are the chart's coordinates, e.g. ``{"shape": (), "rate": ()}``
        or ``{"concentration": (3,)}``.
    fisher : callable, optional
        ``fisher(x)``: the Fisher matrix :math:`J^T\nabla^2\psi J` in this chart
        in closed form (written with backend functions, so that geodesics can
        differentiate it).  Without it the Fisher matrix comes from autodiff of
        :math:`\psi` and of ``to_natural``; tests should compare the two.
    """

    name: str
    to_natural: Callable[[Any], Any]
    from_natural: Callable[[Any], Any]
    check: Optional[Callable[[Any], None]] = None
    description: str = ""
    parameters: Optional[Mapping[str, Tuple[int, ...]]] = None
    fisher: Optional[Callable[[Any], Any]] = None

    def parameter_sizes(self) -> Dict[str, int]:
        """Number of coordinates taken by each named parameter (``{}`` if none are declared)."""
        return {k: int(np.prod(shape, dtype=int)) for k, shape in (self.parameters or {}).items()}


@dataclass
class ClosedGeodesics:
    r"""Closed-form Fisher–Rao geodesics of a family, in one of its charts.

    The functions take and return plain numpy arrays of coordinates in chart
    ``chart``; :class:`FisherMetric` converts points and tangent vectors of any
    other chart to it (vectors by the chart Jacobian) and back.

    Attributes
    ----------
    chart : str
        The chart the maps are written in (e.g. ``"standard"``).
    exp : callable
        ``exp(x, v) -> y``: the end point of the geodesic from ``x`` with initial velocity ``v``.
    log : callable
        ``log(x, y) -> v``: the initial velocity of the geodesic from ``x`` to ``y``.
    dist : callable, optional
        ``dist(x, y) -> float``; defaults to the Fisher norm of ``log(x, y)``.
    """

    chart: str
    exp: Callable[[np.ndarray, np.ndarray], np.ndarray]
    log: Callable[[np.ndarray, np.ndarray], np.ndarray]
    dist: Optional[Callable[[np.ndarray, np.ndarray], float]] = None


def _as_float_array(x: Any, what: str):
    """Copy ``x`` into a float backend array (never aliasing the caller's array)."""
    try:
        if B.is_torch(x):
            return x.clone().to(dtype=__import__("torch").float64)
        return np.array(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be numeric, got {x!r}") from exc


# -------------------------------------------------------------------- metric
class FisherMetric(Metric):
    r"""The Fisher–Rao metric of an exponential family in the family's current chart.

    In natural coordinates :math:`G = \nabla^2\psi(\theta)`; in a chart with
    :math:`\theta = \theta(x)`, :math:`G(x) = J^T \nabla^2\psi(\theta(x)) J`,
    :math:`J = \partial\theta/\partial x`.  Families override
    :meth:`ExponentialFamily.fisher` with closed forms and provide closed-form
    geodesics; without them the generic autodiff/ODE geodesics of
    :class:`~infogeo.geometry.metric.Metric` apply.
    """

    def __init__(self, family: "ExponentialFamily"):
        super().__init__(family.dim)
        self.family = family

    def matrix(self, x):
        return self.family.fisher(x)

    def _closed(self) -> bool:
        return self.family.geometry_chart is not None

    def exp(self, x, v):
        if not self._closed():
            return super().exp(x, v)
        fam = self.family
        g = fam.geometry_chart
        xg = fam.to_chart(x, g)
        vg = B.matmul(fam.chart_jacobian(x, g), v)
        return fam.from_chart(fam._geo_exp(B.to_numpy(xg), B.to_numpy(vg)), g, like=x)

    def log(self, x, y):
        if not self._closed():
            return super().log(x, y)
        fam = self.family
        g = fam.geometry_chart
        vg = fam._geo_log(B.to_numpy(fam.to_chart(x, g)), B.to_numpy(fam.to_chart(y, g)))
        return B.solve(fam.chart_jacobian(x, g), B.array(vg, like=x))

    def dist(self, x, y):
        if not self._closed():
            return super().dist(x, y)
        fam = self.family
        g = fam.geometry_chart
        return float(fam._geo_dist(B.to_numpy(fam.to_chart(x, g)), B.to_numpy(fam.to_chart(y, g))))

    def geodesic(self, x, v):
        if not self._closed():
            return super().geodesic(x, v)

        def path(t):
            t_arr = np.asarray(t, dtype=float)
            if np.any(t_arr < 0) or np.any(t_arr > 1):
                raise ValueError("geodesic times must lie in [0, 1]")
            if t_arr.ndim == 0:
                return self.exp(x, float(t_arr) * v)
            return B.stack([self.exp(x, float(ti) * v) for ti in t_arr])
        return path

    def __repr__(self) -> str:
        return f"FisherMetric({self.family.name}, chart={self.family.chart!r})"


# -------------------------------------------------------------------- family
class ExponentialFamily(Manifold):
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
    _standard_chart: Optional[Chart] = None
    _geodesics: Optional[ClosedGeodesics] = None

    def __init__(self, sufficient_statistics: Optional[Callable] = None,
                 log_partition: Optional[Callable] = None, dim: Optional[int] = None, *,
                 log_base_measure: Optional[Callable] = None,
                 natural_domain: Optional[Callable[[Any], bool]] = None,
                 natural_domain_description: str = "",
                 sampler: Optional[Callable] = None, chart: Optional[str] = None,
                 standard_chart: Optional[Chart] = None,
                 geodesics: Optional[ClosedGeodesics] = None,
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
        chart = chart or self.default_chart
        self._set_chart(chart)

    # ------------------------------------------------------------ charts
    def _make_charts(self) -> Dict[str, Chart]:
        """Natural, mean (Legendre dual by Newton) and standard (declared, or the natural) charts."""
        ident = Chart("natural", lambda x: x, lambda th: th, self._check_natural,
                      "natural parameters theta")
        theta_of_eta = legendre_primitive(self)
        mean = Chart("mean", theta_of_eta, self.moments, self._check_mean_generic,
                     "mean parameters eta = E[t(x)]")
        std = self._standard_chart if self._standard_chart is not None else ident
        return {"natural": ident, "mean": mean, "standard": dataclasses.replace(std, name="standard")}

    def _set_chart(self, chart: str) -> None:
        if chart not in self._charts:
            raise ValueError(f"unknown chart {chart!r} for {self.name}; expected one of {sorted(self._charts)}")
        self.chart = chart
        self.metric = FisherMetric(self)

    @property
    def charts(self) -> tuple:
        """Names of the available charts."""
        return tuple(self._charts)

    def in_chart(self, name: str) -> "ExponentialFamily":
        """The same family with points in chart ``name`` (a copy; ``self`` is unchanged)."""
        new = copy.copy(self)
        new._set_chart(name)
        return new

    def to_chart(self, x: Any, name: str):
        """Coordinates in chart ``name`` of the point with coordinates ``x`` in the current chart."""
        if name == self.chart:
            return x
        if name not in self._charts:
            raise ValueError(f"unknown chart {name!r} for {self.name}; expected one of {sorted(self._charts)}")
        direct = self._direct_map(self.chart, name)
        if direct is not None:
            return direct(x)
        return self._charts[name].from_natural(self._charts[self.chart].to_natural(x))

    def from_chart(self, y: Any, name: str, like: Any = None):
        """Coordinates in the current chart of the point with coordinates ``y`` in chart ``name``."""
        y = B.array(y, like=like) if like is not None and not hasattr(y, "_value") else y
        if name == self.chart:
            return y
        direct = self._direct_map(name, self.chart)
        if direct is not None:
            return direct(y)
        return self._charts[self.chart].from_natural(self._charts[name].to_natural(y))

    def _direct_map(self, source: str, target: str) -> Optional[Callable]:
        """A closed-form map between two charts that avoids natural parameters (optional)."""
        return None

    def to_natural(self, x: Any):
        r"""Natural parameters :math:`\theta` of the point ``x``."""
        return self._charts[self.chart].to_natural(x)

    def to_mean(self, x: Any):
        r"""Mean parameters :math:`\eta = E[t(x)]` of the point ``x``."""
        return self.to_chart(x, "mean")

    def chart_jacobian(self, x: Any, name: str):
        r""":math:`\partial y/\partial x` of the chart change ``x -> y = to_chart(x, name)`` (autodiff)."""
        if name == self.chart:
            return B.eye(self.dim, like=x)
        return B.jacobian(lambda z: self.to_chart(z, name), x)

    def push_forward(self, v: TangentVector, name: str) -> TangentVector:
        r"""Express the tangent vector ``v`` in chart ``name``: :math:`J v`."""
        if not isinstance(v, TangentVector):
            raise TypeError(f"push_forward takes a TangentVector, got {type(v).__name__}"
                            + ("; covectors are pulled back (pull_back)" if isinstance(v, Covector) else ""))
        self._check_chart_label(v)
        J = self.chart_jacobian(v.base, name)
        return TangentVector(self.to_chart(v.base, name), B.matmul(J, v.components), name)

    def pull_back(self, w: Covector, x: Any = None) -> Covector:
        r"""Pull a covector back into the current chart: components :math:`J^T w`.

        ``w`` is a covector expressed in another chart (``w.chart``) at the point
        :math:`y`; the result acts on vectors in the current chart at the point
        :math:`x` with ``to_chart(x, w.chart) == y``.  Pass ``x`` when you have it
        (it is checked against ``y``); otherwise it is recovered from ``y``.
        """
        if not isinstance(w, Covector):
            raise TypeError(f"pull_back takes a Covector, got {type(w).__name__}"
                            + ("; vectors are pushed forward (push_forward)" if isinstance(w, TangentVector) else ""))
        name = w.chart
        if name is None:
            raise ValueError("pull_back needs to know the chart the covector is expressed in (w.chart)")
        if x is None:
            x = self.from_chart(w.base, name)
        elif not np.allclose(B.to_numpy(self.to_chart(x, name)), B.to_numpy(w.base), rtol=1e-9, atol=1e-12):
            raise ValueError("pull_back: the covector is attached to another point than x")
        J = self.chart_jacobian(x, name)
        return Covector(x, B.matmul(B.transpose(J), w.components), self.chart)

    def _check_chart_label(self, v) -> None:
        if v.chart is not None and v.chart != self.chart:
            raise ValueError(f"{type(v).__name__} is expressed in chart {v.chart!r} but this manifold is "
                             f"in chart {self.chart!r}; use M.in_chart({v.chart!r})")

    # ------------------------------------------------------------ points
    def check_point(self, x: Any) -> None:
        super().check_point(x)
        check = self._charts[self.chart].check
        if check is not None:
            check(x)

    def _check_natural(self, theta: Any) -> None:
        if not self.in_natural_domain(theta):
            raise ValueError(f"point is outside the natural domain of {self.name}: expected {self._domain_desc}")

    def _check_mean_generic(self, eta: Any) -> None:
        # the moment space is the open image of the natural domain: a point belongs
        # iff the Legendre inversion finds a natural parameter for it
        self._charts["mean"].to_natural(eta)

    def in_natural_domain(self, theta: Any) -> bool:
        """Whether ``theta`` lies in the natural domain."""
        if self._domain_fn is not None:
            return bool(self._domain_fn(theta))
        with np.errstate(all="ignore"):
            try:
                return bool(np.isfinite(float(B.to_numpy(self.log_partition(theta)))))
            except (ValueError, FloatingPointError, np.linalg.LinAlgError):
                return False

    def _natural_start(self, eta: np.ndarray) -> np.ndarray:
        """Starting natural parameter for the Legendre inversion (override for a better guess)."""
        return np.zeros(self.dim)

    def point(self, coords: Any = None, **parameters: Any):
        """A validated point from coordinates in the current chart, or from named parameters.

        ``M.point(shape=2.0, rate=3.0)`` takes the parameter names declared by the
        standard chart (:attr:`Chart.parameters`) and returns the point in the
        current chart.
        """
        if (coords is None) == (not parameters):
            raise ValueError(f"give exactly one of coords or the named parameters {self._parameter_names()}")
        if coords is not None:
            return super().point(coords)
        std = self._charts["standard"]
        shapes = dict(std.parameters or {})
        if set(parameters) != set(shapes):
            raise ValueError(f"{self.name} takes the parameters {self._parameter_names()}, got {sorted(parameters)}")
        flat = []
        for k, shape in shapes.items():
            a = _as_float_array(parameters[k], k)
            if a.shape != tuple(shape):
                raise ValueError(f"{k} must have shape {tuple(shape)}, got {a.shape}")
            flat.append(a.reshape(-1))
        s = np.concatenate(flat)
        if not np.all(np.isfinite(s)):
            raise ValueError(f"parameters of {self.name} must be finite, got {parameters}")
        if std.check is not None:
            std.check(s)
        x = self.from_chart(B.array(s), "standard")
        self.check_point(x)
        return x

    def parameters(self, p: Any) -> Dict[str, Any]:
        """The named parameters of the point ``p`` (floats, or numpy arrays for vector parameters)."""
        shapes = dict(self._charts["standard"].parameters or {})
        if not shapes:
            raise ValueError(f"{self.name} declares no parameter names "
                             "(pass standard_chart=Chart(..., parameters=...))")
        s = np.asarray(B.to_numpy(self.to_chart(p, "standard")), dtype=float)
        out, i = {}, 0
        for k, shape in shapes.items():
            n = int(np.prod(shape, dtype=int))
            out[k] = float(s[i]) if tuple(shape) == () else s[i:i + n].reshape(shape).copy()
            i += n
        return out

    def _parameter_names(self) -> list:
        return list((self._charts["standard"].parameters or {}).keys())

    def natural_point(self, theta: Any):
        """The point (in the current chart) with natural parameters ``theta``."""
        theta = _as_float_array(theta, "natural parameters")
        self._charts["natural"].check(theta)
        return self.from_chart(theta, "natural")

    def random_point(self, rng: Optional[np.random.Generator] = None, scale: float = 1.0):
        """A random point: a random natural parameter (redrawn until inside the domain)."""
        rng = np.random.default_rng(rng)
        for _ in range(1000):
            theta = scale * rng.standard_normal(self.dim)
            if self.in_natural_domain(theta):
                return self.from_chart(B.array(theta), "natural")
        raise RuntimeError(f"could not draw a random point of {self.name}; override random_point")

    # ------------------------------------------------------------ the family
    def log_partition(self, theta: Any):
        r""":math:`\psi(\theta)`."""
        return self._psi_fn(theta)

    def sufficient_statistics(self, x: Any):
        """:math:`t(x)` for a batch of observations (leading sample axis) -> ``(n, dim)``."""
        t = self._t_fn(x)
        t = B.reshape(t, (-1, self.dim)) if getattr(t, "ndim", 2) == 1 and self.dim == 1 else t
        return t

    def log_base_measure(self, x: Any):
        r""":math:`\log h(x)` for a batch of observations -> ``(n,)``."""
        if self._log_h_fn is None:
            return np.zeros(len(x))
        return self._log_h_fn(x)

    def moments(self, theta: Any):
        r"""Mean parameters :math:`\eta = \nabla\psi(\theta)` (Eq. 13; autodiff unless overridden)."""
        return B.grad(self.log_partition, theta)

    def fisher_natural(self, theta: Any):
        r"""Fisher information in natural coordinates, :math:`\nabla^2\psi(\theta)` (Eq. 17)."""
        return B.hessian(self.log_partition, theta)

    def fisher_natural_vp(self, theta: Any, v: Any):
        r""":math:`\nabla^2\psi(\theta)\,v` by a Hessian-vector product (no matrix formed)."""
        return B.hvp(self.log_partition, theta, v)

    def fisher(self, x: Any):
        r"""Fisher matrix at ``x`` in the current chart.

        Natural: :math:`\nabla^2\psi`; mean: :math:`(\nabla^2\psi)^{-1}` at
        :math:`\theta(\eta)` (Legendre duality, Eq. 19); any other chart:
        :math:`J^T \nabla^2\psi\, J` with :math:`J = \partial\theta/\partial x`.
        """
        closed = self._fisher_closed(x)
        if closed is not None:
            return closed
        return self._fisher_autodiff(x)

    def _fisher_closed(self, x: Any):
        """Closed-form Fisher matrix in the current chart (the chart's ``fisher``), or ``None``."""
        fisher = self._charts[self.chart].fisher
        return None if fisher is None else fisher(x)

    def _fisher_autodiff(self, x: Any):
        theta = self.to_natural(x)
        F = self.fisher_natural(theta)
        if self.chart == "natural":
            return F
        if self.chart == "mean":
            return B.inv(F)
        J = B.jacobian(self.to_natural, x)
        return B.matmul(B.transpose(J), B.matmul(F, J))

    # ------------------------------------------------------------ statistics
    def kl(self, p: Any, q: Any):
        r""":math:`\mathrm{KL}(p\|q)`; points in the current chart.

        Generic: the Bregman divergence of :math:`\psi`,
        :math:`\psi(\theta_q) - \psi(\theta_p) - \nabla\psi(\theta_p)^T(\theta_q - \theta_p)`.
        """
        return Bregman(self.log_partition)(self.to_natural(q), self.to_natural(p))

    def log_prob(self, p: Any, x: Any):
        r""":math:`\log p(x) = \theta^T t(x) - \psi(\theta) + \log h(x)` for a batch ``x`` -> ``(n,)``."""
        theta = self.to_natural(p)
        t = self.sufficient_statistics(x)
        return B.matmul(t, theta) - self.log_partition(theta) + self.log_base_measure(x)

    def score(self, p: Any, x: Any):
        r"""Scores :math:`\nabla_x \log p(x)` in the current chart, shape ``(n, dim)``.

        In natural coordinates :math:`t(x) - \eta` (Eq. 15); in another chart pulled
        back by the chart Jacobian, :math:`J^T(t(x) - \eta)`.
        """
        theta = self.to_natural(p)
        diff = self.sufficient_statistics(x) - self.moments(theta)[None, :]
        if self.chart == "natural":
            return diff
        J = B.jacobian(self.to_natural, p)
        return B.matmul(diff, J)

    def log_likelihood(self, p: Any, x: Any):
        """Mean log-likelihood of a batch of observations (Eq. 14, divided by n)."""
        return B.mean(self.log_prob(p, x))

    def sample(self, p: Any, n: int, rng: Optional[np.random.Generator] = None):
        """``n`` observations drawn from the distribution ``p`` (seeded by ``rng``)."""
        if self._sampler is None:
            raise NotImplementedError(f"{self.name} has no sampler; pass sampler= to ExponentialFamily")
        self.check_point(p)
        return self._sampler(B.to_numpy(self.to_natural(p)), int(n), np.random.default_rng(rng))

    def fisher_monte_carlo(self, p: Any, n: int, rng: Optional[np.random.Generator] = None):
        r"""Monte Carlo Fisher: the sample covariance of the score (Eq. 8), current chart."""
        s = B.to_numpy(self.score(p, self.sample(p, n, rng)))
        return s.T @ s / len(s)

    # ------------------------------------------------------------ closed geometry hooks
    # built-in families override these; prototyped ones pass geodesics=ClosedGeodesics(...)
    def _geo_exp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self._geodesics is None:
            raise NotImplementedError
        return np.asarray(self._geodesics.exp(x, v), dtype=float)

    def _geo_log(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self._geodesics is None:
            raise NotImplementedError
        return np.asarray(self._geodesics.log(x, y), dtype=float)

    def _geo_dist(self, x: np.ndarray, y: np.ndarray) -> float:
        if self._geodesics is not None and self._geodesics.dist is not None:
            return float(self._geodesics.dist(x, y))
        return float(np.sqrt(max(0.0, self._geo_sqnorm(x, self._geo_log(x, y)))))

    def _geo_sqnorm(self, x: np.ndarray, v: np.ndarray) -> float:
        fam = self.in_chart(self.geometry_chart)
        return float(v @ B.to_numpy(fam.fisher(B.array(x))) @ v)

    def __repr__(self) -> str:
        return f"<{self.name} in the {self.chart} chart, dim={self.dim}>"
