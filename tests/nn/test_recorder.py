"""The hooks on the user's forward and backward: which batches the recorded statistics come from."""
import pytest

torch = pytest.importorskip("torch")
import infogeo as ig  # noqa: E402
from infogeo.nn.optim.hooks import MAX_PENDING  # noqa: E402
from .conftest import mlp  # noqa: E402

F = torch.nn.functional


def batch(i, n):
    g = torch.Generator().manual_seed(100 + i)
    X = torch.randn(n, 4, generator=g, dtype=torch.float64)
    return X, torch.randint(0, 3, (n,), generator=g)


def exact_stats(model, X, kind):
    """Independent of the hooks: the exact curvature of ``model`` on the batch ``X`` (one ParameterSpace)."""
    return ig.nn.ParameterSpace(model, "categorical", data=X).curvature(kind, "exact").stats()


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-10, atol=1e-13), k


@pytest.mark.parametrize("kind", ["kfac", "diag", "block"])
def test_two_forwards_of_one_step_pool_to_the_union_batch(kind):
    """A siamese-style loss (two forwards, one backward) and micro-batches (two forward/backward pairs)."""
    (X1, y1), (X2, y2) = batch(0, 8), batch(1, 12)
    union = torch.cat([X1, X2])
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    (F.cross_entropy(model(X1), y1) + F.cross_entropy(model(X2), y2)).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, union, kind))

    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    for X, y in ((X1, y1), (X2, y2)):
        F.cross_entropy(model(X), y).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, union, kind))


def test_a_forward_never_back_propagated_leaves_the_statistics_alone():
    (X, y), (M, _) = batch(0, 8), batch(2, 5)
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature="kfac", fisher="exact")
    loss = F.cross_entropy(model(X), y)
    for _ in range(MAX_PENDING + 2):     # monitoring with grad enabled, more often than outputs are held
        model(M)
    loss.backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, X, "kfac"))
    assert pre.recorder._boxes == []   # nothing held after the step


@pytest.mark.parametrize("kind", ["kfac", "dense"])   # dense: not recorded by hooks, computed on the batch again
def test_monitoring_forward_between_forward_and_backward(kind):
    (X, y), (M, _) = batch(0, 8), batch(2, 5)
    model = mlp()
    pre = ig.nn.Preconditioner(model, curvature=kind, fisher="exact")
    out = model(X)
    model(M)
    F.cross_entropy(out, y).backward()
    pre.step()
    assert_same(pre.curvature.stats(), exact_stats(model, X, kind))
