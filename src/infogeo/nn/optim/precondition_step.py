r"""One step of a :class:`~.preconditioner.Preconditioner` (:meth:`~.preconditioner.Preconditioner.precondition`
and :meth:`~.preconditioner.Preconditioner.update`), in the order that keeps the ranks together.

This rank's own work comes first, as it may fail on one rank only: the checks of :mod:`.guards`, the gradients
read and checked, the batch's new statistics.  Then the step's one agreement over the ranks
(:func:`~.agreement.agree_step`), and only then the collectives: the statistics averaged and installed, the
solve and the trust region.  A step that raises forgets the batch the hooks recorded.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .. import distributed as dd
from .. import fsdp
from .._params import all_finite
from . import agreement, guards
from .batches import empty_batch

if TYPE_CHECKING:  # pragma: no cover
    from .preconditioner import Preconditioner

logger = logging.getLogger(__name__)

__all__ = ["take_step"]


def take_step(pre: "Preconditioner", grads, inputs, targets, error, solve: bool) -> Any:
    """The step's direction (``solve``), else the checked gradients once the statistics are updated; ``None``
    if the step is skipped (:attr:`~.preconditioner.Preconditioner.skip_reason` says why)."""
    with pre.recorder.paused():
        try:
            return _step(pre, grads, inputs, targets, error, solve)
        except BaseException:
            pre.estimate.forget_batch()
            raise


def _step(pre, grads, inputs, targets, error, solve):
    new = template = gathered = None
    finite, n, settings = True, -1, [-1.0, -1.0]
    later = pre.sharded and pre.estimate.from_gradients   # Shampoo's statistics of sharded gradients
    if error is None:
        try:
            guards.check_step(pre.frozen, pre.grad_scaler)   # unfrozen parameters, scaled gradients
            if pre.estimate.captures:   # layers whose gradients came from a pass the hooks did not see
                guards.check_tracked(pre.untracked())
            grads = pre.grads() if grads is None else pre.estimate.layout.check(grads, "grads", real=True)
            if dd.world_size() > 1:
                settings = agreement.settings_codes(pre)
            n = pre.estimate.batch_size(inputs)
            if n == 0:
                raise empty_batch()
            finite = all_finite(fsdp.local(t) for t in grads.values())
            if finite and not later:
                new, template = pre.estimate.local(pre.steps, inputs, targets, grads)
                n = new[1] if new is not None else n
        except Exception as exc:
            error = exc
    replicas = (grads, pre.params) if pre.by_hand and dd.world_size() > 1 else None   # kept equal by the user?
    roles = pre.recorder.take_roles()   # the layers of this step's refresh reading the data, writing the output
    nonfinite, sizes, new, roles = agreement.agree_step(error, finite, n, new, replicas, settings, roles)
    if roles is not None:
        pre.recorder.adopt_roles(roles)
    pre.skip_reason = None
    if nonfinite:
        if pre.grad_scaler is not None:   # an overflow of the scaled loss: the scaler skips this step
            logger.debug("Preconditioner: overflow under AMP at step %d, step skipped", pre.steps)
            pre.skip_reason = "overflow"   # not counted: the scaler does not count it either
            pre.estimate.forget_batch()
            return None
        pre.damper.fail()
        return _skip(pre, "gradient")
    if later:   # gathered (a collective) only now that the ranks agree the step goes ahead
        gathered, new, template = pre.estimate.from_gathered(pre.steps, inputs, targets, grads)
    weight = dd.share(sizes[:, 0]) if new is not None else 1.0   # unequal batches: weighted by their sizes
    pre.estimate.install(pre.steps, new, template, weight, pre.damping)
    if not solve:
        pre.keep_rows(grads)   # before finish_step forgets the batch
        pre.finish_step(True)
        return grads
    given, grads = grads, (fsdp.gather(grads) if gathered is None else gathered)
    delta = pre.estimate.direction(grads, pre.damper, pre.max_retries)
    if delta is None:
        return _skip(pre, "direction")
    if (scale := pre.clip_scale(grads, delta)) != 1.0:
        delta = {k: d * scale for k, d in delta.items()}
    pre.finish_step(True)
    return fsdp.shards_like(delta, given)


def _skip(pre: "Preconditioner", why: str) -> None:
    pre.skip_reason = why
    pre.finish_step(False)
