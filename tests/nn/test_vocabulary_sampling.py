"""Drawing classes for the Monte Carlo Fisher by inverting the cumulative distribution (a vocabulary-sized
softmax: one sum per row instead of one exponential variate per class)."""
import math

import pytest

torch = pytest.importorskip("torch")

import infogeo as ig  # noqa: E402
from infogeo.nn.output_metrics import likelihoods  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [1 << 20, 8])
def test_draws_follow_the_probabilities_and_never_a_class_of_probability_zero(monkeypatch, dtype, chunk):
    monkeypatch.setattr(likelihoods, "_DRAW_CHUNK", chunk)   # 8: one row per cumulative sum
    p = torch.tensor([[0.0, 0.1, 0.25, 0.0, 0.05, 0.6, 0.0],
                      [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5],
                      [0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2]], dtype=dtype) * 3.0   # rows need not sum to one
    n, before = 40_000, p.clone()
    t = likelihoods.draw_classes(p, n, torch.Generator().manual_seed(0))
    assert torch.equal(p, before)
    assert t.shape == (3, n) and t.dtype == torch.long
    q = (p / p.sum(1, keepdim=True)).double()
    freq = torch.stack([torch.bincount(t[r], minlength=7) for r in range(3)]).double() / n
    se = (q * (1 - q) / n).sqrt()
    assert bool(((freq - q).abs() <= 5 * se + 1e-12).all()), (freq, q)
    assert bool((freq[q == 0] == 0).all())


@pytest.mark.parametrize("name", ["categorical", "log_probabilities"])
def test_a_sample_is_the_base_minus_the_one_hot_drawn_class(name):
    """CategoricalFisher: p - e_t; the log-probability form: -e_t (t drawn from the same generator state)."""
    metric = ig.nn.output_metric(name)
    z = torch.randn(2, 5, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    if name == "log_probabilities":
        z = torch.log_softmax(z, -1)
    s = metric.sample(z, 3, torch.Generator().manual_seed(2))
    p = torch.softmax(z, -1)
    t = likelihoods.draw_classes(p.reshape(-1, 11), 3, torch.Generator().manual_seed(2))
    onehot = torch.nn.functional.one_hot(t.T, 11).to(p.dtype).reshape(3, 2, 5, 11)
    base = p if name == "categorical" else torch.zeros_like(p)
    assert s.shape == (3, 2, 5, 11) and torch.equal(s, base - onehot)


def test_the_monte_carlo_fisher_of_a_softmax_is_unbiased():
    """mean over draws of (p - e_t)(p - e_t)^T -> diag(p) - p p^T (the categorical Fisher in the logits)."""
    z = torch.randn(11, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    metric = ig.nn.output_metric("categorical")
    n = 50_000
    s = metric.sample(z.expand(n, 11), 1, torch.Generator().manual_seed(4))[0]
    est = s.T @ s / n
    p = torch.softmax(z, -1)
    exact = torch.diag(p) - torch.outer(p, p)
    assert float((est - exact).abs().max()) < 6 / math.sqrt(n)
