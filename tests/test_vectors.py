"""Vectors and covectors are different types: only a metric converts between them."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import infogeo as ig
from .conftest import as_backend

finite = st.floats(-1e3, 1e3, allow_nan=False)
vec3 = arrays(np.float64, 3, elements=finite)
X = np.array([0.1, 0.2, 0.3])


def test_covector_applied_to_vector_is_the_pairing(backend_name):
    x = as_backend(X, backend_name)
    v = ig.TangentVector(x, as_backend([1.0, 2.0, 3.0], backend_name))
    w = ig.Covector(x, as_backend([0.5, -1.0, 2.0], backend_name))
    assert float(ig.backend.to_numpy(w(v))) == pytest.approx(0.5 - 2.0 + 6.0)


@pytest.mark.parametrize("op", ["add", "sub"])
def test_mixing_vector_and_covector_is_a_type_error(op):
    v = ig.TangentVector(X, np.ones(3))
    w = ig.Covector(X, np.ones(3))
    with pytest.raises(TypeError, match="sharp|flat"):
        v + w if op == "add" else v - w
    with pytest.raises(TypeError, match="sharp|flat"):
        w + v if op == "add" else w - v


def test_adding_a_point_to_a_vector_is_a_type_error(backend_name):
    x = as_backend(X, backend_name)
    v = ig.TangentVector(x, as_backend(np.ones(3), backend_name))
    with pytest.raises(TypeError, match="retract"):
        v + x
    with pytest.raises(TypeError, match="retract"):
        x + v
    with pytest.raises(TypeError):
        ig.Covector(x, x) + x


def test_vectors_at_different_points_cannot_be_added():
    v = ig.TangentVector(X, np.ones(3))
    u = ig.TangentVector(X + 1, np.ones(3))
    with pytest.raises(ValueError, match="different base points"):
        v + u
    with pytest.raises(ValueError, match="same base point"):
        ig.Covector(X + 1, np.ones(3))(v)


def test_covector_cannot_act_on_covector():
    w = ig.Covector(X, np.ones(3))
    with pytest.raises(TypeError, match="TangentVector"):
        w(w)


def test_scaling_only_by_scalars():
    v = ig.TangentVector(X, np.ones(3))
    np.testing.assert_allclose((2.5 * v).components, 2.5)
    np.testing.assert_allclose((v / 2).components, 0.5)
    np.testing.assert_allclose((-v).components, -1.0)
    with pytest.raises(TypeError, match="scalar"):
        v * np.ones(3)


def test_sum_of_vectors_works_with_builtin_sum():
    vs = [ig.TangentVector(X, np.full(3, float(i))) for i in range(4)]
    np.testing.assert_allclose(sum(vs).components, 6.0)


@settings(max_examples=50, deadline=None)
@given(vec3, vec3, vec3, finite, finite)
def test_covector_is_linear_on_vectors(a, b, c, s, t):
    w = ig.Covector(X, c)
    u, v = ig.TangentVector(X, a), ig.TangentVector(X, b)
    lhs = w(s * u + t * v)
    rhs = s * w(u) + t * w(v)
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-6)


def test_dict_components_for_parameter_spaces():
    base = {"w": np.zeros((2, 2)), "b": np.zeros(2)}
    v = ig.TangentVector(base, {"w": np.ones((2, 2)), "b": np.ones(2)})
    w = ig.Covector(base, {"w": 2 * np.ones((2, 2)), "b": np.ones(2)})
    assert float(w(v + v)) == pytest.approx(2 * (8 + 2))
    with pytest.raises(ValueError, match="structure"):
        v + ig.TangentVector(base, {"w": np.ones((2, 2))})


def test_division_by_zero_is_refused_instead_of_giving_inf():
    v = ig.TangentVector(np.zeros(2), np.array([1.0, -2.0]))
    with pytest.raises(ZeroDivisionError, match="TangentVector"):
        v / 0
    np.testing.assert_array_equal((v / 2.0).components, [0.5, -1.0])


def test_a_vector_copies_the_callers_array_and_keeps_the_graph():
    """Found by an independent fault-battery sweep: the caller's array was the vector's components."""
    import torch
    a = np.array([1.0, 2.0])
    v, w = ig.TangentVector(X[:2], a), ig.Covector(X[:2], a)
    a[0] = 7.0
    assert v.components[0] == 1.0 and w.components[0] == 1.0
    t = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    tv = ig.TangentVector(torch.zeros(2, dtype=torch.float64), t)
    assert tv.components.data_ptr() != t.data_ptr()
    (tv.components ** 2).sum().backward()              # still differentiable in the caller's leaf
    assert torch.equal(t.grad, 2 * t.detach())
    flat = ig.Euclidean(2).metric.flat(ig.TangentVector(np.zeros(2), a))
    out = ig.Euclidean(2).metric.mv(np.zeros(2), a)
    out[0], flat.components[1] = 5.0, 5.0
    np.testing.assert_array_equal(a, [7.0, 2.0])


def test_a_numpy_point_with_torch_components_and_a_list_point_make_one_vector():
    """Found by an independent fault-battery sweep: a numpy point with torch components gave an AttributeError
    in sharp; a list point with a vector made at the same list was 'attached to another base point'."""
    import torch
    G1 = ig.Gaussian(1)
    p = np.array([0.3, 1.5])
    w = G1.covector(p, torch.tensor([0.1, 0.1], dtype=torch.float64))
    ref = G1.metric.sharp(G1.covector(p, np.array([0.1, 0.1]))).components
    np.testing.assert_allclose(G1.metric.sharp(w).components.numpy(), ref)       # as with numpy alone
    end = G1.exp([0.3, 1.5], G1.vector([0.3, 1.5], [0.1, 0.1]))
    np.testing.assert_allclose(end, G1.exp(p, G1.vector(p, np.array([0.1, 0.1]))))
