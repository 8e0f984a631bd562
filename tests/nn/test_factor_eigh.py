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


def test_a_live_eigenvalue_below_zero_comes_before_the_null_spaces_zeros():
    """A factor that is not quite positive semi-definite (rounding, or a difference of averages): its negative
    eigenvalue is first, then the zero rows' zeros, then the rest, ascending as eigh's are."""
    dead = (1, 5)
    F = psd(8, dead)
    live = [i for i in range(8) if i not in dead]
    v = torch.zeros(8, dtype=F.dtype)
    v[live] = torch.linspace(1.0, 2.0, len(live), dtype=F.dtype)
    F = F - 2.0 * float(torch.linalg.eigvalsh(F).max()) * torch.outer(v, v) / float(v @ v)
    lam, U = fe.factor_eigh(F)
    assert lam[0] < 0 and lam[1] == lam[2] == 0.0 and lam[3] > 0
    check(F, lam, U, 1e-12)
    torch.testing.assert_close(lam, torch.linalg.eigvalsh(F), rtol=0, atol=1e-12)


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


def low_rank(n, r, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(r, n, dtype=dtype, generator=g)   # r samples: rank r, and no zero row
    return X.T @ X / r


def _same_up_to_signs(A, B, atol):
    signs = torch.sign((A * B).sum(0))
    torch.testing.assert_close(A * signs, B, rtol=0, atol=atol)


@pytest.mark.parametrize("n,r", [(12, 5), (9, 1), (20, 17)])
def test_a_rank_deficient_factor_gets_the_null_basis_of_the_subspace_alone(n, r):
    """The null-space columns: eigenvectors of diag(1..n) compressed onto the null space, computed here from
    scipy's SVD null space, whatever basis the eigensolver itself returned there."""
    scipy_linalg = pytest.importorskip("scipy.linalg")
    import numpy as np
    F = low_rank(n, r, seed=n)
    lam, U = fe.factor_eigh(F)
    check(F, lam, U, 1e-12)
    N = scipy_linalg.null_space(F.numpy(), rcond=1e-10)
    assert N.shape[1] == n - r
    _, V = np.linalg.eigh(N.T @ np.diag(np.arange(1.0, n + 1)) @ N)
    _same_up_to_signs(U[:, :n - r], torch.from_numpy(N @ V), 1e-10)


def test_the_null_basis_does_not_depend_on_the_eigensolvers_choice(monkeypatch):
    """A solver that returns another rotation inside the null space (as another BLAS or a GPU does)
    leads to the same columns, up to their signs; the range is untouched."""
    n, r = 16, 6
    F = low_rank(n, r, seed=3)
    lam0, U0 = fe.factor_eigh(F)
    real = torch.linalg.eigh
    g = torch.Generator().manual_seed(7)
    Q, _ = torch.linalg.qr(torch.randn(n - r, n - r, dtype=F.dtype, generator=g))

    def other_solver(M):
        lam, U = real(M)
        if M.shape[0] == n:
            U = torch.cat([U[:, :n - r] @ Q, U[:, n - r:]], dim=1)
        return lam, U
    monkeypatch.setattr(torch.linalg, "eigh", other_solver)
    lam1, U1 = fe.factor_eigh(F)
    assert torch.equal(lam0, lam1)
    _same_up_to_signs(U1, U0, 1e-12)


def test_a_full_rank_factor_keeps_the_solvers_basis_and_a_zero_row_factor_its_coordinates():
    F = psd(10)
    assert torch.equal(fe.factor_eigh(F)[1], torch.linalg.eigh(F)[1])
    F = low_rank(8, 3)
    F[:, 2] = F[2, :] = 0   # a dead coordinate beside a rank-deficient live block
    lam, U = fe.factor_eigh(F)
    check(F, lam, U, 1e-12)
    col = (U[2] != 0).nonzero().squeeze(1)
    assert len(col) == 1 and U[2, col].abs().item() == 1.0


@pytest.mark.parametrize("kind", ["kfac", "ekfac"])
def test_eigen_adam_training_does_not_depend_on_the_eigensolvers_null_basis(kind, monkeypatch):
    """A transformer layer on 24 tokens of a 3-token vocabulary: the input factors of its attention projections
    (8 features) are rank-deficient.  Training with an eigensolver that rotates every null space at random (as a
    GPU's solver chooses otherwise than the CPU's) gives the same parameters."""
    F_ = torch.nn.functional

    def train():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(3, 8), torch.nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, batch_first=True, norm_first=True), torch.nn.Linear(8, 11)).double()
        import infogeo as ig
        opt = ig.nn.NaturalGradient(model, curvature=kind, step_rule="eigen-adam", fisher="exact", lr=3e-3,
                                    curvature_update_period=2)
        g = torch.Generator().manual_seed(1)
        for _ in range(4):
            X, y = torch.randint(0, 3, (4, 6), generator=g), torch.randint(0, 11, (4, 6), generator=g)
            opt.zero_grad()
            F_.cross_entropy(model(X).reshape(-1, 11), y.reshape(-1)).backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    first = train()
    real = torch.linalg.eigh
    g = torch.Generator().manual_seed(5)
    rotated = []

    def other_solver(M):
        lam, U = real(M)
        k = int((lam <= lam.shape[0] * torch.finfo(lam.dtype).eps * lam.abs().max()).sum())
        if k >= 2:
            rotated.append(k)
            Q, _ = torch.linalg.qr(torch.randn(k, k, dtype=U.dtype, generator=g))
            U = torch.cat([U[:, :k] @ Q, U[:, k:]], dim=1)
        return lam, U
    monkeypatch.setattr(torch.linalg, "eigh", other_solver)
    second = train()
    assert rotated                                    # some null space was met, and turned
    torch.testing.assert_close(second, first, rtol=1e-7, atol=1e-9)
