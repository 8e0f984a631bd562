r"""The running curvature of a :class:`~.preconditioner.Preconditioner`: recorded, averaged, factorised.

Statistics of a batch are recorded by hooks on the user's own forward and backward
(:mod:`.hooks`) or computed on a named batch (one forward); under ``torch.distributed`` they are averaged over the
ranks (each weighted by its batch size, or by its rows: K-FAC's :math:`A` by the positions the loss keeps), then over
steps (:math:`C \leftarrow \beta C + (1-\beta) C_\text{new}`), and factorised on schedule, on
the owners of the blocks (:mod:`infogeo.nn.distributed`); under FSDP2 K-FAC's and EKFAC's are reduced to those
owners alone (:attr:`CurvatureEstimate.owner_only`).  Work that can fail on one rank
only (:meth:`CurvatureEstimate.local`) is kept apart from the collectives
(:meth:`CurvatureEstimate.install`), so that the ranks agree on the outcome in between.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Union, cast

import torch

from ...linalg import NotPositiveDefiniteError
from .. import distributed as dd
from .. import fsdp
from ..batch import Batch, MissingTargets
from .._params import ParamLayout, all_finite, working_dtype
from ..curvature import _backprop as bp
from ..curvature import kinds
from ..output_metrics.ignored import KeptPositions, bound_from_gradient, empirical_scale, one_scale, warn_unlike_the_metric
from ..space import ParameterSpace
from . import state
from .damping import Damping
from .hooks import ForwardRecorder, OutputGradients
from .batches import BackpropagatedBatches, BatchSpaces, empty_batch, gradients_reset
from .agreement import InBackward
from .pool import Deferred, StatisticsPool
from .rows import RowCapture
from .unreached import Unreached
from .schedule import RefreshSchedule
from .settings import CAPTURED

__all__ = ["CurvatureEstimate"]

Params = Dict[str, torch.Tensor]


class CurvatureEstimate(RefreshSchedule):
    """The curvature statistics and their factorisation (module docstring); built by the preconditioner."""

    def __init__(self, module: torch.nn.Module, names: List[str], kind: str, fisher: str, output_metric: Any, *,
                 output_fn: Optional[Callable], samples: int, ema_decay: float, curvature_update_period: int,
                 inverse_update_period: int, factor_dtype: torch.dtype, placement: str, cg_max_iter: int,
                 generator: torch.Generator, loss_scale: Callable[[], float], options: Dict[str, Any],
                 geometric: bool = False):
        super().__init__(ema_decay, curvature_update_period, inverse_update_period, geometric)
        self.module, self.names, self.kind, self.fisher = module, names, kind, fisher
        self.output_metric, self.output_fn, self.samples = output_metric, output_fn, samples
        self.factor_dtype, self.placement, self.cg_max_iter = factor_dtype, placement, cg_max_iter
        #: solves, factorisations and directions: the factor dtype, or float32 for statistics kept in half precision
        self.compute_dtype = working_dtype(factor_dtype)
        self.generator, self.loss_scale, self.options = generator, loss_scale, options
        #: the dtype the eigenbases are held in where the factors are held as their factorisation
        #: (:attr:`factorised_only`; ``"auto"``: :func:`~infogeo.nn._params.held_dtype`; ``None``: as computed)
        self.basis_dtype: Union[None, str, torch.dtype] = None
        self.curvature: Any = None    # the averaged statistics (a curvature representation)
        self.solver: Any = None       # the factorised curvature the directions come from
        #: statistics loaded from a checkpoint, waiting for a structure (:func:`.state.restore`)
        self.loaded: Optional[Dict[str, Any]] = None
        #: the hooks record the next batch for its structure only, with a generator of their own (after a load, on a
        #: step that does not refresh: no forward of its own, which FSDP2 would refuse; the sampling state untouched)
        self.template_only = False
        self.pending = StatisticsPool()   # statistics recorded by this step's backward passes
        self.unreached = Unreached()   # parameters with a gradient but no curvature are pointed out
        self.owners: Optional[List[int]] = None   # block owners under torch.distributed
        #: a step rule reads every block's factorisation on every rank (``"eigen-adam"``'s eigenbases): the
        #: statistics stay replicated (:attr:`owner_only`)
        self.read_everywhere = False
        #: the number of curvature statistics of the checkpoint loaded (:mod:`.state`), while they wait
        self.loaded_total = 0
        self.spaces = BatchSpaces(module, names, output_metric, cg_max_iter=cg_max_iter, output_fn=output_fn,
                                  implicit=kind == "implicit")
        #: statistics of the gradients in ``.grad`` (Shampoo's), not of the model's output metric
        self.from_gradients = kinds.KINDS[kind].statistics == "gradient"
        shapes = dict(module.named_parameters())
        self.layout = ParamLayout(names, [tuple(shapes[n].shape) for n in names])
        self._params = [shapes[n] for n in names]
        self.sharded = bool(fsdp.managed(module))   # by fully_shard (FSDP2)
        self.recorder = ForwardRecorder(module, names, self._on_backward, self._on_forward, output_fn)
        self.recorder.armed = self.captures
        self._read = BackpropagatedBatches(output_metric)   # for a kind built by a forward of its own
        if not self.captures:
            self.recorder.on_gradient = self._read.read
        if kind in ("kfac", "ekfac"):   # Kronecker blocks solve small batches from their rows
            self.recorder.rows = RowCapture.of(self.recorder.layers)  # type: ignore[assignment]

    @property
    def owner_only(self) -> bool:
        """Whether each block's statistics are kept on its owner alone (KAISA's memory-optimised placement,
        Pauloski et al. 2021, carried to the statistics): under FSDP2, ``placement="memory"``, K-FAC or EKFAC, and a
        step rule that only reads the directions (the owners solve them), so that no rank reads another's blocks
        (EKFAC's bases are broadcast at a refresh for every rank to measure its scales in, then dropped:
        :meth:`_refresh_scales`)."""
        return self.sharded and self.placement == "memory" and self.kind in ("kfac", "ekfac") and \
            not self.read_everywhere and dd.world_size() > 1

    def owners_for(self, curvature) -> List[int]:
        """The owner of each block of ``curvature``, balancing the cost of factorising them (the same on every
        rank: a function of the blocks' shapes)."""
        return dd.assign_owners([float(sum(math.prod(s) for s in b.stat_shapes().values())) ** 1.5
                                 for b in curvature.blocks])

    def owned_keys(self, curvature, owners: Optional[List[int]] = None) -> List[str]:
        """The keys of ``curvature``'s statistics (:meth:`~infogeo.nn.curvature.blockwise.BlockCurvature.stats`)
        that this rank holds under :attr:`owner_only` (``owners``: default :meth:`owners_for`)."""
        owners = self.owners_for(curvature) if owners is None else owners
        return [k for k in curvature.stat_shapes() if _owner(owners, k) == dd.rank()]

    def owning(self, curvature):
        """``curvature`` with this rank's own blocks kept and the others' reduced to their structure, the owners
        (:meth:`owners_for`) set: after statistics held on every rank for a moment (a change of structure, a load)."""
        self.owners = self.owners_for(curvature)
        return curvature.keeping([o == dd.rank() for o in self.owners])

    def _not_finite(self, curvature, owned: bool) -> bool:
        """Whether the reduced statistics hold NaN or inf: checked where they are held (``owned``: on the owners,
        the outcome agreed over the ranks, so every rank takes the same branch)."""
        bad = not curvature.is_finite()
        return dd.agree(None, [bad])[0][0] if owned else bad

    @property
    def captures(self) -> bool:
        """Whether the statistics are recorded from the model's own forward and backward (hooks)."""
        return self.kind in CAPTURED

    def space(self, inputs: Any = None, targets: Optional[torch.Tensor] = None, fresh: bool = False) -> ParameterSpace:
        """The parameter space on a batch (default: the last one the model saw with autograd enabled), kept per batch
        signature (:class:`.batches.BatchSpaces`; ``fresh``: one of its own)."""
        return self.spaces.get(self.recorder.inputs if inputs is None else inputs, targets, fresh)

    def _build(self, space: ParameterSpace, generator: Optional[torch.Generator] = None, **given: Any):
        if space.batch_size == 0:
            raise empty_batch()
        with bp.constant_batch_statistics():   # BatchNorm in training mode, as K-FAC optimizers treat it
            return space.curvature(self.kind, self.fisher, samples=self.samples, **self.options, **given,
                                   **self._scale_options(), generator=self.generator if generator is None else generator)

    def _mixing(self, step: int) -> float:
        """:meth:`mixing` for the statistics this estimate keeps (the first start the average)."""
        return self.mixing(step, first=self.curvature is None, corrected=not self.from_gradients)

    def refactorise_due(self, step: int) -> bool:
        """Whether step ``step`` factorises the curvature anew (a new basis for EKFAC)."""
        return self.solver is None or step % self.inverse_update_period == 0 or self.early(step)

    def _scale_options(self) -> Dict[str, Any]:
        r"""EKFAC measures its scales in the basis the solves will use (George et al. 2018), known on every rank only
        in :meth:`install`: they wait for it (``defer``)."""
        return {"defer": True} if self.kind == "ekfac" else {}

    def _on_forward(self) -> None:
        """At each forward: what earlier backward passes recorded is dropped if their gradients were reset since
        (:func:`.batches.gradients_reset`), else built now (:meth:`.pool.StatisticsPool.settle`); the outputs of
        forwards not yet back-propagated stay, as their backward may come."""
        if (self.pending.recorded or self._read.entries) and gradients_reset(self._params):
            self._drop_recorded()
        self.pending.settle()

    def _on_backward(self, z: torch.Tensor, calls: Dict[str, list], inputs: tuple, grad: torch.Tensor) -> None:
        r"""Called from the user's backward at the model output: the statistics of that batch, no forward pass.

        The empirical Fisher's columns are the loss gradients per example, :math:`N\,\partial L/\partial z_n` for the
        batch-mean loss :math:`L` (torch's default).  With one column (no middle axes) the user's backward delivers
        each layer's share itself (:class:`.hooks.OutputGradients`); else the columns are back-propagated here.
        """
        sync = InBackward(self.sharded)   # under FSDP2 the ranks agree before the columns' pass (its collectives)
        if self.pending.failed:   # an earlier batch of this step failed: the step raises it (the others stop too)
            sync.end(RuntimeError("an earlier batch of this step failed"))
            return
        try:
            n, scale = z.shape[0], self.loss_scale()
            warn_unlike_the_metric(self.output_metric, grad, owner=self)
            masked = bound_from_gradient(self.output_metric, z, grad)   # ignored positions, class weights (or None)
            column = (empirical_scale(self.output_metric.bind(z) if masked is None else masked, z) * (n / scale)
                      if self.fisher == "empirical" else None)   # the empirical Fisher's columns' scale
            given = {} if column is None else {"columns": grad.detach().unsqueeze(0) * column}

            def build(output_grads=None):
                with bp.recorded_forward(z, calls, output_grads, before_columns=sync.ready), self.recorder.paused(), \
                        fsdp.no_reshard_in_backward(self.module):
                    space = self.space(inputs)
                    own, space.output_metric = space.output_metric, space.output_metric if masked is None else masked
                    try:
                        return self._build(space, torch.Generator(self.generator.device) if self.template_only
                                           else None, **given)
                    finally:
                        space.output_metric = own
                        self.spaces.let_go(space)
            if column is not None and z.dim() == 2 and n > 0 and one_scale(column):   # one factor for all the kept
                grads = OutputGradients(calls, float(column.max()))
                self.pending.add(Deferred(lambda: build(grads), grads.remove), n)
            else:
                self.pending.add(build(), n)
            error = sync.end(None)
        except Exception as exc:  # raised again by the step, not inside the user's backward
            error = sync.end(exc)
        if error is not None:
            self.pending.fail(error)

    def statistics(self, inputs: Any, targets: Optional[torch.Tensor],
                   generator: Optional[torch.Generator] = None, grads: Optional[Params] = None) -> Tuple[Any, int]:
        """New statistics and their example count: recorded during the backward if available, else computed on
        ``inputs`` (one forward); gradient statistics from ``grads``."""
        if self.from_gradients:
            if grads is None:
                raise ValueError(f"curvature {self.kind!r} is built from the gradients: pass them to the step")
            return kinds.KINDS[self.kind].load().from_gradients(self.layout, grads, **self.options), self.batch_size(inputs)
        batch = None
        try:
            pending, n = self.pending.take(build=generator is None or self.template_only)
            if pending is not None:
                return pending, n

            def build(inputs: Any, kept: Optional[KeptPositions], alone: bool = True) -> Tuple[Any, int]:
                nonlocal batch
                space = self.space(inputs, targets) if alone else self.space(inputs, fresh=True)
                batch, own = space.batch, space.output_metric
                space.output_metric = own if kept is None else kept.metric(own)
                try:
                    return self._build(space, generator), space.batch_size
                finally:
                    space.output_metric = own
                    self.spaces.let_go(space)
            # the batches the user's backward reached (own-forward kinds), else the named or last batch
            return self._read.pooled(build) if inputs is targets is None and self._read.entries else build(inputs, None)
        except MissingTargets as exc:   # said in the optimizers' terms
            raise MissingTargets.in_optimizer(self.kind, self.fisher) from exc
        except (RuntimeError, IndexError) as exc:   # torch's error on this batch: name the batch
            if isinstance(exc, dd.PeerFailure):   # another rank's batch failed (recorded under FSDP2), not this one
                raise
            batch = batch or (Batch.of(inputs) if inputs is not None else self.recorder.inputs)
            sig = [(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in batch.tensors()] if batch else "?"
            raise ValueError(f"the curvature statistics could not be computed on the batch (inputs of shape and "
                             f"dtype {sig}): {type(exc).__name__}: {exc}") from exc

    def local(self, step: int, inputs: Any, targets: Optional[torch.Tensor],
              grads: Optional[Params] = None) -> Tuple[Optional[Tuple[Any, int]], Any]:
        """What step ``step`` needs from this rank's batch (and gradients ``grads``) alone (no collective): ``(new
        statistics and their count, or None; the structure for loaded statistics, or None)``."""
        if self.kind == "implicit":
            return self.statistics(inputs, targets), None
        if self.loaded is None:
            due = self.curvature is None or self.statistics_due(step)
            return (self.statistics(inputs, targets, grads=grads) if due else None), None
        if self.statistics_due(step):
            new = self.statistics(inputs, targets, grads=grads)
            template = new[0]
        else:   # recorded by the hooks, or else a throw-away computation: with a generator of its own either way
            new, template = None, self.statistics(inputs, targets, generator=torch.Generator(self.generator.device),
                                                  grads=grads)[0]
        self.template_only = False
        state.check_fits(self, template)
        return new, template

    def from_gathered(self, step: int, inputs: Any, targets: Optional[torch.Tensor],
                      grads: Params) -> Tuple[Params, Optional[Tuple[Any, int]], Any]:
        """:meth:`local` for statistics of whole gradient matrices (Shampoo's) when the gradients are sharded
        (FSDP2): ``(the gathered gradients, new statistics, template)``.  The gather is a collective, so every rank
        calls this once the ranks have agreed that the step goes ahead, and a failure here is agreed in turn."""
        gathered, error = fsdp.gather(grads), None
        new: Optional[Tuple[Any, int]] = None
        template: Any = None
        try:
            new, template = self.local(step, inputs, targets, gathered)
        except Exception as exc:
            error = exc
        dd.agree(error, (), ())
        return gathered, new, template

    def _cast(self, curvature):
        stats = curvature.stats()
        if all(t.dtype == self.factor_dtype for t in stats.values()):
            return curvature
        return curvature.with_stats({k: t.to(self.factor_dtype) for k, t in stats.items()})

    def _all_reduce(self, curvature, weight: float, owners: Optional[List[int]] = None):
        """The statistics of the union of the ranks' batches: each rank's weighted by its share ``weight`` of the examples,
        or of the rows of a mean over rows (``stat_rows``); gradient statistics are already averaged by DDP.
        ``owners`` (:attr:`owner_only`): each block's reduced to its owner, the others kept as their structure."""
        if dd.world_size() == 1 or self.from_gradients:
            return curvature
        stats, rows = curvature.stats(), dd.row_shares(getattr(curvature, "stat_rows", dict)())
        local = [t if (w := rows.get(k, weight)) == 1.0 else t * w for k, t in stats.items()]
        if owners is None:
            return curvature.with_stats(dict(zip(stats, dd.all_reduce_mean(local))))
        reduced = dd.reduce_mean_to_owners(local, [_owner(owners, k) for k in stats])
        mine = [o == dd.rank() for o in owners]
        return curvature.keeping(mine).with_stats({k: t for k, t in zip(stats, reduced) if t is not None})

    def _gathered(self, curvature: Any, bases_of: Any = None) -> Any:
        """Every block's statistics on every rank, each broadcast by its owner (:attr:`owner_only`, for a change of
        structure, which is averaged as with replicated statistics); ``bases_of``: the owner-only solver whose
        factorisations (EKFAC's bases) the gathered blocks adopt, as a replicated solver would hold them."""
        shapes, mine, owners = curvature.stat_shapes(), curvature.stats(), cast(List[int], self.owners)
        device = curvature._reference().device
        out: Dict[str, torch.Tensor] = {}
        for r in sorted(set(owners)):
            keys = [k for k in shapes if _owner(owners, k) == r]
            local = [mine[k] if r == dd.rank() else torch.empty(shapes[k], dtype=self.factor_dtype, device=device)
                     for k in keys]
            out.update(zip(keys, dd.broadcast_from(r, local)))
        gathered = curvature.with_stats(out)
        if bases_of is None or not hasattr(gathered, "blocks"):
            return gathered
        for r in sorted(set(owners)):   # (the Kronecker blocks: known by their FACTORISATION_KEYS)
            blocks = [i for i, b in enumerate(gathered.blocks)
                      if owners[i] == r and hasattr(b, "FACTORISATION_KEYS")]
            local = [t for i in blocks for t in (bases_of.blocks[i].factorisation(0.0) if r == dd.rank()
                                                 else gathered.blocks[i].factorisation_like())]
            shared = dd.broadcast_from(r, local)
            for i in blocks:
                k = len(gathered.blocks[i].FACTORISATION_KEYS)
                gathered.blocks[i].adopt(shared[:k], 0.0)
                shared = shared[k:]
        return gathered

    def factorise(self, curvature, damping: Optional[float]):
        """The solver: factorised here, on the owners (``"comm"``), or lazily by the owners (``"memory"``);
        ``damping=None``: what has a factorisation keeps it (a checkpoint's), the rest is factorised at its first
        solve, as after a change of damping."""
        if self.factorised_only and hasattr(curvature, "hold_factorised"):
            curvature.hold_factorised(self.basis_dtype)   # before a factorisation made now or later (by the owners)
        blocks = getattr(curvature, "blocks", None)
        if dd.world_size() == 1 or blocks is None:
            return curvature.precompute(damping)
        if self.owners is None or len(self.owners) != len(blocks):
            self.owners = self.owners_for(curvature)
        if self.placement == "comm" and damping is not None:
            dd.share_factorisations(blocks, self.owners, damping)
        return curvature

    def _refresh_scales(self, step: int, local: Any, weight: float, damping: float) -> bool:
        """EKFAC's refresh (:meth:`~infogeo.nn.curvature.ekfac.EKFAC.refreshed`): the factors averaged over the ranks
        and steps, the scales measured on every rank in the basis of the averaged factors (or the solver's, between
        factorisations) and averaged in turn.  Owner-only (:attr:`owner_only`): the factors are reduced to each
        block's owner, which factorises them and broadcasts the basis; every rank measures its scales in it, and
        they are reduced to the owner, which alone keeps factors, basis and scales (the bases travel once per
        refresh, as large as the factors, and are dropped elsewhere once measured in).  ``False``: the factors
        were not finite on some rank (agreed), and are discarded."""
        owned = self.owner_only
        if owned and self.curvature is not None and not self.curvature.same_structure(local):
            # another structure (a layer one of the batches did not reach): averaged as when replicated, in the
            # bases the solver holds, then owned again
            self.curvature = self.solver = self._gathered(self.curvature, bases_of=self.solver)
            owned = False
        owners = self.owners_for(local) if owned else None
        reduced = self._cast(self._all_reduce(local, weight, owners))   # the factors; the scales are measured next
        if self._not_finite(reduced, owned):
            warnings.warn("Preconditioner: the curvature statistics contain NaN or inf; they are discarded "
                          "and the last good ones kept", RuntimeWarning, stacklevel=5)
            return False
        weighted = (lambda ts: ts) if weight == 1.0 else (lambda ts: [t * weight for t in ts])
        kron = [i for i, b in enumerate(local.blocks) if hasattr(b, "pending")]   # the blocks with measured scales
        reduce: Optional[Callable[[List[torch.Tensor]], List[Any]]] = None
        share: Optional[Callable[..., List[Tuple[Any, Any]]]] = None
        if owners is not None:   # the scales reduced to the owners, measured in the bases they broadcast
            reduce = lambda ts: dd.reduce_mean_to_owners(weighted(ts), [owners[i] for i in kron])  # noqa: E731
            share = lambda idx, held, error: \
                self._bases_from_owners(reduced, owners, idx, held, error, local)  # noqa: E731
        elif dd.world_size() > 1:
            reduce = lambda ts: dd.all_reduce_mean(weighted(ts))  # noqa: E731
        renew = self.refactorise_due(step)
        self.curvature = reduced.refreshed(self.curvature, self._mixing(step), reduce,
                                           basis_of=None if renew else self.solver, local=local if owned else None,
                                           share=share, dtype=self.factor_dtype if owned else None)
        if owned:
            self.owners = owners
        elif self.owner_only:   # after a change of structure: each block's statistics on its owner again
            self.curvature = self.owning(self.curvature)
        self.solver = self.factorise(self.curvature, damping) if renew else self.curvature
        return True

    def _bases_from_owners(self, curvature: Any, owners: List[int], index: List[int], held: List[Any],
                           error: Optional[BaseException], local: Any) -> List[Tuple[Any, Any]]:
        """The eigenbases ``(U_A, U_G)`` of ``curvature``'s Kronecker blocks at ``index`` on every rank, each
        broadcast by its owner from ``held`` (this rank's own blocks', ``None`` elsewhere; a diagonal factor's is
        ``None``, the identity), in the compute dtype.  ``error``, an owner's failure to compute its bases, is
        agreed after the broadcasts (placeholders sent): every rank raises."""
        device, me = local._reference().device, dd.rank()
        sides = [[k for k in ("A", "G") if len(curvature.blocks[i].stat_shapes()[k]) == 2] for i in index]
        out: List[Tuple[Any, Any]] = [(None, None)] * len(index)
        for r in sorted({owners[i] for i in index}):
            mine = [j for j, i in enumerate(index) if owners[i] == r]
            send = []
            for j in mine:
                U = dict(zip(("A", "G"), held[j] or (None, None)))
                shapes = curvature.blocks[index[j]].stat_shapes()
                send += [U[k].to(self.compute_dtype) if r == me and U[k] is not None else
                         torch.zeros(shapes[k], dtype=self.compute_dtype, device=device) for k in sides[j]]
            got = iter(dd.broadcast_from(r, send))
            for j in mine:
                U = {k: next(got) for k in sides[j]}
                out[j] = (U.get("A"), U.get("G"))
        dd.agree(error)
        return out

    def install(self, step: int, new: Optional[Tuple[Any, int]], template: Any, weight: float,
                damping: float) -> None:
        """Average the new statistics into the curvature (over the ranks, then over steps) and refactorise when
        due; ``template``: the structure for loaded statistics."""
        if self.kind == "implicit":
            self.solver = None if new is None else new[0]
            return
        if template is not None:
            state.restore(self, template, damping)
        if new is not None and getattr(new[0], "deferred", False):
            if not self._refresh_scales(step, new[0], weight, damping) and self.curvature is not None and \
                    self.refactorise_due(step):   # discarded: factorised on schedule all the same
                self.solver = self.factorise(self.curvature, damping)
            return
        owned = self.owner_only and new is not None
        if new is not None and owned and self.curvature is not None and not self.curvature.same_structure(new[0]):
            # another structure (a layer one of the batches did not reach): averaged as when replicated
            self.curvature, owned = self._gathered(self.curvature), False
        if new is not None:
            owners = self.owners_for(new[0]) if owned else None
            fresh = self._cast(self._all_reduce(new[0], weight, owners))
            if self._not_finite(fresh, owned):
                warnings.warn("Preconditioner: the curvature statistics contain NaN or inf; they are discarded "
                              "and the last good ones kept", RuntimeWarning, stacklevel=4)
            elif owned and self.curvature is None:   # they start the average, on their owners
                self.mixing(step, first=True)
                self.curvature, self.solver, self.owners = fresh, None, owners
            elif self.curvature is None or not self.curvature.same_structure(fresh):
                pair = getattr(fresh, "aligned", lambda old: None)(self.curvature)
                if pair is None:   # another structure: start over from this batch
                    self.mixing(step, first=True)
                    self.curvature, self.solver = fresh, None
                else:   # layers unused in one of the batches: averaged as their kind, then factorised anew
                    self.curvature, self.solver = pair[0].ema(pair[1], self._mixing(step)), None
            else:
                self.curvature = self.curvature.ema(fresh, self._mixing(step))
                if self.solver is not None and self.solver is not self.curvature and \
                        hasattr(self.solver, "share_factors") and self.solver.same_structure(self.curvature):
                    self.solver.share_factors(self.curvature)   # its decompositions stay; its old factors go
        if self.owner_only and self.curvature is not None and not owned and new is not None:
            # after a change of structure: each block's statistics on its owner again (a new structure's solver,
            # None, is factorised below; a kept one has the kept structure's owners)
            self.curvature = self.owning(self.curvature)
        if self.curvature is not None and (self.solver is None or step % self.inverse_update_period == 0 or
                                           (new is not None and self.early(step))):
            self.solver = self.factorise(self.curvature, damping)

    def mv(self, v: Params) -> Params:
        """:math:`Cv` with the current curvature (undamped), ``{name: tensor}``."""
        C = self.curvature if self.curvature is not None else self.solver
        if C is None:
            raise ValueError("no curvature yet: take a step first")
        return C.mv(None, v)

    def rows_of(self, g: Params) -> Dict[str, tuple]:
        """The batch's rows ``(b, a)`` that give the gradient in ``g`` of each Kronecker block of the factorisation
        (:mod:`.rows`; the others have none), by the block's weight name."""
        blocks, rows = getattr(self.solver, "blocks", None), self.recorder.rows
        if rows is None or not blocks:
            return {}
        g = {n: t.to(self.compute_dtype) for n, t in g.items()}
        return {b.weight: r for b, r in zip(blocks, rows.plan(blocks, g)) if r is not None}

    def solve(self, g: Params, damping: float, errors: list) -> Params:
        r""":math:`(C+\lambda I)^{-1}g` in the compute dtype (the factor dtype, at least float32): from the batch's
        rows where that pays (:mod:`.rows`), on the blocks' owners under the ``"memory"`` placement.  Errors met on owned blocks go to ``errors``."""
        g = {n: t.to(self.compute_dtype) for n, t in g.items()}
        blocks = getattr(self.solver, "blocks", None)
        rows = self.recorder.rows if blocks is not None else None
        plan = rows.plan(blocks, g) if rows is not None else None   # the rows that give each block's gradient
        if dd.world_size() > 1 and blocks is not None and self.placement == "memory":
            return dd.solve_on_owners(blocks, cast(List[int], self.owners), g, damping, plan, errors)
        try:
            return self.solver.solve(None, g, damping) if plan is None else rows.solve(blocks, g, damping, plan)
        except (RuntimeError, IndexError) as exc:   # torch's error (e.g. a product on the batch): said clearly
            raise ValueError(f"the {self.kind} solve failed on this batch: {type(exc).__name__}: {exc}") from exc

    def direction(self, grads: Params, damper: Damping, max_retries: int) -> Optional[Params]:
        r""":math:`(C+\lambda I)^{-1}g` of finite gradients, in their dtype; a solve that fails or is not finite on
        any rank (agreed) raises the damping and is retried, at most ``max_retries`` times (the curvature is kept).
        ``None``: no factorisation yet, or every try failed."""
        if self.solver is None:
            return None
        for attempt in range(1 + max_retries):
            errors: list = []
            delta, why = None, "a non-finite direction"
            try:
                delta = self.solve(grads, damper.value, errors)
            except NotPositiveDefiniteError as exc:
                why = str(exc)
            except Exception as exc:
                errors.append(exc)
            (bad,), _ = dd.agree(errors[0] if errors else None, [delta is None or not all_finite(delta.values())])
            if not bad:   # agreed finite on every rank
                self.unreached.check(self.curvature, grads)
                return {n: cast(Params, delta)[n].to(grads[n].dtype) for n in grads}
            if attempt == max_retries or damper.saturated:
                break
            damper.fail()
            warnings.warn(f"Preconditioner: {why}; damping raised to {damper.value:.3g} (curvature kept)",
                          RuntimeWarning, stacklevel=4)
        return None

    def forget_batch(self) -> None:
        """Drop what the hooks hold of this step's batch (outputs awaiting a backward, and what was recorded)."""
        self.recorder.release()
        self._drop_recorded()

    def _drop_recorded(self) -> None:
        """Drop the statistics, back-propagated batches and Linear rows recorded since the last step."""
        self.pending.clear()
        self._read.clear()
        if self.recorder.rows is not None:
            self.recorder.rows.clear()

    def batch_size(self, inputs: Any) -> int:
        """The size of the named batch or else the last one seen (its first batched input's length; -1: unknown)."""
        batch = inputs if inputs is not None else self.recorder.inputs
        sized = [t for t in Batch.of(batch).tensors() if t.dim()] if batch is not None else []
        return int(sized[0].shape[0]) if sized else -1

    def arm(self, step: int) -> None:
        """Record the next forward's statistics if step ``step`` refreshes them, or, with a checkpoint's statistics
        waiting for their structure, that structure (:attr:`template_only`)."""
        due = self.curvature is None or self.statistics_due(step)
        self.template_only = self.captures and self.loaded is not None and not self.statistics_due(step)
        self.recorder.armed = self.captures and (due or self.template_only)


def _owner(owners: List[int], key: str) -> int:
    """The owner of the statistic ``key`` (``"<block>/<name>"``, the keys of
    :meth:`~infogeo.nn.curvature.blockwise.BlockCurvature.stats`)."""
    return owners[int(key.split("/", 1)[0])]
