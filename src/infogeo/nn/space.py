r"""The parameter space of a torch module: a manifold whose metric is pulled back from the outputs.

A network with parameters :math:`w` and a batch :math:`x_1..x_N` defines the map
:math:`w \mapsto z = (f(w, x_n))_n`.  Given a metric :math:`G_z` on outputs, the
parameter space carries the pullback metric (Amari 1998; Martens 2020)

.. math:: G(w) = \frac1N \sum_{n=1}^N J_n^T\, G_z(z_n)\, J_n,\qquad J_n = \partial f(w, x_n)/\partial w,

the Gauss-Newton matrix for a Euclidean :math:`G_z`, the network Fisher for a
likelihood's Fisher metric.  :class:`ParameterSpace` is an
:class:`~infogeo.geometry.manifold.Manifold`: points, tangent vectors and covectors
have ``{name: tensor}`` components shaped like ``model.named_parameters()``,
``differential`` is backprop, ``retract`` is addition, and the solvers of
:mod:`infogeo.solvers` run on it (natural gradient is gradient descent under this
metric).

The model is only ever *evaluated*, by :func:`torch.func.functional_call` with
the parameter values of the point; it is never modified.  Normalisation layers
in training mode (BatchNorm) would update their running statistics in place on
every evaluation: they are given copies of those buffers instead.  Such layers
also couple the examples of a batch (batch statistics), so :math:`z_n` depends on
every :math:`x_{n'}`: the implicit and dense metrics (products with the whole
batch's Jacobian) stay exact, while the per-example curvatures (diagonal, K-FAC,
block) are refused with an error naming the layer.  Dropout active in training
mode makes the map random; a warning says so.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Tuple, Union

import numpy as np
import torch

from ..geometry.linearization import Linearization, same_state, versions
from ..geometry.manifold import Manifold
from ..geometry.points import positive_int, random_generator
from ..geometry.vectors import Covector, TangentVector
from ._layers import check_per_example, warn_random_layers
from ._outputs import bind_output_metric, confirm_outputs, factor_columns, with_statistics_copies
from .batch import Batch, MissingTargets, as_targets
from ._params import CurrentPoint, ParamLayout, Params
from .curvature import Curvature, build as _build_curvature
from .network_metric import NetworkMetric
from .output_metrics import OutputMetric, output_metric as _resolve_metric

__all__ = ["ParameterSpace", "NetworkMetric"]


Cost = Callable[[Params], torch.Tensor]


def _replaced(view: torch.Tensor, p: torch.Tensor) -> bool:
    """Whether the parameter ``p`` holds another tensor than ``view`` was taken of (another storage, shape or
    dtype); a tensor whose storage cannot be read (a DTensor's) is taken as the same."""
    try:
        return view.data_ptr() != p.data_ptr() or view.shape != p.shape or view.dtype != p.dtype
    except RuntimeError:
        return False


class ParameterSpace(Manifold):
    r"""Parameters of ``model`` as a manifold, with the pullback metric of ``output_metric`` over ``data``.

    Parameters
    ----------
    model : torch.nn.Module
        The network; only parameters with ``requires_grad=True`` are coordinates.
    output_metric : str, OutputMetric, Divergence or torch loss
        :math:`G_z` on the model's outputs: ``"categorical"`` (logits), ``"bernoulli"``,
        ``"euclidean"`` (Gauss-Newton), ``"gaussian"``, ``"gaussian_learned"``, an
        :class:`~infogeo.nn.output_metrics.OutputMetric`, a divergence, or a torch loss
        (``nn.CrossEntropyLoss()``, ``nn.NLLLoss()``, ``nn.BCEWithLogitsLoss()``,
        ``nn.MSELoss()``, ``nn.GaussianNLLLoss()``, with their reduction, ignored positions
        and class weights; see :mod:`infogeo.nn.output_metrics.losses`).
    data : tensor, tuple of tensors, dict or Batch
        The batch :math:`x_1..x_N` (first axis = examples): positional inputs, or a dict of keyword
        inputs (:class:`~infogeo.nn.batch.Batch`; a model whose one argument is a dict takes
        ``data=(d,)``); the model must return outputs of shape
        ``(N, *middle, m)``, the class/feature axis last.
    targets : tensor, optional
        Training targets: needed for the loss, the differential, the empirical Fisher,
        and for torch losses with ``ignore_index`` or class weights.
    params : iterable of str or of parameters, optional
        Restrict the coordinates to these parameters (default: all trainable ones).
    cg_max_iter, cg_rtol : int, float
        Truncation of conjugate gradient in ``metric.sharp`` / ``metric.solve``.
    output_fn : callable, optional
        Picks the outputs :math:`z` from what the model returns (e.g. ``lambda out: out.logits``
        for a model returning a dict or a tuple).

    Notes
    -----
    The manifold protocol: ``point(x)`` validates a parameter dict;
    ``differential(cost, x)`` is the :class:`~infogeo.geometry.vectors.Covector`
    :math:`d\,\mathrm{cost}_x` by backprop (with no arguments: the differential of the
    batch loss at the current parameters); ``retract(x, v)`` is :math:`x + v`;
    ``metric`` is the :class:`~infogeo.nn.network_metric.NetworkMetric`.  Geodesics
    (``exp``, ``log``, ``dist``) of the network metric are not available.

    Examples
    --------
    >>> space = ig.nn.ParameterSpace(model, torch.nn.CrossEntropyLoss(), data=X, targets=y)  # doctest: +SKIP
    >>> nat = space.metric.sharp(space.differential(), damping=1e-3)                       # doctest: +SKIP
    >>> res = ig.solvers.GradientDescent(damping=1e-3).minimize(space, space.cost(), space.point)  # doctest: +SKIP
    """

    def __init__(self, model: torch.nn.Module, output_metric: Union[str, OutputMetric, Any] = "categorical",
                 data: Any = None, *, targets: Optional[torch.Tensor] = None,
                 params: Optional[Iterable[Any]] = None, cg_max_iter: int = 100, cg_rtol: float = 1e-10,
                 output_fn: Optional[Callable[[Any], torch.Tensor]] = None):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ParameterSpace needs a torch.nn.Module, got {type(model).__name__}")
        if data is None:
            raise ValueError("ParameterSpace needs a batch: pass data=X (inputs of shape (N, ...))")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if params is not None:
            wanted = list(params)
            ids = {id(p) for p in wanted if isinstance(p, torch.Tensor)}
            keys = {p for p in wanted if isinstance(p, str)}
            named = [(n, p) for n, p in named if n in keys or id(p) in ids]
        if not named:
            raise ValueError("the model has no parameters with requires_grad=True (among those selected); "
                             "a parameter space needs at least one trainable parameter")
        warn_random_layers(model)
        self.model = model
        self.names = [n for n, _ in named]
        # a view of the model's current values (no copy); the model is never written to
        self._params = named
        self._point = CurrentPoint(self, {n: p.detach() for n, p in named})
        self.layout = ParamLayout.of(self._point)
        self.batch, self.output_fn = Batch.of(data), output_fn
        metric = _resolve_metric(output_metric)
        self.cg_max_iter, self.cg_rtol = positive_int(cg_max_iter, "cg_max_iter"), float(cg_rtol)
        p0 = next(iter(self.point.values()))
        self.device, self.dtype = p0.device, p0.dtype
        self.targets = targets = as_targets(targets, self.device)
        self._outputs: Optional[Tuple[Any, torch.Tensor]] = None
        #: the output metric as given, before :func:`~._outputs.bind_output_metric` bound it to the outputs
        self.unbound_metric = self.output_metric = metric
        self._bound_outputs: Optional[Tuple[tuple, torch.dtype]] = None
        self.output_metric, self.batch_size = bind_output_metric(self, metric, targets)
        super().__init__(self.layout.size, NetworkMetric(self), name="ParameterSpace")

    # ------------------------------------------------------------ the map
    @property
    def point(self) -> CurrentPoint:  # type: ignore[override]
        """The model's current parameters (views); calling it is the manifold protocol's ``point(coords)``.

        A parameter whose tensor was replaced (``p.data = ...``: ``vector_to_parameters``, ``model.double()``) is
        viewed anew; an in-place update is seen by its version counter, except one through ``p.data`` (which
        hides it from autograd and from the counter alike): update in place under ``torch.no_grad()``."""
        if any(_replaced(self._point[n], p) for n, p in self._params):
            self._point = CurrentPoint(self, {n: p.detach() for n, p in self._params})
        return self._point

    @property
    def outputs(self) -> torch.Tensor:
        """The network outputs :math:`z` at the point (computed on first use, again after in-place updates)."""
        state = self._state()
        if self._outputs is None or not same_state(self._outputs[0], state):
            with torch.no_grad():
                try:
                    z = self.function(self.point)
                except Exception as exc:  # the model's own error, with the shapes that caused it
                    raise ValueError(f"model(*data) failed for data of shape(s) {self.batch.shapes()}: {exc}"
                                     ) from exc
            self.confirm_outputs(z)
            self._outputs = (state, z)
        return self._outputs[1]

    def _state(self) -> Tuple[list, Tuple]:
        """The tensors the map depends on (point, data, buffers) and their version counters."""
        tensors = [self.point[n] for n in self.names] + self.batch.tensors() + list(self.model.buffers())
        return tensors, versions(tensors)

    def confirm_outputs(self, z: Any) -> None:
        """The outputs ``z`` of a real forward checked against those the output metric was bound to (bound again
        where their shape differs, :func:`~._outputs.confirm_outputs`)."""
        confirm_outputs(self, z)

    def function(self, params: Params) -> torch.Tensor:
        """Outputs :math:`z = f(w, x)` for parameter values ``params`` (dict), model untouched (BatchNorm
        layers in training mode update copies of their running statistics)."""
        return self.evaluate(self.batch, with_statistics_copies(self.model, params))

    def evaluate(self, batch: Batch, params: Params) -> Any:
        """The outputs :math:`z` (``output_fn`` applied) of the model on ``batch`` with parameter values ``params``."""
        out = batch.call(self.model, params)
        return out if self.output_fn is None else self.output_fn(out)

    def check_per_example(self) -> None:
        """Raise ``ValueError`` if a layer couples the examples of the batch (per-example curvature undefined)."""
        check_per_example(self.model)

    # ------------------------------------------------------------ the manifold
    def check_point(self, x: Any) -> None:
        """Raise ``ValueError`` unless ``x`` is a dict of finite tensors with this space's names and shapes."""
        if not isinstance(x, dict):
            raise ValueError(f"a point of a ParameterSpace is a dict name -> tensor, got {type(x).__name__}")
        self.layout.check(x, "the point")
        if not all(bool(torch.isfinite(t).all()) for t in x.values()):
            raise ValueError("the point (parameters) contains NaN or inf")

    def _as_point(self, coords: Any = None, what: str = "the point") -> Params:
        """A validated point: ``None`` (the model's current parameters), a dict, or a flat vector in layout order."""
        if coords is None:
            coords = self.point
        if isinstance(coords, torch.Tensor):
            if tuple(coords.shape) != (self.dim,):
                raise ValueError(f"a flat point must have shape ({self.dim},), got {tuple(coords.shape)}")
            coords = self.layout.unflatten(coords)
        self.check_point(coords)
        return dict(coords)  # a plain dict (a pytree for torch.func), sharing the tensors

    def random_point(self, rng: Union[None, int, np.random.Generator, torch.Generator] = None,
                     scale: float = 1.0) -> Params:
        """The current parameters plus Gaussian noise of standard deviation ``scale``; ``rng`` a torch
        ``Generator``, or a seed / numpy ``Generator`` (as the other manifolds take) that seeds one."""
        if rng is not None and not isinstance(rng, torch.Generator):
            seed = int(random_generator(rng).integers(2 ** 63 - 1))
            rng = torch.Generator().manual_seed(seed)
        on_cpu = rng is not None and rng.device.type == "cpu"
        return {n: t + scale * torch.randn(t.shape, dtype=t.dtype, device="cpu" if on_cpu else t.device,
                                           generator=rng).to(t.device)
                for n, t in self.point.items()}

    def _at(self, args: tuple, cls: type, what: str):
        if len(args) == 1:
            x, c = self.point, args[0]
        elif len(args) == 2:
            x, c = args
        else:
            raise TypeError(f"{what} takes (components) or (x, components)")
        self.layout.check(c, f"{what} components")
        return cls(x, c)

    def vector(self, *args: Any) -> TangentVector:
        """A :class:`TangentVector`: ``vector(x, components)``, or ``vector(components)`` at the current point."""
        return self._at(args, TangentVector, "tangent vector")

    def covector(self, *args: Any) -> Covector:
        """A :class:`Covector`: ``covector(x, components)``, or ``covector(components)`` at the current point."""
        return self._at(args, Covector, "covector")

    def tangent(self, components: Params) -> TangentVector:
        """Wrap ``{name: tensor}`` components as a tangent vector at the current point."""
        return self.vector(components)

    def cost(self, targets: Optional[torch.Tensor] = None) -> Cost:
        r"""The batch loss as a function of the parameters, :math:`w \mapsto \mathcal L(w)` (for the solvers)."""
        t = self._targets(targets)
        return lambda params: self.output_metric.loss(self.function(params), t).mean()

    def value_and_differential(self, f: Cost, x: Params) -> Tuple[torch.Tensor, Covector]:
        """``(f(x), df_x)`` by one forward and one backward pass; ``f`` maps a parameter dict to a scalar tensor.

        The components of parameters that ``f`` does not depend on are zero: a constant cost (a tensor with no
        autograd graph) has the zero differential, laid out like ``x``.
        """
        self.check_point(x)
        leaves = {n: x[n].detach().requires_grad_(True) for n in self.names}
        with torch.enable_grad():
            value = f(leaves)
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise ValueError("the cost must return a scalar tensor")
            if not bool(torch.isfinite(value)):
                raise ValueError(f"the cost is {float(value)} at this point (NaN/inf)")
            # a value outside the graph does not depend on x (torch.autograd.grad would raise on it)
            g = (torch.autograd.grad(value, list(leaves.values()), allow_unused=True) if value.requires_grad
                 else (None,) * len(leaves))
        comps = {n: (gi if gi is not None else torch.zeros_like(leaves[n])) for n, gi in zip(self.names, g)}
        if not all(bool(torch.isfinite(t).all()) for t in comps.values()):
            raise ValueError("the differential of the cost contains NaN or inf at this point")
        return value.detach().reshape(()), Covector(x, comps)

    def differential(self, cost: Union[Cost, torch.Tensor, None] = None, x: Optional[Params] = None, *,
                     targets: Optional[torch.Tensor] = None) -> Covector:
        r"""The differential :math:`d\,\mathrm{cost}_x`, a :class:`Covector` (backprop).

        With no ``cost``, the differential of the batch loss (the mean over examples of
        the output metric's loss) at ``x`` (default: the current parameters).  A tensor
        in place of ``cost`` is taken as ``targets`` (the earlier signature).  A cost that
        does not depend on the parameters has the zero differential.
        """
        if isinstance(cost, torch.Tensor):
            cost, targets = None, cost
        if cost is None:
            cost = self.cost(targets)
        return self.value_and_differential(cost, self.point if x is None else x)[1]

    def retract(self, x: Params, v: TangentVector) -> Params:
        """:math:`x + v`: parameters are a vector space, so the straight line is a retraction."""
        self._check_vector(x, v, "retract")
        return {n: x[n] + v.components[n] for n in self.names}

    def _check_vector(self, x: Any, v: Any, what: str) -> None:
        # the point by structure only (no finiteness reduction, which would sync a GPU at every step)
        if isinstance(x, torch.Tensor):   # point() lays a flat vector out; the other methods take the dict
            raise TypeError(f"{what} takes the point x as a dict name -> tensor, got a tensor of shape "
                            f"{tuple(x.shape)}; lay a flat vector out with space.point(x)")
        self.layout.check(x, f"the point x of {what}")
        if not isinstance(v, TangentVector):
            raise TypeError(f"{what} needs a TangentVector, got {type(v).__name__}"
                            + ("; convert it with metric.sharp(covector)" if isinstance(v, Covector) else ""))
        self.layout.check(v.components, "tangent vector components")

    def linearize(self, x: Optional[Params] = None, mode: str = "reverse") -> Linearization:
        r"""The network linearised at ``x`` (default: the current point): outputs, :math:`Jv`, :math:`J^Tu`.

        Every evaluation uses copies of the BatchNorm running statistics, so the model is
        untouched.  ``mode="reverse"``: one recorded forward pass that every product reuses
        (many products); ``mode="forward"``: one forward-mode pass per :math:`Jv` (a few
        products, no :math:`J^Tu`).  See :class:`~infogeo.geometry.linearization.Linearization`.
        """
        x = self.point if x is None else x
        return Linearization(self.function, {n: x[n] for n in self.names}, mode=mode)

    def _no_geodesics(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("geodesics of a network's pullback metric are not available; move with "
                                  "retract (GradientDescent(update='retraction'))")

    exp = log = dist = geodesic = _no_geodesics

    def loss(self, targets: Optional[torch.Tensor] = None, params: Optional[Params] = None) -> torch.Tensor:
        """Mean negative log-likelihood of the output metric's likelihood over the batch."""
        t = self._targets(targets)
        return self.output_metric.loss(self.function(self.point if params is None else params), t).mean()

    def _targets(self, targets):
        t = self.targets if targets is None else as_targets(targets, self.device)
        if t is None:
            raise MissingTargets("this needs training targets: pass targets=... to ParameterSpace or to this call")
        self.output_metric.check_targets(self.outputs, t)
        return t

    # ------------------------------------------------------------ curvature
    def factors(self, z: torch.Tensor, method: str = "exact", samples: int = 1,
                targets: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        r"""Output columns :math:`s_{kn}` whose pullback :math:`\frac1N\sum_{k,n} J_n^Ts s^TJ_n` is the curvature.

        ``"exact"``: square-root columns of :math:`G_z` (true Fisher / GGN);
        ``"mc"``: ``samples`` draws scaled by :math:`1/\sqrt{S}` (true Fisher by the
        Pullback Sampling Trick, unbiased); ``"empirical"``: the loss gradient
        :math:`\nabla_z\ell(z_{nt}, y_{nt})` per position (empirical Fisher, Kunstner et al. 2019).

        Raises
        ------
        TypeError
            If ``z`` is not a floating tensor (the outputs, e.g. ``space.outputs``).
        ValueError
            If ``z`` has no batch axis (shape ``(N, ..., m)`` expected).
        """
        return factor_columns(self.output_metric, z, method, samples, lambda: self._targets(targets), generator)

    def curvature(self, kind: str = "implicit", method: str = "exact", *, samples: int = 1,
                  targets: Optional[torch.Tensor] = None, generator: Optional[torch.Generator] = None,
                  **options: Any) -> Curvature:
        r"""A representation of the metric at the point.

        Parameters
        ----------
        kind : {"implicit", "dense", "diag", "block", "kfac", "ekfac"}
            A row of the kinds table (:mod:`~infogeo.nn.curvature.kinds`): ``implicit`` (or ``cg``):
            matrix-free products (CG solves); ``dense``: the full matrix; ``diag``: its diagonal;
            ``block``: a dense block per layer; ``kfac``: Kronecker factors for the layers whose rule
            has them (:mod:`~infogeo.nn.curvature.layers`: Linear, Hugging Face Conv1D, convolutions),
            exact diagonal blocks elsewhere; ``ekfac``: K-FAC's eigenbasis with exact scales.
        method : {"exact", "mc", "empirical"}
            True Fisher / GGN exactly, by Monte Carlo (``samples`` draws), or the
            empirical Fisher (needs ``targets``).  See also :meth:`gradient_covariance`.
        options
            Passed to the representation (e.g. ``chunk_size``, ``max_block_size``).
        """
        return _build_curvature(self, kind, method, samples=samples, targets=targets, generator=generator, **options)

    def true_fisher(self, kind: str = "implicit", method: str = "exact", **kw: Any) -> Curvature:
        r"""True Fisher :math:`F = \mathbb E_{x}\,\mathbb E_{t\sim r(\cdot|x)}[\mathcal Dw\,\mathcal Dw^T]` (targets sampled from the model)."""
        if method not in ("exact", "mc"):
            raise ValueError("the true Fisher is computed exactly ('exact') or by sampling targets ('mc')")
        return self.curvature(kind, method, **kw)

    def empirical_fisher(self, kind: str = "implicit", targets: Optional[torch.Tensor] = None,
                         **kw: Any) -> Curvature:
        r"""Empirical Fisher :math:`F_{emp} = \frac1N\sum_n \nabla\mathcal J_n\nabla\mathcal J_n^T`, training targets (Kunstner et al. 2019)."""
        return self.curvature(kind, "empirical", targets=targets, **kw)

    def gradient_covariance(self, kind: str = "dense", targets: Optional[torch.Tensor] = None,
                            **kw: Any) -> Curvature:
        r"""Gradient covariance :math:`C = F_{emp} - \bar g\bar g^T` , :math:`\bar g` the batch gradient.

        Supported for ``kind`` in ``{"implicit", "dense", "diag", "block"}``.
        """
        F = self.empirical_fisher(kind, targets=targets, **kw)
        return F.minus_outer(self.differential(targets).components)

    def __repr__(self):
        return (f"ParameterSpace({type(self.model).__name__}, {self.output_metric!r}, "
                f"batch={self.batch_size}, {self.layout!r})")
