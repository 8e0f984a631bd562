"""Helmholtz machines: a generative sigmoid belief network p and a recognition network q.

Both networks are stacks of *conditionals*: one ``torch.nn.Linear`` per layer whose units are
independent Bernoulli variables with logits ``a = W h + b`` given the layer they read,

.. math::

    \\log p(v \\mid h) = \\sum_j v_j a_j - \\log(1 + e^{a_j}),\\qquad a = W h + b .

The generative network reads top-down, ``p(x, h) = p(h_L) \\prod_{l<L} p(h_l \\mid h_{l+1})``
with ``h_0 = x`` and a prior ``p(h_L)`` of independent units (logits: a bias only); the
recognition network reads bottom-up, ``q(h \\mid x) = \\prod_{l \\ge 1} q(h_l \\mid h_{l-1})``
(Dayan, Hinton, Neal & Zemel 1995).  A *state* is the list ``[h_0 = x, h_1, ..., h_L]`` of
``(N, n_l)`` tensors with entries in {0, 1}.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, cast

import torch

from ...geometry.points import positive_int

F = torch.nn.functional
State = List[torch.Tensor]


@dataclass(frozen=True)
class Conditional:
    """One layer of Bernoulli units: ``weight`` (units, inputs) or ``None`` (a prior), ``bias`` (units,).

    ``source`` and ``target`` index the state list: the units are ``state[target]`` and read
    ``state[source]`` (``source`` is ``None`` for a prior).
    """

    weight: Optional[torch.Tensor]
    bias: torch.Tensor
    source: Optional[int]
    target: int

    @property
    def units(self) -> int:
        return self.bias.shape[0]

    @property
    def block_size(self) -> int:
        """Parameters of one unit: its weights and its bias (the size of one Fisher block)."""
        return (0 if self.weight is None else self.weight.shape[1]) + 1

    def inputs(self, state: State) -> torch.Tensor:
        """The augmented input ``[h, 1]`` of every sample, shape ``(N, block_size)``."""
        n = state[self.target].shape[0] if self.source is None else state[self.source].shape[0]
        one = torch.ones(n, 1, dtype=self.bias.dtype, device=self.bias.device)
        return one if self.source is None else torch.cat([state[self.source], one], dim=1)

    def logits(self, state: State) -> torch.Tensor:
        """``a = W h + b`` for the samples of ``state``, shape ``(N, units)``."""
        if self.weight is None:
            return self.bias.expand(state[self.target].shape[0], -1)
        assert self.source is not None   # a weighted layer reads a source
        return F.linear(state[self.source], self.weight, self.bias)


def bernoulli_log_prob(v: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``sum_j v_j a_j - softplus(a_j)`` over the last axis: log-probability of binary ``v``."""
    return (v * logits - F.softplus(logits)).sum(-1)


class BernoulliNet(torch.nn.Module):
    """A stack of Bernoulli conditionals over the layers ``sizes = (n_0, ..., n_L)`` (``n_0``: data).

    Subclasses set the wiring through :meth:`conditionals`, listed in sampling order.
    """

    layers: torch.nn.ModuleList

    def __init__(self, sizes: Sequence[int]):
        super().__init__()
        sizes = tuple(sizes)
        if len(sizes) < 2:
            raise ValueError(f"sizes must be at least two positive ints (data layer first), got {sizes!r}")
        self.sizes = tuple(positive_int(n, "sizes (data layer first)") for n in sizes)

    def conditionals(self) -> List[Conditional]:  # pragma: no cover - abstract
        raise NotImplementedError

    def log_prob(self, state: State) -> torch.Tensor:
        """Sum of the conditionals' log-probabilities, shape ``(N,)``."""
        self._check_state(state)
        return cast(torch.Tensor, sum(bernoulli_log_prob(state[c.target], c.logits(state))
                                      for c in self.conditionals()))

    def _linear(self, l: int) -> torch.nn.Linear:
        """Layer ``l`` of ``self.layers`` (typed)."""
        return cast(torch.nn.Linear, self.layers[l])

    def _check_state(self, state: State) -> None:
        if len(state) != len(self.sizes):
            raise ValueError(f"a state is a list of {len(self.sizes)} layers (sizes {self.sizes}), got {len(state)}")
        for l, (h, n) in enumerate(zip(state, self.sizes)):
            if h.ndim != 2 or h.shape[1] != n:
                raise ValueError(f"layer {l} of the state must have shape (N, {n}), got {tuple(h.shape)}")

    @torch.no_grad()
    def _sample_from(self, state: State, generator: Optional[torch.Generator]) -> State:
        state = list(state)
        for c in self.conditionals():
            p = torch.sigmoid(c.logits(state))   # state[c.target] is still a placeholder of the right size
            state[c.target] = torch.bernoulli(p, generator=generator)
        return state


class SigmoidBeliefNet(BernoulliNet):
    """The generative network ``p(x, h)``: a prior on ``h_L``, then ``p(h_l | h_{l+1})`` down to ``x``.

    Its parameters are ``prior`` (the top layer's logits) and ``layers[l]``, an
    ``nn.Linear(n_{l+1}, n_l)`` per layer.

    Parameters
    ----------
    sizes : sequence of int
        ``(n_0, ..., n_L)``: data layer first, top layer last.
    """

    def __init__(self, sizes: Sequence[int]):
        super().__init__(sizes)
        self.prior = torch.nn.Parameter(torch.zeros(self.sizes[-1]))
        self.layers = torch.nn.ModuleList(torch.nn.Linear(self.sizes[l + 1], self.sizes[l])
                                          for l in range(len(self.sizes) - 1))

    def conditionals(self) -> List[Conditional]:
        """The prior, then the layers top-down (the ancestral sampling order)."""
        L = len(self.sizes) - 1
        top = Conditional(None, self.prior, None, L)
        return [top] + [Conditional(self._linear(l).weight, self._linear(l).bias, l + 1, l)
                        for l in reversed(range(L))]

    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> State:
        """``n`` ancestral samples ``(x, h) ~ p``: "dreams"."""
        n = positive_int(n, "n")
        like = self.prior
        state = [torch.empty(n, s, dtype=like.dtype, device=like.device) for s in self.sizes]
        return self._sample_from(state, generator)


class RecognitionNet(BernoulliNet):
    """The recognition network ``q(h | x)``: ``q(h_l | h_{l-1})`` from the data up.

    Attribute ``layers[l]`` is ``nn.Linear(n_l, n_{l+1})``.
    """

    def __init__(self, sizes: Sequence[int]):
        super().__init__(sizes)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(self.sizes[l], self.sizes[l + 1])
                                          for l in range(len(self.sizes) - 1))

    def conditionals(self) -> List[Conditional]:
        """The layers bottom-up (the sampling order given ``x``)."""
        return [Conditional(self._linear(l).weight, self._linear(l).bias, l, l + 1) for l in range(len(self.layers))]

    def sample(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> State:
        """One ``h ~ q(. | x)`` per row of ``x``; the state starts with ``x`` itself."""
        x = check_binary(x, self.sizes[0], self._linear(0).weight)
        state = [x] + [torch.empty(x.shape[0], s, dtype=x.dtype, device=x.device) for s in self.sizes[1:]]
        return self._sample_from(state, generator)


def check_binary(x: torch.Tensor, n: int, like: torch.Tensor) -> torch.Tensor:
    """``x`` as a ``(N, n)`` tensor of ``like``'s dtype and device; ``ValueError`` unless its entries are 0/1."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (N, {n}), got {type(x).__name__}")
    if x.ndim != 2 or x.shape[1] != n or x.shape[0] < 1:
        raise ValueError(f"x must have shape (N, {n}) with N >= 1, got {tuple(x.shape)}")
    x = x.to(dtype=like.dtype, device=like.device)
    if not bool(((x == 0) | (x == 1)).all()):
        raise ValueError("x must be binary (entries 0 or 1); threshold the data first")
    return x


class HelmholtzMachine(torch.nn.Module):
    """A generative network ``p`` and a recognition network ``q`` on the same layers.

    Parameters
    ----------
    sizes : sequence of int
        ``(n_0, n_1, ..., n_L)``: the data layer, then the stochastic hidden layers bottom-up.
    dtype : torch.dtype, optional
        Of every parameter (default: torch's default dtype).
    seed : int, optional
        Seeds the initialisation (PyTorch's default ``nn.Linear`` initialisation; prior logits 0), as
        ``torch.manual_seed(seed)`` before it would, without moving torch's global generator.

    Examples
    --------
    >>> hm = HelmholtzMachine((64, 32, 16), seed=0)          # doctest: +SKIP
    >>> ll = hm.log_likelihood(x_test, samples=1000)           # doctest: +SKIP
    """

    def __init__(self, sizes: Sequence[int], dtype: Optional[torch.dtype] = None, seed: Optional[int] = None):
        super().__init__()
        if seed is None:
            self.p, self.q = SigmoidBeliefNet(sizes), RecognitionNet(sizes)
        else:   # the same draws as after torch.manual_seed(seed), the caller's generator left where it was
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.p, self.q = SigmoidBeliefNet(sizes), RecognitionNet(sizes)
        if dtype is not None:
            self.to(dtype)

    @property
    def sizes(self):
        return self.p.sizes

    def log_weights(self, state: State) -> torch.Tensor:
        """``log p(x, h) - log q(h | x)`` per sample, shape ``(N,)``."""
        return self.p.log_prob(state) - self.q.log_prob(state)

    def wake_samples(self, x: torch.Tensor, samples: int, generator: Optional[torch.Generator] = None):
        """``samples`` draws ``h ~ q(. | x_b)`` per row: the state of ``(K B)`` rows (row ``k B + b``) and
        the log importance weights reshaped ``(K, B)``."""
        samples = positive_int(samples, "samples")
        x = check_binary(x, self.sizes[0], self.p.prior)
        state = self.q.sample(x.repeat(samples, 1), generator)
        with torch.no_grad():
            logw = self.log_weights(state).reshape(samples, x.shape[0])
        return state, logw

    @torch.no_grad()
    def log_likelihood(self, x: torch.Tensor, samples: int = 1000, generator: Optional[torch.Generator] = None,
                       chunk: int = 100_000) -> torch.Tensor:
        """Importance-sampled ``log p(x)`` per row with ``K = samples`` draws from ``q`` (Burda et al. 2016):

        .. math::  \\log \\hat p(x) = \\log \\frac1K \\sum_{k=1}^K \\frac{p(x, h_k)}{q(h_k \\mid x)},
                   \\qquad h_k \\sim q(\\cdot \\mid x),

        a stochastic lower bound whose expectation increases to ``log p(x)`` with ``K``.
        Rows are processed in chunks of at most ``chunk`` samples.
        """
        x = check_binary(x, self.sizes[0], self.p.prior)
        samples = positive_int(samples, "samples")
        rows = max(1, chunk // samples)
        out = []
        for i in range(0, x.shape[0], rows):
            _, logw = self.wake_samples(x[i:i + rows], samples, generator)
            out.append(torch.logsumexp(logw, 0) - math.log(samples))
        return torch.cat(out)

    def sample(self, n: int, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """``n`` data vectors drawn from the generative model ``p``, shape ``(n, n_0)``."""
        return self.p.sample(n, generator)[0]
