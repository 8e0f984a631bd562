"""The curvature of sequence outputs holds memory linear in the number of positions T, not quadratic.

The empirical and exact Fisher back-propagate one column per position; a weight-shared layer's output
gradients of all columns together are N T^2 times its width.  The largest tensor any operation creates
while the diagonal is built is recorded (a dispatch mode sees every result) and must grow like T.
"""
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import infogeo as ig  # noqa: E402
from . import _dense_reference as ref  # noqa: E402

N, D, V = 2, 4, 40


class Largest(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


class Seq(torch.nn.Module):
    """(N, T, D) -> (N, T, V): a Linear at every position, positions coupled by a running mean."""

    def __init__(self):
        super().__init__()
        self.inner, self.out = torch.nn.Linear(D, D), torch.nn.Linear(D, V)

    def forward(self, x):
        h = torch.tanh(self.inner(x))
        return self.out(h.cumsum(1) / x.shape[1])


def _largest(T, fisher):
    torch.manual_seed(0)
    model = Seq().double()
    X = torch.randn(N, T, D, dtype=torch.float64)
    y = torch.randint(0, V, (N, T))
    space = ig.nn.ParameterSpace(model, "categorical", data=X, targets=y if fisher == "empirical" else None)
    with warnings.catch_warnings(), Largest() as mode:
        warnings.simplefilter("ignore", RuntimeWarning)   # the per-position cost, said once per output shape
        C = space.curvature("diag", fisher)
    return mode.numel, C, model, X, y


@pytest.mark.parametrize("fisher", ["empirical", "exact"])
def test_diagonal_of_per_position_columns_is_linear_in_positions(fisher):
    small, _, _, _, _ = _largest(4, fisher)
    large, C, model, X, y = _largest(16, fisher)
    # four times the positions: about four times the largest tensor (the stacked columns would be sixteen)
    assert large <= 5 * small, (small, large)
    if fisher == "empirical":   # (the exact Fisher's own V columns per position are N T V^2)
        assert large < N * 16 * 16 * V   # never all columns' output gradients of the vocabulary-wide layer
    F = ref.empirical_fisher(model, (X,), "categorical", y) if fisher == "empirical" else \
        ref.ggn(model, (X,), "categorical")
    assert ref.rel(C.to_dense(), torch.diag(torch.diagonal(F))) < 1e-10
