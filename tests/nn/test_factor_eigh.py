"""Eigendecompositions of Kronecker factors with zero rows, and when float32 LAPACK does not converge."""
import pytest

torch = pytest.importorskip("torch")

from infogeo.nn.curvature import factor_eigh as fe  # noqa: E402


def psd(n, dead=(), seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(2 * n, n, dtype=dtype, generator=g)
    X[:, list(dead)] = 0   # inputs that are always zero: zero rows and columns of the factor
    return X.T @ X / (2 * n)


def check(F, lam, U, tol):
    n = F.shape[0]
    assert torch.all(lam[1:] >= lam[:-1])   # ascending
    torch.testing.assert_close(U.T @ U, torch.eye(n, dtype=F.dtype), rtol=0, atol=tol)
    torch.testing.assert_close(U @ torch.diag(lam) @ U.T, F, rtol=0, atol=tol * float(F.abs().max()))


def test_zero_rows_get_coordinate_eigenvectors_and_the_rest_its_own_decomposition():
    dead = (0, 3, 4, 9)
    F = psd(12, dead)
    lam, U = fe.factor_eigh(F)
    check(F, lam, U, 1e-12)
    torch.testing.assert_close(lam, torch.linalg.eigvalsh(F), rtol=0, atol=1e-12)
    for i in dead:   # e_i is an eigenvector (eigenvalue 0) exactly, and no other vector touches coordinate i
        col = (U[i] != 0).nonzero().squeeze(1)
        assert len(col) == 1 and U[i, col].abs().item() == 1.0 and lam[col].item() == 0.0


def test_without_zero_rows_it_is_eigh_itself():
    F = psd(9).float()
    lam, U = fe.factor_eigh(F)
    want = torch.linalg.eigh(F)
    assert torch.equal(lam, want[0]) and torch.equal(U, want[1])


def test_the_zero_matrix_has_the_identity_as_its_basis():
    lam, U = fe.factor_eigh(torch.zeros(5, 5))
    assert torch.equal(lam, torch.zeros(5)) and torch.equal(U, torch.eye(5))


def test_a_float32_decomposition_that_does_not_converge_is_done_in_float64(monkeypatch):
    real = torch.linalg.eigh

    def failing_in_float32(M):
        if M.dtype == torch.float32:
            raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge")
        return real(M)
    monkeypatch.setattr(torch.linalg, "eigh", failing_in_float32)
    F = psd(10, dead=(2,)).float()
    lam, U = fe.factor_eigh(F)
    assert lam.dtype == U.dtype == torch.float32
    check(F, lam, U, 1e-5)
    with pytest.raises(torch.linalg.LinAlgError):   # float64 that fails is not hidden
        monkeypatch.setattr(torch.linalg, "eigh", lambda M: (_ for _ in ()).throw(torch.linalg.LinAlgError("x")))
        fe.factor_eigh(psd(4))
