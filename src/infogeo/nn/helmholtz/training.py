"""Reweighted wake-sleep training, plain or natural, packaged around a torch optimiser.

The natural version (Várady, Volpi, Malagò & Ay 2022) preconditions each network's gradient
with the inverse of its own per-unit block Fisher (Amari 1998):

* ``p`` with ``F_p``, estimated on dreams ``(x, h) ~ p(x, h)``;
* ``q`` with ``F_q``, estimated on ``x`` from the data and ``h ~ q(h | x)``,

both kept by :class:`~infogeo.nn.helmholtz.fisher.BlockFisher` (moving average, Tikhonov damping,
Sherman–Morrison inverse).  The preconditioned direction goes into ``.grad`` (negated) and a
torch optimiser takes the step, so SGD, momentum or any ``torch.optim`` rule applies to either.
"""
from __future__ import annotations

import math
import numbers
from typing import List, Optional

import torch

from .fisher import NetFisher
from .gradients import reweighted_wake_sleep, write_grads
from ...geometry.points import positive_int
from .model import HelmholtzMachine, State


def _rows(state: State, m: int) -> State:
    return [h[:m] for h in state]


class ReweightedWakeSleep:
    """Train a :class:`~infogeo.nn.helmholtz.model.HelmholtzMachine` by (natural) reweighted wake-sleep.

    Parameters
    ----------
    machine : HelmholtzMachine
    lr : float
        Step size of the default optimiser, ``torch.optim.SGD`` over all parameters.
    natural : bool
        Precondition by the per-unit block Fisher of each network (natural gradient) or not.
    samples : int
        ``K``, importance samples from ``q`` per data vector in the wake phase.
    sleep_samples : int, optional
        Dreams from ``p`` per step (default: the batch size).
    q_updates : {"wake+sleep", "wake", "sleep"}
        Which ``q`` gradients to follow (their mean for ``"wake+sleep"``).
    decay, damping, refresh_every
        Of the Fisher blocks, see :class:`~infogeo.nn.helmholtz.fisher.BlockFisher`.
    fisher_samples : int, optional
        Samples per step fed to each Fisher estimate (default: the batch size): the first data
        vectors' first wake sample for ``F_q`` and the first dreams for ``F_p``.
    optimizer : torch.optim.Optimizer, optional
        Replaces the default SGD (``lr`` is then ignored).
    seed : int, optional
        Seeds the sampling (a private ``torch.Generator``).

    Examples
    --------
    >>> hm = HelmholtzMachine((64, 32, 16), seed=0)                       # doctest: +SKIP
    >>> rws = ReweightedWakeSleep(hm, lr=0.05, natural=True, seed=0)       # doctest: +SKIP
    >>> bound = rws.step(x_batch)     # mean log (1/K) sum_k w_k before the step   # doctest: +SKIP
    """

    Q_UPDATES = ("wake+sleep", "wake", "sleep")

    def __init__(self, machine: HelmholtzMachine, lr: float = 0.01, natural: bool = True, samples: int = 5,
                 sleep_samples: Optional[int] = None, q_updates: str = "wake+sleep", decay: float = 0.05,
                 damping: float = 1e-2, refresh_every: Optional[int] = None,
                 fisher_samples: Optional[int] = None, optimizer: Optional[torch.optim.Optimizer] = None,
                 seed: Optional[int] = None):
        if not isinstance(machine, HelmholtzMachine):
            raise TypeError(f"machine must be a HelmholtzMachine, got {type(machine).__name__}")
        if q_updates not in self.Q_UPDATES:
            raise ValueError(f"q_updates must be one of {self.Q_UPDATES}, got {q_updates!r}")
        # checked here, not at the first step
        if optimizer is None and (isinstance(lr, bool) or not isinstance(lr, numbers.Real)
                                  or not (math.isfinite(lr) and lr > 0)):
            raise ValueError(f"lr must be a positive finite number, got {lr!r}")
        samples = positive_int(samples, "samples")
        sleep_samples = None if sleep_samples is None else positive_int(sleep_samples, "sleep_samples")
        fisher_samples = None if fisher_samples is None else positive_int(fisher_samples, "fisher_samples")
        self.machine, self.natural, self.samples = machine, bool(natural), samples
        self.sleep_samples, self.q_updates, self.fisher_samples = sleep_samples, q_updates, fisher_samples
        self.optimizer = optimizer if optimizer is not None else torch.optim.SGD(machine.parameters(), lr=lr)
        self.generator = None if seed is None else torch.Generator(device=machine.p.prior.device).manual_seed(seed)
        if self.natural:
            options = dict(decay=decay, damping=damping, refresh_every=refresh_every)
            self.fisher_p, self.fisher_q = NetFisher(machine.p, **options), NetFisher(machine.q, **options)

    def directions(self, x: torch.Tensor):
        """The ascent directions for ``p`` and ``q`` on the mini-batch ``x`` (natural ones update the
        Fisher estimates first) and the batch's mean bound; nothing is stepped."""
        g = reweighted_wake_sleep(self.machine, x, self.samples, self.sleep_samples, self.generator)
        if self.q_updates == "wake":
            q_dir: List[torch.Tensor] = g.q_wake
        elif self.q_updates == "sleep":
            q_dir = g.q_sleep
        else:
            q_dir = [(a + b) / 2 for a, b in zip(g.q_wake, g.q_sleep)]
        p_dir = g.p
        if self.natural:
            m = self.fisher_samples or x.shape[0]
            self.fisher_p.update(self.machine.p, _rows(g.dreams, m))
            self.fisher_q.update(self.machine.q, _rows(g.wake, min(m, x.shape[0])))
            p_dir, q_dir = self.fisher_p.solve(p_dir), self.fisher_q.solve(q_dir)
        return p_dir, q_dir, g.bound

    def step(self, x: torch.Tensor) -> float:
        """One wake-sleep step on the mini-batch ``x``; returns the batch's mean bound before the step.

        Raises ``FloatingPointError`` (and steps nothing) if an importance weight is not finite.
        """
        p_dir, q_dir, bound = self.directions(x)
        write_grads(self.machine.p, p_dir)
        write_grads(self.machine.q, q_dir)
        self.optimizer.step()
        return bound
