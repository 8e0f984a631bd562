r"""Natural-gradient preconditioning of the gradients a torch training loop leaves in ``.grad``.

``loss.backward()`` leaves the differential of the loss, a covector :math:`g`.
:meth:`Preconditioner.step` replaces it by the damped natural-gradient direction

.. math:: \delta = \nu\,(C + \lambda I)^{-1} g,\qquad
          \nu = \min\Big(1, \sqrt{\kappa \big/ \textstyle\sum_\ell \eta_\ell^2\, \delta_\ell^T g_\ell}\Big),

(the ``sharp`` of the covector under a curvature :math:`C` of the network's pullback metric, Amari 1998; Martens &
Grosse 2015), so that any torch optimizer, LR scheduler, gradient clipping or AMP ``GradScaler`` then acts on
:math:`\delta`. :math:`\nu` is the trust region (*KL clipping*, Ba et al. 2017; :mod:`.kl_clipping`): the step
:math:`-\eta\delta` changes the model's predictions by a KL divergence of about
:math:`\tfrac12\eta^2\delta^T(C+\lambda I)\delta \le \kappa` = ``kl_clip``, with :math:`\eta_\ell` the learning rate
of each parameter's group.

Costs, with the defaults: statistics every ``curvature_update_period`` (10) steps from hooks on the user's own
forward and backward (:mod:`.hooks`; one extra backward for the Monte Carlo Fisher, no extra forward), damped factor
inverses every ``inverse_update_period`` (100) steps (both also at steps 1, 2, 4, 8, ... before the first 100, where
the network moves most, unless you set the periods), and every step two :math:`d\times d` products per layer, or
products with the batch's rows on small batches (:mod:`.rows`).  ``curvature="cg"``: an extra forward pass and
``cg_max_iter`` CG products a step.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union, cast

import torch

from .. import distributed as dd
from .. import fsdp
from .._params import all_finite, working_dtype
from ..output_metrics import output_metric as _resolve_output_metric
from ..space import ParameterSpace
from . import kl_clipping, state
from .damping import Damping
from .estimate import CurvatureEstimate
from .hooks import ForwardRecorder, unwrap
from .precondition_step import take_step
from .settings import (CURVATURES, FISHER, KINDS, check_settings, check_support, kind_defaults, refuse_torch_options,
                       trainable)

__all__ = ["Preconditioner"]

Params = Dict[str, torch.Tensor]


class Preconditioner(state.NotCopyable):
    r"""Replace the gradients of ``model`` by natural-gradient directions, in place (module docstring).

    Parameters
    ----------
    model : torch.nn.Module
        The network (may be wrapped in ``DistributedDataParallel``).  Hooks are registered
        on it; :meth:`remove` takes them off.
    curvature : {"kfac", "ekfac", "diag", "block", "dense", "cg", "shampoo", "soap"}
        Representation :math:`C` of the metric (EKFAC: its scales are averaged like the factors);
        ``"shampoo"``/``"soap"``: Shampoo's metric of the gradients in ``.grad`` (:mod:`~infogeo.nn.curvature.shampoo`;
        ``fisher`` and ``output_metric`` are not used).
    damping : float
        Tikhonov damping :math:`\lambda > 0`; raised after a failure and brought back afterwards
        (:class:`~.damping.Damping`, reachable as :attr:`damper`).
    fisher : {"mc", "exact", "empirical"}
        True Fisher by sampling targets from the model, exactly, or the empirical Fisher:
        in the plain loop from the gradient of the loss at the output in the user's own backward,
        read as the batch mean of per-example losses; in the explicit form
        ``step(inputs=x, targets=y)`` from the targets and the output metric's loss.
    output_metric : str or OutputMetric
        Metric on the outputs (``"categorical"`` for logits, ``"bernoulli"``, ``"euclidean"``, ...).
    output_fn : callable, optional
        Picks the outputs from what the model returns (e.g. ``lambda out: out.logits``).
    params : iterable of tensors, optional
        Precondition only these parameters of ``model`` (default: all of them), those with ``requires_grad=True``
        now: a step where one of the others has a gradient (unfrozen since) raises, saying to build it again.
    lr : float, callable, torch.optim.Optimizer or None
        Learning rate(s) :math:`\eta` for the trust region: a number, a function returning one
        (to follow a scheduler), or the optimizer whose groups' ``lr`` are read every step.
        ``None``: :math:`\eta = 1` (a warning says so when ``kl_clip`` is set).
    kl_clip : float or None
        Trust-region radius :math:`\kappa` (``None`` turns clipping off; it bounds a KL only under the model's
        Fisher, so pass ``None`` with ``"shampoo"``/``"soap"``).
    ema_decay : float
        Statistics are averaged as :math:`C \leftarrow \beta C + (1-\beta) C_\text{new}` at each refresh, with
        :math:`\beta` raised to :math:`\Delta/10` where the refresh comes :math:`\Delta > 10` steps after the last
        (the average remembers about as many steps whatever the period).  The model's statistics are
        bias-corrected as Adam's moments are (the average started from zero, divided by the weight it has
        gathered): the first refreshes are averaged about evenly instead of the first batch's weighing
        :math:`\beta^k` after :math:`k` refreshes; gradient statistics (``"shampoo"``, ``"soap"``) are averaged
        uncorrected, as those methods define them.
    curvature_update_period, inverse_update_period : int, optional
        Refresh periods (steps) of the statistics and of the factorisations (default: 10 and 100; for the
        gradient statistics of ``"shampoo"``/``"soap"``, 1 and 10, the kind's ``optimizer_defaults``; with
        ``factors_only=True``, the factorisation alone used, the statistics period defaults to the
        factorisation period).  Before the first ``inverse_update_period``: both at steps 1, 2, 4, 8, ... if
        neither is given, else a factorisation at every statistics refresh.
    samples : int
        Monte Carlo samples per example (``fisher="mc"``).
    min_damping, max_damping, damping_increase, damping_recovery
        Bounds of the damping, its factor after a failure, and its factor of return to the base
        after each good step.
    max_retries : int
        Retries of a failed solve in one step, each with the damping raised (at most
        ``1 + max_retries`` solves); then the step is skipped.
    factor_dtype : torch.dtype, optional
        Precision the statistics are kept in (default: the parameters', float32 for half/bfloat16), and of
        the factorisations and solves, at least float32: ``torch.bfloat16`` halves the statistics' memory,
        decomposed and applied in float32; ``torch.float16`` is refused (its range does not hold them).
    placement : {"memory", "comm"}
        Work division over ranks under ``torch.distributed`` (:mod:`infogeo.nn.distributed`).
    seed : int
        Seed of the Monte Carlo generator (offset by the rank; saved in :meth:`state_dict`).
    grad_scaler : torch.amp.GradScaler, optional
        The AMP scaler of the loop (call ``scaler.unscale_(opt)`` before :meth:`step`: a step on gradients it has
        not unscaled raises, :func:`~.guards.check_unscaled`): the empirical Fisher's columns are divided by its
        scale, and a non-finite gradient (an overflow the scaler will skip) skips the step, the damping kept.
    options
        ``cg_max_iter`` for ``"cg"``, and options of the representation.  K-FAC's default here is
        ``inverse="tikhonov"``, the factored damping of Martens & Grosse (2015); ``inverse="eigen"``
        inverts the damped Kronecker block exactly, at twice the cost per step.

    Notes
    -----
    With another torch optimizer, take its step only when this one says so::

        loss.backward()
        if pre.step():        # .grad now holds the direction; False: skipped, .grad set to None
            opt.step()        # (a torch optimizer skips parameters whose .grad is None anyway)

    :meth:`precondition` returns the direction instead.  Under ``torch.distributed`` every decision of
    a step is agreed over the ranks (:mod:`infogeo.nn.distributed`).
    """

    def __init__(self, model: torch.nn.Module, curvature: str = "kfac", damping: float = 1e-3, *,
                 fisher: str = "mc", output_metric: Any = "categorical", params: Optional[Iterable[Any]] = None,
                 lr: Union[None, float, Callable[[], float], torch.optim.Optimizer] = None,
                 kl_clip: Optional[float] = 1e-3, ema_decay: float = 0.95,
                 curvature_update_period: Optional[int] = None, inverse_update_period: Optional[int] = None,
                 samples: int = 1, min_damping: float = 1e-8,
                 max_damping: float = 1e8, damping_increase: float = 10.0, damping_recovery: float = 0.9,
                 max_retries: int = 5, factor_dtype: Optional[torch.dtype] = None, placement: str = "memory",
                 seed: int = 0, cg_max_iter: int = 20, grad_scaler: Any = None,
                 output_fn: Optional[Callable[[Any], torch.Tensor]] = None, **options: Any):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"Preconditioner needs the torch.nn.Module whose gradients it preconditions, "
                            f"got {type(model).__name__}")
        refuse_torch_options("Preconditioner", options)   # before the warnings about the settings
        # the kind's own defaults, e.g. Shampoo's statistics every step
        curvature_update_period, inverse_update_period, geometric, defaults = kind_defaults(
            curvature, curvature_update_period, inverse_update_period, basis_only=options.get("factors_only") is True)
        s = check_settings(damping=damping, min_damping=min_damping, max_damping=max_damping, curvature=curvature,
                           fisher=fisher, ema_decay=ema_decay, kl_clip=kl_clip, damping_increase=damping_increase,
                           damping_recovery=damping_recovery, placement=placement, samples=samples,
                           curvature_update_period=curvature_update_period, max_retries=max_retries,
                           inverse_update_period=inverse_update_period, seed=seed, cg_max_iter=cg_max_iter,
                           factor_dtype=factor_dtype, lr=lr, output_fn=output_fn, grad_scaler=grad_scaler)
        self.model, self.module = model, unwrap(model)
        #: the parameters frozen at construction, left out and watched: a step refuses them unfrozen (:mod:`.guards`)
        named, self.frozen = trainable(self.module, params)
        self.names, self.params = [n for n, _ in named], [p for _, p in named]
        #: whether some parameters are sharded by ``fully_shard`` (their gradients are gathered, :mod:`~infogeo.nn.fsdp`)
        self.sharded = any(fsdp.is_dtensor(p) for p in self.params)
        self.by_hand = not self.sharded and not isinstance(model, torch.nn.parallel.DistributedDataParallel)  # kept equal?
        self.kind = CURVATURES[str(curvature).lower()]
        check_support(self.kind, curvature, self.sharded)
        self.fisher = FISHER[str(fisher).lower()]
        self.lr, self.kl_clip = lr, None if kl_clip is None else float(kl_clip)
        kl_clipping.check_lr(lr, kl_clip)
        kl_clipping.check_covers(lr, self.names, self.params)
        #: the one owner of the damping (failures raise it, good steps bring it back, Levenberg–Marquardt moves it)
        self.damper = Damping(damping, min_damping, max_damping, damping_increase, damping_recovery)
        self.max_retries = s["max_retries"]
        self.factor_dtype = factor_dtype or working_dtype(self.params[0].dtype)   # float32 for half precision
        for key, value in defaults.items():
            options.setdefault(key, value)
        KINDS[self.kind].check_options(options)
        self.placement, self.grad_scaler, self.output_fn = placement, grad_scaler, output_fn
        self.state: Dict[str, Any] = {"step": 0}
        #: the settings of the optimizer that owns this preconditioner, which the ranks must share (numbers and
        #: strings; :func:`~.agreement.settings_codes`): a NaturalGradient's step rule and Adam's rates
        self.owner_settings: Callable[[], tuple] = tuple
        #: why the last step was skipped (``None`` if it was taken): "gradient", "overflow" or "direction"
        self.skip_reason: Optional[str] = None
        self._rows: Dict[str, tuple] = {}
        #: the running curvature: statistics, their averages and factorisation (:class:`~.estimate.CurvatureEstimate`)
        self.estimate = CurvatureEstimate(
            self.module, self.names, self.kind, self.fisher, _resolve_output_metric(output_metric),
            output_fn=output_fn, samples=s["samples"], ema_decay=float(ema_decay),
            curvature_update_period=s["curvature_update_period"], inverse_update_period=s["inverse_update_period"],
            factor_dtype=self.factor_dtype, placement=placement, cg_max_iter=s["cg_max_iter"], options=options,
            generator=torch.Generator(device=self.params[0].device).manual_seed(s["seed"] + dd.rank()),
            loss_scale=lambda: float(grad_scaler.get_scale()) if grad_scaler is not None else 1.0, geometric=geometric)

    # ------------------------------------------------------------ properties
    @property
    def damping(self) -> float:
        r"""Current Tikhonov damping :math:`\lambda` (:attr:`damper` changes it)."""
        return self.damper.value

    @property
    def base_damping(self) -> float:
        r"""The damping a raised :math:`\lambda` returns to."""
        return self.damper.base

    @property
    def steps(self) -> int:
        """Steps counted so far (taken or skipped)."""
        return int(self.state["step"])

    def remove(self) -> None:
        """Take the hooks off the model."""
        self.recorder.remove()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Forward and backward passes inside this block (an optimizer's own evaluations) are not recorded."""
        with self.recorder.paused():
            yield

    def use_batch(self) -> None:
        """The next step names its batch (``inputs=``): forget what the hooks recorded and record nothing more."""
        self.recorder.armed = False
        self.estimate.pending.clear()

    def learning_rates(self) -> Dict[int, float]:
        """Learning rate per parameter id (for the trust region), checked finite and positive."""
        return kl_clipping.learning_rates(self.lr, self.params)

    # ------------------------------------------------------------ curvature
    @property
    def curvature(self):
        """The averaged curvature statistics (a curvature representation), ``None`` before the first step."""
        return self.estimate.curvature

    @property
    def solver(self):
        """The factorised curvature the directions come from."""
        return self.estimate.solver

    @property
    def recorder(self) -> ForwardRecorder:
        """The hooks on the model (:class:`~.hooks.ForwardRecorder`)."""
        return self.estimate.recorder

    def space(self, inputs: Any = None, targets: Optional[torch.Tensor] = None) -> ParameterSpace:
        """The parameter space on a batch (default: the last one the model saw with autograd enabled)."""
        return self.estimate.space(inputs, targets)

    def untracked(self) -> List[Tuple[str, List[Tuple[str, torch.Tensor]]]]:
        """The layers this step's forwards called only with autograd disabled (:meth:`~.hooks.ForwardRecorder.untracked`),
        each with its preconditioned parameters by name (:func:`~.guards.check_tracked`)."""
        paths = set(self.recorder.untracked())
        if not paths:
            return []
        mine = dict(zip(self.names, self.params))
        return [(l.path, [(n, mine[n]) for n in l.params.values() if n in mine])
                for l in self.recorder.layers if l.path in paths]

    def keep_rows(self, grads: Params) -> None:
        """Keep the batch's rows for :meth:`take_rows` (none under FSDP2: there the rule gathers the gradients)."""
        self._rows = {} if self.sharded else self.estimate.rows_of(grads)

    def take_rows(self) -> Dict[str, tuple]:
        """The rows ``(b, a)`` of the batch that give each Kronecker block's gradient (by weight name), kept by
        the last :meth:`update` for a step rule that rotates the gradients; given once, then forgotten here."""
        rows, self._rows = self._rows, {}
        return rows

    def curvature_mv(self, v: Params) -> Params:
        """:math:`Cv` with the current curvature (undamped), ``{name: tensor}``."""
        return self.estimate.mv(v)

    # ------------------------------------------------------------ directions
    def direction(self, grads: Params) -> Optional[Params]:
        r""":math:`(C + \lambda I)^{-1} g` in the gradients' dtype, retrying with a raised damping until it is finite.

        Returns ``None`` when no curvature is available or ``1 + max_retries`` solves failed (the curvature is kept).
        Under ``torch.distributed`` the ranks agree on each outcome."""
        given, grads = grads, fsdp.gather(grads)
        if self.solver is not None and not all_finite(grads.values()):   # a solve would only carry the NaN along
            dd.agree(ValueError("the gradient to precondition contains NaN or inf"))
        delta = self.estimate.direction(grads, self.damper, self.max_retries)
        return None if delta is None else fsdp.shards_like(delta, given)

    def clip_scale(self, grads: Params, delta: Params) -> float:
        r"""Trust-region factor :math:`\nu = \min(1, \sqrt{\kappa / \sum \eta^2\delta^Tg})` (1 without ``kl_clip``)."""
        return kl_clipping.scale(self.kl_clip, self.learning_rates(), dict(zip(self.names, self.params)), grads, delta)

    def grads(self) -> Params:
        """The gradients in ``.grad`` (zeros where there is none), by parameter name."""
        out = {}
        for n, p in zip(self.names, self.params):
            g = p.grad
            if g is not None and g.is_sparse:
                raise ValueError(f"the gradient of {n!r} is a sparse tensor (an Embedding with sparse=True?); "
                                 f"the natural gradient needs dense gradients: use sparse=False")
            out[n] = g.detach() if g is not None else torch.zeros_like(p)
        return out

    def finish_step(self, ok: bool) -> None:
        """Count the step (a good one brings a raised damping back), and arm the hooks for the next refresh."""
        if ok:
            self.damper.succeed()
        self.state["step"] += 1
        self.estimate.forget_batch()
        self.estimate.arm(self.steps)

    @torch.no_grad()
    def precondition(self, grads: Optional[Params] = None, inputs: Any = None,
                     targets: Optional[torch.Tensor] = None, *,
                     error: Optional[BaseException] = None) -> Optional[Params]:
        r"""This step's direction :math:`\nu(C+\lambda I)^{-1}g`, ``{name: tensor}``, or ``None`` if it is skipped.

        ``grads`` default to :meth:`grads`; ``inputs`` (and ``targets`` for the empirical Fisher) name the
        batch (default: the last forward/backward of the model).  The step is counted either way, and
        :attr:`skip_reason` says why a step was skipped: ``"gradient"`` (NaN or inf in it: the damping is
        raised), ``"overflow"`` (the same under a ``grad_scaler``: no raise) or ``"direction"`` (no finite
        solve).  ``error``: an exception the caller met before the step (e.g. in its closure), agreed over
        the ranks with the step's own checks.  ``.grad`` is left alone.
        """
        return take_step(self, grads, inputs, targets, error, solve=True)

    @torch.no_grad()
    def update(self, grads: Optional[Params] = None, inputs: Any = None, targets: Optional[torch.Tensor] = None,
               *, error: Optional[BaseException] = None) -> bool:
        """This step's statistics and factorisation, as :meth:`precondition` makes them, without its solve.

        For step rules that use the factorisation itself (:attr:`solver`, e.g. its eigenbases) instead of the
        direction.  Returns ``False`` if the step is skipped (:attr:`skip_reason`: ``"gradient"`` or
        ``"overflow"``); the step is counted either way.  Such a rule reads every block on every rank, so a
        preconditioner that updates keeps every block's statistics there (not only its owner's,
        :attr:`~.estimate.CurvatureEstimate.owner_only`): decided at its first statistics, after which one that
        solved with owner-only statistics refuses to update.
        """
        est = self.estimate
        if est.owner_only:
            if est.curvature is not None:   # (the same on every rank: no rank goes on alone)
                raise ValueError("update() reads every block's factorisation on every rank, and this preconditioner "
                                 "keeps each block's statistics on its owner rank alone (FSDP2, K-FAC or EKFAC, "
                                 "placement='memory', its steps so far solved by precondition() or step()); build "
                                 "one for update() alone, or with placement='comm'")
            est.read_everywhere = True
        return take_step(self, grads, inputs, targets, error, solve=False) is not None

    @torch.no_grad()
    def step(self, inputs: Any = None, targets: Optional[torch.Tensor] = None) -> bool:
        """Replace each ``.grad`` by the clipped natural-gradient direction; ``False`` if the step was skipped.

        A skipped step sets the ``.grad`` of the preconditioned parameters to ``None``, so that a torch optimizer
        stepping anyway leaves them (and its moments) alone; take its step only when this returns ``True`` (class
        docstring).  A non-finite gradient also raises the damping."""
        delta = self.precondition(inputs=inputs, targets=targets)
        if delta is None:
            if self.skip_reason != "overflow":
                why = {"gradient": f"the gradient contains NaN or inf; damping raised to {self.damping:.3g}",
                       "direction": "no finite natural-gradient direction (no curvature yet, or the solve failed)"}
                warnings.warn(f"Preconditioner: {why[cast(str, self.skip_reason)]}; step skipped (.grad set to None)",
                              RuntimeWarning, stacklevel=3)
            for p in self.params:
                p.grad = None
            return False
        for g, d in ((p.grad, delta[n]) for n, p in zip(self.names, self.params) if p.grad is not None):
            g.copy_(d)   # a parameter without a gradient stays without one (an optimizer skips it)
        return True

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Tensors and Python numbers only (loadable with ``torch.load(weights_only=True)``); see :mod:`.state`."""
        return state.checkpoint(self)

    def load_state_dict(self, saved: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after checking it against this preconditioner (a ``ValueError`` naming the
        first mismatch, nothing changed); the argument is neither changed nor kept.  The curvature objects are
        rebuilt at the next step."""
        state.load(self, saved)
