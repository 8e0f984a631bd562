"""Reweighted wake-sleep gradients of a Helmholtz machine, in closed form per unit.

For a Bernoulli conditional the gradient of ``log p(v | h)`` in the parameters ``[W_j, b_j]`` of
unit ``j`` is the local delta rule ``(v_j - sigma(a_j)) [h, 1]`` (Hinton, Dayan, Frey & Neal 1995),
so a weighted sum over samples is one matrix product per layer: no autograd graph is built.
The result is a list with one ``(units, inputs + 1)`` tensor per conditional, the layout of the
per-unit Fisher blocks (last column: the bias).

Reweighted wake-sleep (Bornschein & Bengio 2015) with ``K`` samples ``h_k ~ q(. | x)`` and
normalised importance weights ``omega_k = w_k / sum_i w_i``, ``w_k = p(x, h_k) / q(h_k | x)``:

* wake, ``p``: ``sum_k omega_k grad log p(x, h_k)``, the gradient of the importance-weighted
  bound ``log (1/K) sum_k w_k`` (Burda, Grosse & Salakhutdinov 2016) in ``p``'s parameters;
* wake, ``q``: ``sum_k omega_k grad log q(h_k | x)``, with the weights held fixed;
* sleep, ``q``: ``grad log q(h | x)`` on dreams ``(x, h) ~ p``.

Each is averaged over the mini-batch and points uphill (they are ascent directions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch

from ...geometry.points import positive_int
from .model import BernoulliNet, HelmholtzMachine, State


def unit_gradients(net: BernoulliNet, state: State, weights: torch.Tensor) -> List[torch.Tensor]:
    """``sum_s w_s grad log net(state_s)`` per conditional, each ``(units, inputs + 1)``."""
    out = []
    with torch.no_grad():
        for c in net.conditionals():
            delta = weights[:, None] * (state[c.target] - torch.sigmoid(c.logits(state)))
            out.append(delta.T @ c.inputs(state))
    return out


def write_grads(net: BernoulliNet, blocks: List[torch.Tensor], sign: float = -1.0) -> None:
    """Store ``sign * blocks`` in the ``.grad`` of ``net``'s parameters (``-1``: an ascent direction
    becomes the gradient a torch optimiser descends); a frozen parameter (``requires_grad=False``) gets none, so
    that the optimiser leaves it alone, as autograd would."""
    for c, g in zip(net.conditionals(), blocks):
        if c.weight is not None:
            c.weight.grad = sign * g[:, :-1].contiguous() if c.weight.requires_grad else None
        c.bias.grad = sign * g[:, -1].contiguous() if c.bias.requires_grad else None


@dataclass
class WakeSleepGradients:
    """The three reweighted wake-sleep gradients of one mini-batch and the samples behind them.

    ``p``, ``q_wake``, ``q_sleep``: per-conditional ascent directions; ``bound``: the mean over
    the batch of the ``K``-sample bound ``log (1/K) sum_k w_k``; ``wake``: the ``(K B)``-row
    state of the wake samples (row ``k B + b``); ``dreams``: the sleep samples from ``p``.
    """

    p: List[torch.Tensor]
    q_wake: List[torch.Tensor]
    q_sleep: List[torch.Tensor]
    bound: float
    wake: State
    dreams: State


def reweighted_wake_sleep(machine: HelmholtzMachine, x: torch.Tensor, samples: int = 5,
                          sleep_samples: Optional[int] = None,
                          generator: Optional[torch.Generator] = None) -> WakeSleepGradients:
    """The reweighted wake-sleep gradients for the mini-batch ``x`` ``(B, n_0)`` (binary).

    ``samples`` is ``K``, draws from ``q`` per data vector; ``sleep_samples`` dreams from ``p``
    (default ``B``).  Raises ``FloatingPointError`` if an importance weight is not finite.
    """
    state, logw = machine.wake_samples(x, samples, generator)
    if not bool(torch.isfinite(logw).all()):   # before anything is sampled from p or stepped
        raise FloatingPointError("a log importance weight log p(x, h) - log q(h | x) is not finite: the machine "
                                 "has diverged (lower the step size, or raise the damping of the natural version)")
    K, B = logw.shape
    omega = torch.softmax(logw, dim=0).reshape(-1) / B
    bound = float((torch.logsumexp(logw, 0) - math.log(K)).mean())
    S = B if sleep_samples is None else positive_int(sleep_samples, "sleep_samples")
    dreams = machine.p.sample(S, generator)
    uniform = torch.full((S,), 1.0 / S, dtype=logw.dtype, device=logw.device)
    return WakeSleepGradients(p=unit_gradients(machine.p, state, omega),
                              q_wake=unit_gradients(machine.q, state, omega),
                              q_sleep=unit_gradients(machine.q, dreams, uniform),
                              bound=bound, wake=state, dreams=dreams)
