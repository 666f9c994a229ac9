"""The heteroscedastic Gaussian in natural parameters against float64 references.

The references are built independently of sklaplace: the negative log-likelihood written
in natural parameters η = (η₁, η₂) (−η₁y − η₂y² + A(η) + ½ log 2π, A the log partition),
its Hessian by ``torch.func.hessian``, the network's natural parameters
η(x; θ) = (f₁, −½·exp(f₂)) differentiated by ``torch.func.jacrev`` (the link is part of
the network), and the GGN Σ_n J_nᵀ H_n J_n of all weights as a dense matrix; every
posterior structure is then read against it.
"""

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, hessian, jacrev

from sklaplace._laplace.curvature import compute_posterior
from sklaplace._laplace.likelihoods import HeteroscedasticGaussian, get
from sklaplace._laplace.subsets import AllWeights, LastLayer, Subnetwork

DT = torch.float64
LIK = HeteroscedasticGaussian()


def close(a, b, rtol=1e-9, atol=1e-11):
    torch.testing.assert_close(torch.as_tensor(a, dtype=DT), torch.as_tensor(b, dtype=DT),
                               rtol=rtol, atol=atol)


def natural_nll(eta, y):
    """−log N(y | μ, σ²) in natural parameters, per target, summed: (T,) and (T,) → ()."""
    T = y.numel()
    eta1, eta2 = eta[:T], eta[T:]
    log_partition = -eta1**2 / (4 * eta2) - 0.5 * torch.log(-2 * eta2)
    return (-eta1 * y - eta2 * y**2 + log_partition + 0.5 * math.log(2 * math.pi)).sum()


def problem(T, n_rows, seed=0):
    torch.manual_seed(seed)
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2 * T)).to(DT)
    g = torch.Generator().manual_seed(seed + 1)
    X = torch.randn(n_rows, 3, generator=g, dtype=DT)
    y = torch.randn(n_rows, T, generator=g, dtype=DT)
    return module, X, y


def reference_ggn(module, X, y):
    """(GGN (P, P), EF (P, P)) of all weights from per-row Jacobians of η(x; θ)."""
    names = [k for k, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for p in module.parameters()])

    def unflatten(th):
        out, i = {}, 0
        for k, sh in zip(names, shapes):
            out[k] = th[i:i + math.prod(sh)].reshape(sh)
            i += math.prod(sh)
        return out

    def eta_row(th, x):
        f = functional_call(module, unflatten(th), (x[None],)).reshape(-1)
        T = f.numel() // 2
        return torch.cat([f[:T], -0.5 * torch.exp(f[T:])])

    P = theta.numel()
    H, E = torch.zeros(P, P, dtype=DT), torch.zeros(P, P, dtype=DT)
    for x, yy in zip(X, y):
        J = jacrev(eta_row)(theta, x)
        eta = eta_row(theta, x).detach()
        H += J.T @ hessian(natural_nll)(eta, yy) @ J
        gr = grad(lambda th: natural_nll(eta_row(th, x), yy))(theta)
        E += torch.outer(gr, gr)
    return H, E


def test_nll_residual_and_sqrt_hessian_match_natural_parameters():
    g = torch.Generator().manual_seed(3)
    f = torch.randn(7, 4, generator=g, dtype=DT)  # T = 2
    y = torch.randn(7, 2, generator=g, dtype=DT)
    mu, var = LIK.mean_and_variance(f)
    normal = torch.distributions.Normal(mu, var.sqrt())
    close(LIK.nll(f, y), -normal.log_prob(y).sum(1))
    for n in range(7):
        def nll_f(frow, yy=y[n]):
            return natural_nll(torch.cat([frow[:2], -0.5 * torch.exp(frow[2:])]), yy)

        close(LIK.residual(f[n:n + 1], y[n:n + 1])[0], grad(nll_f)(f[n]))
        eta = torch.cat([f[n, :2], -0.5 * torch.exp(f[n, 2:])])
        D = torch.diag(torch.cat([torch.ones(2, dtype=DT), -0.5 * torch.exp(f[n, 2:])]))
        S = LIK.sqrt_hessian(f[n:n + 1])[0]
        close(S @ S.T, D @ hessian(natural_nll)(eta, y[n]) @ D)
    assert get("heteroscedastic") == LIK and LIK.n_outputs(3) == 6 and not LIK.has_noise


@pytest.mark.parametrize("T", [1, 2])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
@pytest.mark.parametrize("n_rows", [30, 2])
def test_full_and_diag_match_the_bruteforce_ggn(T, curvature, n_rows):
    module, X, y = problem(T, n_rows)
    H, E = reference_ggn(module, X, y)
    ref = H if curvature == "ggn" else E
    ones = torch.ones(2 * T, dtype=DT)
    subset = AllWeights(module)
    full = compute_posterior("full", subset, LIK, X, y, ones, curvature)
    delta, s = torch.tensor(0.7, dtype=DT), torch.tensor(1.0, dtype=DT)
    close(full.log_det(delta, s), torch.logdet(ref + delta * torch.eye(len(ref), dtype=DT)))
    close(full.with_prior(delta, s).marginal_variance(),
          torch.linalg.inv(ref + delta * torch.eye(len(ref), dtype=DT)).diagonal())
    diag = compute_posterior("diag", subset, LIK, X, y, ones, curvature)
    close(diag.h, ref.diagonal())
    idx = [0, 5, 13, 17, 20, 22]
    sub = compute_posterior("full", Subnetwork(module, idx), LIK, X, y, ones, curvature)
    close(sub.log_det(delta, s),
          torch.logdet(ref[idx][:, idx] + delta * torch.eye(len(idx), dtype=DT)))


@pytest.mark.parametrize("T", [1, 2])
@pytest.mark.parametrize("structure", ["full", "kron"])
def test_last_layer_matches_its_block_of_the_ggn(T, structure):
    module, X, y = problem(T, 25)
    H, _ = reference_ggn(module, X, y)
    last = slice(16, H.shape[0])  # after the first layer's 12 + 4 weights
    subset = LastLayer(module, X[:2])
    post = compute_posterior(structure, subset, LIK, X, y, torch.ones(2 * T, dtype=DT))
    delta, s = torch.tensor(0.4, dtype=DT), torch.tensor(1.0, dtype=DT)
    block = H[last, last]
    if structure == "full":
        close(post.log_det(delta, s),
              torch.logdet(block + delta * torch.eye(len(block), dtype=DT)))
    else:  # the bias block Σ_n S_n S_nᵀ is exact; the weight block is G ⊗ A
        (Gw, Aw), (Gb,) = ([Q @ torch.diag(e) @ Q.T for Q, e in factors]
                           for _, factors, _ in post.blocks)
        close(Gb, block[-2 * T:, -2 * T:])
        close(Gw, Gb)
        with torch.no_grad():
            phi = torch.tanh(module[0](X))
        close(Aw, phi.T @ phi / len(X))


@pytest.mark.parametrize("T", [1, 2])
def test_kron_is_exact_on_one_row_and_its_bias_blocks_on_many(T):
    for n_rows in (1, 20):
        module, X, y = problem(T, n_rows)
        H, _ = reference_ggn(module, X, y)
        post = compute_posterior("kron", AllWeights(module), LIK, X, y,
                                 torch.ones(2 * T, dtype=DT))
        for sl, factors, _ in post.blocks:
            mats = [Q @ torch.diag(e) @ Q.T for Q, e in factors]
            M = mats[0] if len(mats) == 1 else torch.kron(mats[0], mats[1])
            if n_rows == 1 or len(mats) == 1:
                close(M, H[sl, sl], atol=1e-10)
