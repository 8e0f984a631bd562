"""The laplace-torch backends against laplace's own references on the same models, float64.

References: laplace's curvlinops backends for ``kron`` and ``diag``; for ``full``, laplace's
generic ``torch.func`` Jacobian path (its curvlinops ``full`` multiplies by a float32
identity, which caps its agreement near 1e-7); per-example gradients written out here for
the last-layer empirical Fisher diagonal.
"""
from __future__ import annotations

import pytest
import torch

laplace = pytest.importorskip("laplace")
pytest.importorskip("curvlinops")
from laplace import Laplace  # noqa: E402
from laplace.curvature import CurvlinopsEF, CurvlinopsGGN  # noqa: E402
from laplace.curvature.curvature import EFInterface, GGNInterface  # noqa: E402

from infogeo.interop.laplace import InfogeoEF, InfogeoGGN  # noqa: E402

LIKELIHOODS = ("classification", "regression")


class _FuncGGN(CurvlinopsGGN):
    full = GGNInterface.full


class _FuncEF(CurvlinopsEF):
    full = EFInterface.full


def _problem(likelihood: str, n: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 3, dtype=torch.float64, generator=g)
    out = 3 if likelihood == "classification" else 2
    y = (torch.randint(0, 3, (n,), generator=g) if likelihood == "classification"
         else torch.randn(n, out, dtype=torch.float64, generator=g))
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, out)).double()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=n // 2)
    return model, loader, X


def _fit(model, loader, likelihood, structure, backend, subset="all"):
    la = Laplace(model, likelihood, subset_of_weights=subset, hessian_structure=structure, backend=backend)
    la.fit(loader)
    return la


def _close(a, b, tol=1e-6):
    if isinstance(a, tuple):
        return all(_close(x, y, tol) for x, y in zip(a, b))
    return torch.allclose(a, b, rtol=tol, atol=tol)


REFERENCES = {("full", "ggn"): _FuncGGN, ("full", "ef"): _FuncEF, ("kron", "ggn"): CurvlinopsGGN,
              ("kron", "ef"): CurvlinopsEF, ("diag", "ggn"): CurvlinopsGGN, ("diag", "ef"): CurvlinopsEF}
OURS = {"ggn": InfogeoGGN, "ef": InfogeoEF}


# laplace's generic EF diagonal ignores last-layer parameters: that cell is checked by hand below
CASES = [(s, c, sub) for s in ("full", "kron", "diag") for c in ("ggn", "ef") for sub in ("all", "last_layer")
         if (s, c, sub) != ("diag", "ef", "last_layer")]


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("structure, curv, subset", CASES)
def test_matches_laplace_reference(likelihood, structure, curv, subset):
    model, loader, X = _problem(likelihood)
    ours = _fit(model, loader, likelihood, structure, OURS[curv], subset)
    reference = REFERENCES[structure, curv]
    if (structure, curv, subset) == ("full", "ef", "last_layer"):
        reference = CurvlinopsEF  # laplace's generic EF path ignores last-layer parameters
    ref = _fit(model, loader, likelihood, structure, reference, subset)
    lml, lml_ref = ours.log_marginal_likelihood(), ref.log_marginal_likelihood()
    assert torch.isfinite(lml)
    assert abs(lml.item() - lml_ref.item()) < 1e-6 * max(1.0, abs(lml_ref.item()))
    assert _close(ours(X[:5]), ref(X[:5]))


@pytest.mark.parametrize("likelihood", LIKELIHOODS)
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_last_layer_empirical_fisher_by_hand(likelihood, structure):
    model, loader, X = _problem(likelihood)
    la = _fit(model, loader, likelihood, structure, InfogeoEF, "last_layer")
    (Xall, yall), = [(t[0], t[1]) for t in [loader.dataset.tensors]]
    feats = model[:2](Xall).detach()
    last = model[2]
    P = sum(p.numel() for p in last.parameters())
    total = torch.zeros(P, P, dtype=torch.float64)
    loss = (torch.nn.CrossEntropyLoss(reduction="sum") if likelihood == "classification"
            else torch.nn.MSELoss(reduction="sum"))
    factor = 1.0 if likelihood == "classification" else 0.5
    for phi, t in zip(feats, yall):
        g = torch.autograd.grad(loss(last(phi[None]), t[None]), list(last.parameters()))
        gv = torch.cat([gi.reshape(-1) for gi in g])
        total += torch.outer(gv, gv)
    expected = factor * (total if structure == "full" else torch.diagonal(total))
    assert torch.allclose(la.H, expected, rtol=1e-10, atol=1e-12)


def test_subnetwork_full_matches_reference():
    model, loader, X = _problem("classification")
    idx = torch.tensor([0, 3, 7, 20, 27, 31, 37])
    vals = []
    for backend in (InfogeoGGN, CurvlinopsGGN):
        la = Laplace(model, "classification", subset_of_weights="subnetwork", subnetwork_indices=idx,
                     hessian_structure="full", backend=backend)
        la.fit(loader)
        vals.append((la.log_marginal_likelihood(), la(X[:5])))
    assert abs(vals[0][0].item() - vals[1][0].item()) < 1e-9
    assert _close(vals[0][1], vals[1][1], 1e-9)


def test_backend_curvature_is_the_summed_ggn():
    """Independent of laplace's classes: the backend's full GGN is sum_n J_n^T H_n J_n."""
    model, loader, X = _problem("classification", n=8)
    y = loader.dataset.tensors[1]
    be = InfogeoGGN(model, "classification")
    _, H = be.full(X, y)
    params = dict(model.named_parameters())
    J = torch.func.jacrev(lambda p: torch.func.functional_call(model, p, (X,)))(params)
    J = torch.cat([J[n].reshape(8, 3, -1) for n in params], dim=2)
    p = torch.softmax(model(X), -1).detach()
    Hz = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    assert torch.allclose(H, torch.einsum("nip,nij,njq->pq", J, Hz, J), rtol=1e-10, atol=1e-12)
    _, d = be.diag(X, y)
    assert torch.allclose(d, torch.diagonal(H), rtol=1e-10, atol=1e-12)


def test_stochastic_fisher_is_unbiased():
    model, loader, X = _problem("classification", n=6)
    y = loader.dataset.tensors[1]
    _, exact = InfogeoGGN(model, "classification").diag(X, y)
    torch.manual_seed(1)
    draws = torch.stack([InfogeoGGN(model, "classification", stochastic=True, num_samples=20).diag(X, y)[1]
                         for _ in range(60)])
    se = draws.std(0) / draws.shape[0] ** 0.5
    assert bool(((draws.mean(0) - exact).abs() <= 3 * se + 1e-12).float().mean() >= 0.95)


def test_refusals_are_clear():
    model, loader, X = _problem("classification")
    y = loader.dataset.tensors[1]
    with pytest.raises(TypeError, match="dictionary inputs"):
        InfogeoGGN(model, "classification").full({"input_ids": X}, y)
    emb = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Flatten(), torch.nn.Linear(8, 3)).double()
    tokens = torch.randint(0, 7, (10, 2))
    with pytest.raises(ValueError, match="0.weight"):
        InfogeoGGN(emb, "classification").kron(tokens, torch.randint(0, 3, (10,)), N=10)
