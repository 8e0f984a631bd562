r"""When the curvature's statistics are recorded and factorised, and the weights of their running average.

The statistics are recorded every ``curvature_update_period`` steps and factorised every
``inverse_update_period``; with the default periods (:attr:`RefreshSchedule.geometric`) both also at steps
1, 2, 4, 8, ... before the first factorisation period, where the network changes most.  Each refresh is
averaged into the statistics kept so far with a weight that forgets at the pace of the 10-step period whatever
the schedule (:meth:`RefreshSchedule.decay`), bias-corrected as Adam's moments are
(:meth:`RefreshSchedule.mixing`).
"""
from __future__ import annotations

from .settings import DECAY_STEPS

__all__ = ["RefreshSchedule"]


class RefreshSchedule:
    """The refresh schedule of a :class:`~.estimate.CurvatureEstimate` (module docstring)."""

    def __init__(self, ema_decay: float, curvature_update_period: int, inverse_update_period: int,
                 geometric: bool = False):
        self.ema_decay = ema_decay
        self.curvature_update_period, self.inverse_update_period = curvature_update_period, inverse_update_period
        self.geometric = geometric   # early refreshes at steps 0, 1, 2, 4, 8, ... (:meth:`early`), else at each refresh
        #: the product of the weights the average has kept so far (:meth:`mixing`): what an average started from
        #: zero would still give to that zero; 1 before any statistics
        self.unfilled = 1.0

    def early(self, step: int) -> bool:
        """Whether ``step`` renews the statistics and their factorisation before the first ``inverse_update_period``.
        The network moves most in its first steps: with :attr:`geometric` (the default periods) at steps 0, 1, 2,
        4, 8, ..., a fresh basis early for a logarithmic number of factorisations; else at every statistics refresh
        (every ``curvature_update_period`` steps)."""
        if step >= self.inverse_update_period:
            return False
        return step & (step - 1) == 0 if self.geometric else step % self.curvature_update_period == 0

    def statistics_due(self, step: int) -> bool:
        """Whether step ``step`` records new statistics (every ``curvature_update_period`` steps and the early ones)."""
        return step % self.curvature_update_period == 0 or self.early(step)

    def decay(self, step: int) -> float:
        r"""The weight the average keeps when step ``step`` averages new statistics in:
        :math:`\beta^{\max(1,\,\Delta/10)}` for ``ema_decay`` :math:`\beta`, :math:`\Delta` steps after the last
        refresh of the schedule (:data:`~.settings.DECAY_STEPS`), so that statistics recorded less often (by
        ``step_rule="eigen-adam"``, or a longer period given) are forgotten at the same pace in steps."""
        last = next((k for k in range(step - 1, max(step - self.curvature_update_period, 0) - 1, -1)
                     if self.statistics_due(k)), None)
        return self.ema_decay ** max(1.0, (step - last) / DECAY_STEPS) if last is not None else self.ema_decay

    def mixing(self, step: int, first: bool = False, corrected: bool = True) -> float:
        r"""The weight the average keeps when step ``step`` averages new statistics in, with the bias correction
        of Adam's moments (Kingma & Ba 2015): the average is the exponential moving average started from zero,
        divided by the weight it has gathered, :math:`1 - P` for :math:`P` the product of the weights kept so far
        (:meth:`decay`; :attr:`unfilled`).  It keeps :math:`\beta_k (1-P)/(1-P\beta_k)` for this refresh's
        :math:`\beta_k`: about :math:`(k-1)/k` at the :math:`k`-th refresh while :math:`P` is near 1, so that the
        first statistics, measured on the network as initialised, are averaged with the next ones instead of
        weighing :math:`\beta^k` after :math:`k` refreshes; :math:`\beta_k` once the average is full.  The first
        statistics (no average yet) start it: the weight returned is then that of the uncorrected average.
        ``first``: these statistics start the average; ``corrected=False``: the uncorrected weight (gradient
        statistics, Shampoo's and SOAP's, are averaged as those methods define it)."""
        beta = self.decay(step)
        if not corrected:
            return beta
        if first:
            self.unfilled = beta
            return beta
        kept = beta * (1.0 - self.unfilled) / (1.0 - self.unfilled * beta)
        self.unfilled *= beta
        return kept

    @property
    def factorised_only(self) -> bool:
        """Whether the factors are held only as their factorisation between refreshes: when statistics are
        recorded only where the curvature is factorised anew (``curvature_update_period`` a multiple of
        ``inverse_update_period``), the factors are read next where they are averaged, and rebuilt from their
        factorisation there (:meth:`~infogeo.nn.curvature.eigenbasis.EigenbasisKronBlock.hold_factorised`)."""
        return self.curvature_update_period % self.inverse_update_period == 0
