"""The per-unit block Fisher of a sigmoid belief network and its inverse by Sherman–Morrison updates.

For a network of Bernoulli conditionals the score of unit ``j`` (parameters ``w_j = [W_j, b_j]``,
augmented input ``h~ = [h, 1]``) is ``(v_j - sigma(a_j)) h~``.  Given everything above it,
``v_j - sigma(a_j)`` has mean zero and variance ``sigma'(a_j)``, and units of one layer are
independent given their parents, so every cross term of the Fisher matrix of the joint
distribution vanishes: it is block-diagonal with one block per unit (Ay 2002; Várady, Volpi,
Malagò & Ay 2022),

.. math::  F_j = \\mathbb E\\big[\\sigma'(a_j)\\, \\tilde h \\tilde h^T\\big],
           \\qquad \\sigma'(a) = \\sigma(a)(1 - \\sigma(a)),

of the size of the layer below (plus one, the bias).  :func:`block_fisher` evaluates it on
weighted samples; :class:`BlockFisher` keeps a Monte Carlo estimate as an exponential moving
average with Tikhonov damping, and its inverse by one Sherman–Morrison step per sample.
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch

from .model import BernoulliNet, State


def fisher_factors(net: BernoulliNet, state: State) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """Per conditional of ``net``: the augmented inputs ``h~`` ``(N, n)`` and ``sigma'(a)`` ``(N, units)``.

    Sample ``s`` contributes ``sigma'(a_sj) h~_s h~_s^T`` to block ``j``.
    """
    out = []
    with torch.no_grad():
        for c in net.conditionals():
            p = torch.sigmoid(c.logits(state))
            out.append((c.inputs(state), p * (1 - p)))
    return out


def block_fisher(net: BernoulliNet, state: State, weights: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """The blocks ``sum_s w_s sigma'(a_sj) h~_s h~_s^T``, one ``(units, n, n)`` tensor per conditional.

    ``weights`` (``(N,)``, default ``1/N``): with probabilities of an enumeration the exact Fisher
    blocks, with equal weights on samples of the model their Monte Carlo estimate.
    """
    n = state[0].shape[0]
    if weights is None:
        weights = torch.full((n,), 1.0 / n, dtype=state[0].dtype, device=state[0].device)
    return [((weights[:, None] * scale).T[:, :, None] * h).transpose(1, 2) @ h
            for h, scale in fisher_factors(net, state)]


class BlockFisher:
    """Damped moving-average Fisher blocks of one layer of units and their inverses.

    The blocks start at ``damping * I``.  A mini-batch of ``m`` samples updates them as

    .. math::  G \\leftarrow (1 - \\rho)\\, G + \\frac{\\rho}{m} \\sum_{s=1}^m \\sigma'(a_{sj})\\,
               \\tilde h_s \\tilde h_s^T ,

    and the inverse ``H = G^{-1}`` follows exactly without any matrix inversion: the decay scales
    it, ``H <- H / (1 - rho)``, then each sample is one Sherman–Morrison step (Sherman & Morrison
    1950) with ``c = rho sigma'(a_sj) / m`` and ``u = H h~_s``,

    .. math::  (G + c\\, \\tilde h \\tilde h^T)^{-1} = H - \\frac{c\\, u u^T}{1 + c\\, \\tilde h^T u},

    ``O(n^2)`` per sample and unit instead of ``O(n^3)``.  The decay also shrinks the Tikhonov
    term ``damping * I`` by ``1 - rho`` per update; every ``refresh_every`` updates it is topped
    back up to ``damping`` and the inverse recomputed by a Cholesky factorisation (which also
    clears accumulated round-off), so the damping stays in ``[damping (1 - rho)^refresh_every,
    damping]``.

    Parameters
    ----------
    units, size : int
        Number of blocks and their size (inputs + 1).
    decay : float
        The moving-average weight ``rho`` in (0, 1).
    damping : float
        Tikhonov damping ``> 0``.
    refresh_every : int, optional
        Updates between damping top-ups; ``0`` never tops up (the damping then decays as
        ``damping (1 - rho)^t``).  Default: the largest period keeping the damping above half
        its value, ``floor(log 2 / -log(1 - rho))`` (at least 1).
    """

    def __init__(self, units: int, size: int, decay: float = 0.05, damping: float = 1e-2,
                 refresh_every: Optional[int] = None, dtype: Optional[torch.dtype] = None,
                 device: Optional[torch.device] = None):
        if not 0 < decay < 1:
            raise ValueError(f"decay must lie in (0, 1), got {decay!r}")
        if not damping > 0 or not math.isfinite(damping):
            raise ValueError(f"damping must be a positive finite float, got {damping!r}")
        if refresh_every is None:
            refresh_every = max(1, int(math.log(2) / -math.log1p(-decay)))
        if not isinstance(refresh_every, int) or refresh_every < 0:
            raise ValueError(f"refresh_every must be a non-negative int, got {refresh_every!r}")
        self.decay, self.damping, self.refresh_every = float(decay), float(damping), refresh_every
        eye = torch.eye(size, dtype=dtype, device=device).expand(units, size, size)
        self.matrix = damping * eye.clone()   # G: the moving average plus the current damping
        self.inverse = eye / damping           # H = G^{-1}
        self.current_damping = self.damping
        self.updates = 0

    @torch.no_grad()
    def update(self, inputs: torch.Tensor, scale: torch.Tensor) -> None:
        """One moving-average step with the samples ``inputs`` ``(m, n)`` and ``scale = sigma'(a)`` ``(m, units)``."""
        units, n, _ = self.matrix.shape
        if inputs.ndim != 2 or inputs.shape[1] != n or scale.shape != (inputs.shape[0], units):
            raise ValueError(f"expected inputs (m, {n}) and scale (m, {units}), got {tuple(inputs.shape)} "
                             f"and {tuple(scale.shape)}")
        rho, m = self.decay, inputs.shape[0]
        inputs, scale = inputs.to(self.matrix.dtype), scale.to(self.matrix.dtype)
        c = scale * (rho / m)
        self.matrix.mul_(1 - rho).add_((c.T[:, :, None] * inputs).transpose(1, 2) @ inputs)
        H = self.inverse.mul_(1 / (1 - rho))
        for h, cs in zip(inputs, c):          # one Sherman-Morrison step per sample, all units at once
            u = H @ h                          # (units, n); H symmetric, so h^T H = u^T
            w = u * (cs / (1 + cs * (u @ h))).sqrt()[:, None]
            H.baddbmm_(w[:, :, None], w[:, None, :], alpha=-1)   # H -= c u u^T / (1 + c h^T u)
        self.current_damping *= 1 - rho
        self.updates += 1
        if self.refresh_every and self.updates % self.refresh_every == 0:
            self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Top the damping back up to ``damping`` and recompute the inverse densely (Cholesky)."""
        n = self.matrix.shape[-1]
        eye = torch.eye(n, dtype=self.matrix.dtype, device=self.matrix.device)
        self.matrix.add_((self.damping - self.current_damping) * eye)
        self.current_damping = self.damping
        self.inverse = torch.cholesky_inverse(torch.linalg.cholesky(self.matrix))

    def solve(self, grad: torch.Tensor) -> torch.Tensor:
        """``G_j^{-1} g_j`` for every unit: ``grad`` and the result are ``(units, n)``."""
        if grad.shape != self.matrix.shape[:2]:
            raise ValueError(f"grad must have shape {tuple(self.matrix.shape[:2])}, got {tuple(grad.shape)}")
        # an elementwise product and a sum: faster than a batched matmul of (n, n) by (n, 1) on a CPU
        return (self.inverse * grad.to(self.inverse.dtype)[:, None, :]).sum(-1).to(grad.dtype)


class NetFisher:
    """One :class:`BlockFisher` per conditional of a network (keyword arguments as there)."""

    def __init__(self, net: BernoulliNet, **options):
        like = net.conditionals()[0].bias
        self.blocks = [BlockFisher(c.units, c.block_size, dtype=like.dtype, device=like.device, **options)
                       for c in net.conditionals()]

    def update(self, net: BernoulliNet, state: State) -> None:
        """A moving-average step of every block with the samples ``state``."""
        for block, (h, scale) in zip(self.blocks, fisher_factors(net, state)):
            block.update(h, scale)

    def solve(self, grads: List[torch.Tensor]) -> List[torch.Tensor]:
        """The natural gradient, block by block."""
        return [block.solve(g) for block, g in zip(self.blocks, grads)]
