r"""Wishart distributions :math:`W_p(\nu, V)` on :math:`p \times p` SPD matrices.

:math:`p(X) = \frac{|X|^{(\nu-p-1)/2} e^{-\mathrm{tr}(V^{-1}X)/2}}{2^{\nu p/2}|V|^{\nu/2}\Gamma_p(\nu/2)}`,
degrees of freedom :math:`\nu > p - 1`, scale :math:`V` SPD.  Matrices are stored by their
upper triangle, row by row (``vech``).  Sufficient statistics
:math:`t(X) = (\log|X|, \mathrm{vech}_2(X))` where :math:`\mathrm{vech}_2` doubles off-diagonal
entries (so that :math:`\theta^T t = \theta_0\log|X| + \mathrm{tr}(\Theta X)`), natural
parameters :math:`\theta_0 = (\nu - p - 1)/2`, :math:`\Theta = -V^{-1}/2` (base measure 1),
log-partition

.. math:: \psi(\theta) = \log\Gamma_p(a) - a\log|{-\Theta}|,\qquad a = \theta_0 + (p+1)/2 = \nu/2.

Standard chart :math:`(\nu, \mathrm{vech}\,V)`; Fisher there (derived from the log-likelihood):
:math:`g_{\nu\nu} = \tfrac14\sum_{i=1}^p\psi_1\big((\nu - i + 1)/2\big)`,
:math:`g_{\nu V}(dV) = \tfrac12\mathrm{tr}(V^{-1}dV)`,
:math:`g_{VV}(dV, dW) = \tfrac\nu2\mathrm{tr}(V^{-1}dV\,V^{-1}dW)`.
Geodesics have no closed form (the generic ODE solvers apply).
``load_manifold("wishart", p=3)`` picks the matrix size (default 2).
"""
import numpy as np
from scipy.stats import wishart

import infogeo as ig
from infogeo import backend as B
from infogeo.statistical import Chart


def _multigammaln(a, p):
    r""":math:`\log\Gamma_p(a) = \tfrac{p(p-1)}{4}\log\pi + \sum_{j<p}\log\Gamma(a - j/2)`, on either backend."""
    return p * (p - 1) / 4.0 * np.log(np.pi) + sum(B.gammaln(a - j / 2.0) for j in range(p))


def _vech_basis(p):
    """The symmetric matrices ``E_j`` with ``S = sum_j vech(S)_j E_j``, shape ``(m, p, p)``."""
    iu = np.triu_indices(p)
    E = np.zeros((len(iu[0]), p, p))
    for j, (a, b) in enumerate(zip(*iu)):
        E[j, a, b] = E[j, b, a] = 1.0
    return E


class Wishart(ig.ExponentialFamily):
    def __init__(self, p=2, chart=None):
        if int(p) != p or p < 1:
            raise ValueError(f"the matrix size p must be a positive integer, got {p!r}")
        self.p = p = int(p)
        self._E = E = _vech_basis(p)
        self._iu = iu = np.triu_indices(p)
        m = len(E)
        mat = lambda v: B.einsum("j,jab->ab", v, E)  # noqa: E731  vech -> symmetric matrix

        def psi(th):
            a = th[0] + (p + 1) / 2.0
            return _multigammaln(a, p) - a * B.slogdet(-mat(th[1:]))[1]

        def in_domain(th):
            th = B.to_numpy(th)
            return bool(th[0] > -1.0 and np.all(np.linalg.eigvalsh(-mat(th[1:])) > 0))

        def check(s):
            s = B.to_numpy(s)
            if not s[0] > p - 1:
                raise ValueError(f"degrees of freedom must exceed p - 1 = {p - 1}, got {s[0]}")
            if not np.all(np.linalg.eigvalsh(mat(s[1:])) > 0):
                raise ValueError(f"the scale must be symmetric positive definite, got vech {s[1:].tolist()}")

        def to_nat(s):
            return B.concatenate([B.reshape((s[0] - p - 1) / 2.0, (1,)), B.inv(mat(s[1:]))[iu] * -0.5])

        def from_nat(th):
            return B.concatenate([B.reshape(2.0 * th[0] + p + 1, (1,)), B.inv(mat(th[1:]))[iu] * -0.5])

        def fisher(s):
            nu, Vi = s[0], B.inv(mat(s[1:]))
            g_nn = 0.25 * sum(B.polygamma(1, (nu - j) / 2.0) for j in range(p))
            g_nv = 0.5 * B.einsum("ab,jba->j", Vi, E)
            g_vv = 0.5 * nu * B.einsum("ab,ibc,cd,jda->ij", Vi, E, Vi, E)
            return B.concatenate([B.reshape(B.concatenate([B.reshape(g_nn, (1,)), g_nv]), (1, m + 1)),
                                  B.concatenate([B.reshape(g_nv, (m, 1)), g_vv], axis=1)], axis=0)

        def stats(X):
            X = np.asarray(X, dtype=float).reshape(-1, p, p)
            sign, logdet = np.linalg.slogdet(X)
            # t(X) reads the upper triangle only: a non-symmetric X would be taken for another matrix
            if np.any(sign <= 0) or not np.allclose(X, np.swapaxes(X, -1, -2), rtol=1e-10, atol=1e-12):
                raise ValueError("Wishart observations must be symmetric positive definite matrices")
            off = np.where(iu[0] == iu[1], 1.0, 2.0)
            return np.concatenate([logdet[:, None], X[:, iu[0], iu[1]] * off], axis=1)

        def sampler(th, n, rng):
            s = B.to_numpy(from_nat(th))
            return wishart(df=s[0], scale=mat(s[1:])).rvs(size=n, random_state=rng).reshape(n, p, p)

        super().__init__(
            sufficient_statistics=stats, log_partition=psi, dim=m + 1,
            natural_domain=in_domain, natural_domain_description="theta_0 > -1 and Theta negative definite",
            sampler=sampler,
            standard_chart=Chart("standard", to_nat, from_nat, check,
                                 f"(degrees of freedom > {p - 1}, vech of an SPD {p}x{p} scale)",
                                 fisher=fisher),
            chart=chart, name=f"Wishart({p})")
        self._mat = mat

    def point(self, coords=None, *, df=None, scale=None):
        """A point from coordinates in the current chart, or from ``df=`` and a ``p x p`` ``scale=``."""
        if coords is not None:
            if df is not None or scale is not None:
                raise ValueError("give either coords or df= and scale=, not both")
            return super().point(coords)
        if df is None or scale is None:
            raise ValueError("give coords, or both df= and scale=")
        V = np.array(scale, dtype=float)
        if V.shape != (self.p, self.p) or not np.allclose(V, V.T):
            raise ValueError(f"scale must be a symmetric {self.p}x{self.p} matrix, got shape {V.shape}")
        s = np.concatenate([[float(df)], V[self._iu]])
        self._charts["standard"].check(s)
        return self.from_chart(B.array(s), "standard")

    def parameters(self, p):
        s = B.to_numpy(self.to_chart(p, "standard"))
        return {"df": float(s[0]), "scale": np.asarray(self._mat(s[1:]))}

    def random_point(self, rng=None, scale=1.0):
        rng = np.random.default_rng(rng)
        A = rng.standard_normal((self.p, self.p))
        return self.point(df=self.p + 1 + 3 * rng.random(), scale=A @ A.T / self.p + 0.5 * np.eye(self.p))


def make(p=2, chart=None):
    return Wishart(p, chart)
