"""Brute-force float64 checks of the curvature, posterior structures and evidence.

Every reference is built independently of sklaplace: per-row Jacobians with
``torch.func.jacrev`` through ``functional_call`` on a flat parameter vector, the
output Hessian Λ written out by hand (softmax diag(p) − ppᵀ, Bernoulli p(1 − p), per
label diag(p(1 − p)) for multilabel, Gaussian diag(1/σ_c²)), per-row gradients of a hand-written negative
log-likelihood for the empirical Fisher, and dense ``torch.linalg`` inverses and
log-determinants.

Conventions checked here (see sklaplace._laplace.curvature): ``out_scale`` (1/σ_c per
output) scales the output rows of the per-row factor — Λ^½ for the GGN, the
residual ∇_f nll (at unit noise) for the EF — so that a per-output noise vector
with equal entries σ gives the same posterior as the scalar σ applied through the
factor s = 1/σ² (laplace-torch's convention for both GGN and EF).
"""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from torch import nn
from torch.func import functional_call, grad, jacrev

from sklaplace._laplace.curvature import compute_posterior, noise_power
from sklaplace._laplace.evidence import LOG_PRIOR_BOUNDS, Evidence, maximize_evidence
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.posterior import EigenPosterior
from _references import random_targets, ref_lambda

from sklaplace._laplace.subsets import last_layer as last_layer_module
from sklaplace._laplace.subsets import AllWeights, LastLayer, Subnetwork

DT = torch.float64
N_OUT = {"categorical": 3, "bernoulli": 1, "multilabel": 3, "gaussian": 2}
GAUSS_SCALE = torch.tensor([2.0, 0.5], dtype=DT)  # out_scale = 1/σ_c, σ = (0.5, 2)
SUBNET_IDX = [0, 3, 7, 12, 14, 15, 17, 18, 19, 20]  # spans both layers; < P for every net
S = 1.7  # an arbitrary curvature scale s


# --------------------------------------------------------------------------- problems
def make_net(n_out, bias_last=True, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, n_out, bias=bias_last)).to(DT)


def make_data(lik, n_rows, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_rows, 3, generator=g, dtype=DT)
    return X, random_targets(lik, n_rows, N_OUT[lik], g)


def out_scale_for(lik, unit=False):
    if lik == "gaussian" and not unit:
        return GAUSS_SCALE.clone()
    return torch.ones(N_OUT[lik], dtype=DT)


def flat(module):
    names = [k for k, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in module.named_parameters()])
    return names, shapes, theta


def unflatten(theta, names, shapes):
    out, i = {}, 0
    for k, sh in zip(names, shapes):
        n = math.prod(sh)
        out[k] = theta[i : i + n].reshape(sh)
        i += n
    return out


def ref_nll_f(lik, f, y):
    """Unit-noise negative log-likelihood of one row's outputs f (C,), written by hand."""
    if lik == "categorical":
        return -(f[y] - torch.logsumexp(f, 0))
    if lik == "bernoulli":
        return torch.nn.functional.softplus(f[0]) - y * f[0]
    if lik == "multilabel":
        return (torch.nn.functional.softplus(f) - y * f).sum()
    return 0.5 * ((y - f) ** 2).sum()


_CACHE = {}


def reference(lik, n_rows, bias_last=True):
    """Per-row Jacobians (N, C, P_all), Λ_n, residual-gradients g_n (N, P_all) on all weights."""
    key = (lik, n_rows, bias_last)
    if key in _CACHE:
        return _CACHE[key]
    module = make_net(N_OUT[lik], bias_last)
    X, y = make_data(lik, n_rows)
    names, shapes, theta = flat(module)
    os_ = out_scale_for(lik)

    def f_row(th, x):
        return functional_call(module, unflatten(th, names, shapes), (x[None],)).reshape(-1)

    def nll_row(th, x, yy):
        # The true negative log-likelihood; for the Gaussian with σ_c = 1/out_scale_c.
        f = f_row(th, x)
        if lik == "gaussian":
            return 0.5 * (((yy.reshape(f.shape) - f) * os_) ** 2).sum()
        return ref_nll_f(lik, f, yy)

    J = torch.stack([jacrev(f_row)(theta, X[n]) for n in range(n_rows)])
    with torch.no_grad():
        F = torch.stack([f_row(theta, X[n]) for n in range(n_rows)])
    Lam = torch.stack([ref_lambda(lik, F[n], os_) for n in range(n_rows)])
    g = torch.stack([grad(nll_row)(theta, X[n], y[n]) for n in range(n_rows)])
    out = dict(module=module, X=X, y=y, J=J, F=F, Lam=Lam, g=g, theta=theta, names=names,
               shapes=shapes, out_scale=os_)
    _CACHE[key] = out
    return out


def last_layer_columns(module):
    names, shapes, _ = flat(module)
    sizes = [math.prod(s) for s in shapes]
    offs = np.concatenate([[0], np.cumsum(sizes)])
    cols = []
    for k in ("2.weight", "2.bias"):
        if k in names:
            i = names.index(k)
            cols.extend(range(offs[i], offs[i + 1]))
    return cols


def make_subset(kind, module, X):
    if kind == "all":
        return AllWeights(module), list(range(sum(p.numel() for p in module.parameters())))
    if kind == "last_layer":
        return LastLayer(module, X[:2]), last_layer_columns(module)
    return Subnetwork(module, SUBNET_IDX), list(SUBNET_IDX)


def ref_curvature(ref, cols, curvature):
    J = ref["J"][:, :, cols]
    if curvature == "ggn":
        return torch.einsum("ncp,ncd,ndq->pq", J, ref["Lam"], J)
    g = ref["g"][:, cols]
    return g.T @ g


def probe_jacobians(module, cols):
    names, shapes, theta = flat(module)
    X_test = torch.randn(5, 3, generator=torch.Generator().manual_seed(7), dtype=DT)

    def f_row(th, x):
        return functional_call(module, unflatten(th, names, shapes), (x[None],)).reshape(-1)

    return torch.stack([jacrev(f_row)(theta, x) for x in X_test])[:, :, cols]


def prior(kind, P, seed=3):
    if kind == "scalar":
        return torch.tensor(0.8, dtype=DT)
    g = torch.Generator().manual_seed(seed)
    return 0.3 + 2 * torch.rand(P, generator=g, dtype=DT)


def close(a, b, rtol=1e-8, atol=1e-10):
    torch.testing.assert_close(torch.as_tensor(a, dtype=DT), torch.as_tensor(b, dtype=DT),
                               rtol=rtol, atol=atol)


def check_against_matrix(post, H_ref, delta, s, J_test):
    """log_det, functional variance and marginal variance against the dense precision."""
    P = H_ref.shape[0]
    D = torch.diag(delta.expand(P)) if delta.dim() == 0 else torch.diag(delta)
    prec = s * H_ref + D
    Sigma = torch.linalg.inv(prec)
    close(post.log_det(delta, torch.tensor(s, dtype=DT)), torch.logdet(prec))
    post = post.with_prior(delta, torch.tensor(s, dtype=DT))
    close(post.functional_variance(J_test), J_test @ Sigma @ J_test.transpose(1, 2))
    close(post.marginal_variance(), Sigma.diagonal())
    return Sigma


# --------------------------------------------------------------------------- raw curvature
LIKS = ["categorical", "bernoulli", "multilabel", "gaussian"]
SUBSETS = ["all", "last_layer", "subnetwork"]


def _build(lik, kind, n_rows, structure, curvature, rank=None, bias_last=True, unit=False):
    ref = reference(lik, n_rows, bias_last)
    module = ref["module"]
    subset, cols = make_subset(kind, module, ref["X"])
    os_ = out_scale_for(lik, unit)
    post = compute_posterior(structure, subset, LIKELIHOODS[lik](), ref["X"], ref["y"], os_,
                             curvature, rank)
    return ref, subset, cols, post


@pytest.mark.parametrize("lik", LIKS)
def test_reference_nll_and_sqrt_hessian_match_likelihoods(lik):
    """The hand-written Λ and nll agree with the library's likelihood objects."""
    ref = reference(lik, 20)
    L = LIKELIHOODS[lik]()
    S_ = L.sqrt_hessian(ref["F"]) * ref["out_scale"][None, :, None]
    close(S_ @ S_.transpose(1, 2), ref["Lam"])
    nll = torch.stack([ref_nll_f(lik, ref["F"][n], ref["y"][n]) for n in range(20)])
    close(L.nll(ref["F"], ref["y"]), nll)


@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("kind", SUBSETS)
def test_subset_jacobians_match_jacrev(lik, kind):
    ref = reference(lik, 20)
    subset, cols = make_subset(kind, ref["module"], ref["X"])
    f, J = subset.jacobians(ref["X"])
    close(J, ref["J"][:, :, cols])
    close(f, ref["F"])
    close(subset.theta, ref["theta"][cols])


# --------------------------------------------------------------------------- full
@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("kind", SUBSETS)
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
@pytest.mark.parametrize("n_rows", [40, 3])
def test_full_matches_bruteforce(lik, kind, curvature, n_rows):
    ref, subset, cols, post = _build(lik, kind, n_rows, "full", curvature)
    P = len(cols)
    K = N_OUT[lik] if curvature == "ggn" else 1
    # n_rows = 40: P ≤ N·K, matrix eigh (rank P); n_rows = 3: N·K < P, kernel path.
    assert (post.rank < P) == (n_rows * K < P)
    H = ref_curvature(ref, cols, curvature)
    J_test = probe_jacobians(ref["module"], cols)
    for kind_delta in ("scalar", "vector"):
        check_against_matrix(post, H, prior(kind_delta, P), S, J_test)


# --------------------------------------------------------------------------- diag
@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("kind", SUBSETS)
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_diag_matches_bruteforce(lik, kind, curvature):
    ref, subset, cols, post = _build(lik, kind, 20, "diag", curvature)
    H = ref_curvature(ref, cols, curvature)
    close(post.h, H.diagonal())
    J_test = probe_jacobians(ref["module"], cols)
    for kind_delta in ("scalar", "vector"):
        delta = prior(kind_delta, len(cols))
        Hd = torch.diag(H.diagonal())
        close(post.log_det(delta, torch.tensor(S, dtype=DT)),
              torch.log(S * H.diagonal() + delta).sum())
        check_against_matrix(post, Hd, delta, S, J_test)


# --------------------------------------------------------------------------- lowrank
@pytest.mark.parametrize("lik", ["categorical", "multilabel", "gaussian"])
@pytest.mark.parametrize("kind", ["all", "subnetwork"])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
@pytest.mark.parametrize("n_rows", [40, 3])
def test_lowrank_full_rank_equals_full(lik, kind, curvature, n_rows):
    P = len(make_subset(kind, make_net(N_OUT[lik]), torch.zeros(2, 3, dtype=DT))[1])
    ref, subset, cols, post = _build(lik, kind, n_rows, "lowrank", curvature, rank=P)
    assert post.structure == "lowrank"
    H = ref_curvature(ref, cols, curvature)
    J_test = probe_jacobians(ref["module"], cols)
    for kind_delta in ("scalar", "vector"):
        check_against_matrix(post, H, prior(kind_delta, len(cols)), S, J_test)


@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
@pytest.mark.parametrize("n_rows", [40, 3])
def test_lowrank_truncated_matches_top_eigenpairs(lik, curvature, n_rows):
    k = 2 if n_rows == 3 and curvature == "ef" else 4  # k < rank(G) on every path
    ref, subset, cols, post = _build(lik, "all", n_rows, "lowrank", curvature, rank=k)
    P = len(cols)
    H = ref_curvature(ref, cols, curvature)
    lam, V = torch.linalg.eigh(H)
    assert lam[-k - 1] < lam[-k] * (1 - 1e-6)  # the top-k subspace is well defined
    lam_k, V_k = lam[-k:], V[:, -k:]
    delta = prior("scalar", P)
    close(post.log_det(delta, torch.tensor(S, dtype=DT)),
          torch.log(S * lam_k + delta).sum() + (P - k) * torch.log(delta))
    H_k = V_k @ torch.diag(lam_k) @ V_k.T
    J_test = probe_jacobians(ref["module"], cols)
    for kind_delta in ("scalar", "vector"):
        check_against_matrix(post, H_k, prior(kind_delta, P), S, J_test)


# --------------------------------------------------------------------------- kron
def kron_block_matrices(post):
    """(slice, dense block) reconstructed from the stored eigen-factors."""
    out = []
    for sl, factors, _ in post.blocks:
        mats = [Q @ torch.diag(e) @ Q.T for Q, e in factors]
        M = mats[0] if len(mats) == 1 else torch.kron(mats[0], mats[1])
        out.append((sl, mats, M))
    return out


def kron_dense(post, P):
    H = torch.zeros(P, P, dtype=DT)
    for sl, _, M in kron_block_matrices(post):
        H[sl, sl] = M
    return H


@pytest.mark.parametrize("unit", [True, False])
def test_kron_exact_for_gaussian_last_layer_without_bias(unit):
    ref, subset, cols, post = _build("gaussian", "last_layer", 20, "kron", "ggn",
                                     bias_last=False, unit=unit)
    os_ = out_scale_for("gaussian", unit)
    J = ref["J"][:, :, cols]
    H = torch.einsum("ncp,c,ncq->pq", J, os_**2, J)
    J_test = probe_jacobians(ref["module"], cols)
    assert len(post.blocks) == 1
    # Scalar δ, and a vector δ (one value for the single weight tensor).
    for delta in (prior("scalar", len(cols)), torch.full((len(cols),), 1.3, dtype=DT)):
        check_against_matrix(post, H, delta, S, J_test)


@pytest.mark.parametrize("unit", [True, False])
def test_kron_gaussian_last_layer_with_bias_blocks_exact(unit):
    ref, subset, cols, post = _build("gaussian", "last_layer", 20, "kron", "ggn", unit=unit)
    os_ = out_scale_for("gaussian", unit)
    J = ref["J"][:, :, cols]
    H = torch.einsum("ncp,c,ncq->pq", J, os_**2, J)
    blocks = kron_block_matrices(post)
    assert len(blocks) == 2
    (w_sl, _, Mw), (b_sl, _, Mb) = blocks
    close(Mb, H[b_sl, b_sl])  # the bias block Σ_n S_n S_nᵀ = N diag(1/σ²)
    close(Mw, H[w_sl, w_sl])  # for a Gaussian last layer the weight block is exact too
    delta = torch.tensor(0.9, dtype=DT)
    close(post.log_det(delta, torch.tensor(S, dtype=DT)),
          torch.logdet(S * H[w_sl, w_sl] + delta * torch.eye(Mw.shape[0], dtype=DT))
          + torch.logdet(S * H[b_sl, b_sl] + delta * torch.eye(Mb.shape[0], dtype=DT)))


def manual_forward(module, x, e1, e2):
    """The Sequential(Linear, Tanh, Linear) net written out, pre-activations perturbed."""
    l1, l2 = module[0], module[2]
    s1 = x @ l1.weight.T + l1.bias + e1
    a2 = torch.tanh(s1)
    s2 = a2 @ l2.weight.T + e2
    return s2 + l2.bias if l2.bias is not None else s2


def ref_kron_factors(lik, ref, curvature):
    """Per-layer (G_l, A_l) by brute force: G_l = Σ B_n B_nᵀ, A_l = Σ a_n a_nᵀ / N."""
    module, X, y, os_ = ref["module"], ref["X"], ref["y"], ref["out_scale"]
    C = N_OUT[lik]
    e1, e2 = torch.zeros(4, dtype=DT), torch.zeros(C, dtype=DT)
    with torch.no_grad():
        close(manual_forward(module, X, e1, e2), ref["F"])
    G1, G2 = torch.zeros(4, 4, dtype=DT), torch.zeros(C, C, dtype=DT)
    for n in range(X.shape[0]):
        x = X[n]
        if curvature == "ggn":
            d1, d2 = jacrev(lambda a, b: manual_forward(module, x, a, b), argnums=(0, 1))(e1, e2)
            d1, d2 = d1.detach(), d2.detach()
            Lam = ref["Lam"][n]
            G1 += d1.T @ Lam @ d1
            G2 += d2.T @ Lam @ d2
        else:
            def nll(a, b):
                f = manual_forward(module, x, a, b)
                if lik == "gaussian":
                    return 0.5 * (((y[n].reshape(f.shape) - f) * os_) ** 2).sum()
                return ref_nll_f(lik, f, y[n])

            r1, r2 = grad(nll, argnums=(0, 1))(e1, e2)
            G1 += torch.outer(r1, r1).detach()
            G2 += torch.outer(r2, r2).detach()
    with torch.no_grad():
        a2 = torch.tanh(X @ module[0].weight.T + module[0].bias)
    N = X.shape[0]
    return [(G1, X.T @ X / N), (G2, a2.T @ a2 / N)]


@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_kron_factors_match_bruteforce(lik, curvature):
    ref, subset, cols, post = _build(lik, "all", 20, "kron", curvature)
    P = len(cols)
    factors = ref_kron_factors(lik, ref, curvature)
    blocks = kron_block_matrices(post)
    # Order: weight 1, bias 1, weight 2, bias 2 (parameter order of the net).
    assert [len(m) for _, m, _ in blocks] == [2, 1, 2, 1]
    for layer, (G, A) in enumerate(factors):
        (_, (Gw, Aw), _), (_, (Gb,), _) = blocks[2 * layer], blocks[2 * layer + 1]
        close(Gw, G, atol=1e-12, rtol=1e-9)
        close(Aw, A, atol=1e-12, rtol=1e-9)
        close(Gb, G, atol=1e-12, rtol=1e-9)
    # The bias blocks are exact blocks of the brute-force curvature.
    H = ref_curvature(ref, cols, curvature)
    for sl, mats, M in blocks:
        if len(mats) == 1:
            close(M, H[sl, sl], atol=1e-12, rtol=1e-9)
    # log det = Σ log(s g_i a_j + δ) per block = logdet of the explicit block-diagonal matrix.
    dense = torch.zeros(P, P, dtype=DT)
    expected_eig = 0.0
    off = 0
    for G, A in factors:
        for M in (torch.kron(G, A), G):
            n = M.shape[0]
            dense[off : off + n, off : off + n] = M
            off += n
        g, a = torch.linalg.eigvalsh(G).clamp_min(0), torch.linalg.eigvalsh(A).clamp_min(0)
        expected_eig = expected_eig + torch.log(S * torch.outer(g, a) + 0.7).sum()
        expected_eig = expected_eig + torch.log(S * g + 0.7).sum()
    assert off == P
    delta = torch.tensor(0.7, dtype=DT)
    close(post.log_det(delta, torch.tensor(S, dtype=DT)), expected_eig)
    J_test = probe_jacobians(ref["module"], cols)
    check_against_matrix(post, dense, delta, S, J_test)
    # Layer-wise prior: one value per weight / bias tensor.
    group = AllWeights(ref["module"]).group_index
    layerwise = torch.tensor([0.5, 1.5, 2.0, 0.25], dtype=DT)[torch.as_tensor(group)]
    check_against_matrix(post, dense, layerwise, S, J_test)


# --------------------------------------------------------------------------- noise conventions
@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_equal_per_output_noise_equals_scalar_noise(structure, curvature):
    """sigma = (σ, σ) through out_scale must give the posterior of the scalar σ through s."""
    ref = reference("gaussian", 20)
    subset = AllWeights(ref["module"])
    L = LIKELIHOODS["gaussian"]()
    sigma = 0.4
    vec = compute_posterior(structure, subset, L, ref["X"], ref["y"],
                            torch.full((2,), 1 / sigma, dtype=DT), curvature)
    sca = compute_posterior(structure, subset, L, ref["X"], ref["y"],
                            torch.ones(2, dtype=DT), curvature)
    delta, one = torch.tensor(1.1, dtype=DT), torch.tensor(1.0, dtype=DT)
    # The GGN depends on σ as 1/σ², the empirical Fisher (true gradients) as 1/σ⁴.
    s = torch.tensor(1 / sigma ** noise_power(curvature), dtype=DT)
    close(vec.log_det(delta, one), sca.log_det(delta, s))
    J_test = probe_jacobians(ref["module"], list(range(26)))
    close(vec.with_prior(delta, one).functional_variance(J_test),
          sca.with_prior(delta, s).functional_variance(J_test))


# --------------------------------------------------------------------------- sampling
@pytest.mark.parametrize("structure", ["full", "diag", "kron", "lowrank"])
@pytest.mark.parametrize("kind_delta", ["scalar", "layerwise"])
def test_sample_covariance(structure, kind_delta):
    lik = "categorical"
    rank = 6 if structure == "lowrank" else None
    ref, subset, cols, post = _build(lik, "all", 20, structure, "ggn", rank=rank)
    P = len(cols)
    H = ref_curvature(ref, cols, "ggn")
    if structure == "diag":
        H = torch.diag(H.diagonal())
    elif structure == "kron":
        H = kron_dense(post, P)
    elif structure == "lowrank":
        lam, V = torch.linalg.eigh(H)
        H = V[:, -rank:] @ torch.diag(lam[-rank:]) @ V[:, -rank:].T
    if kind_delta == "scalar":
        delta = torch.tensor(2.0, dtype=DT)
        D = 2.0 * torch.eye(P, dtype=DT)
    else:
        group = torch.as_tensor(AllWeights(ref["module"]).group_index)
        delta = torch.tensor([0.5, 1.5, 2.0, 0.25], dtype=DT)[group]
        D = torch.diag(delta)
    Sigma = torch.linalg.inv(S * H + D)
    post = post.with_prior(delta, torch.tensor(S, dtype=DT))
    n = 20000
    z = post.sample(n, torch.Generator().manual_seed(0))
    assert z.shape == (n, P) and z.dtype == DT
    sd = Sigma.diagonal().sqrt()
    # Standard errors: mean_i / sd_i ~ 1/√n, normalized covariance entries ≤ √(2/n) ≈ 0.01.
    assert (z.mean(0).abs() / sd).max() < 5 / math.sqrt(n)
    emp = z.T @ z / n
    err = ((emp - Sigma) / torch.outer(sd, sd)).abs().max()
    assert err < 6 * math.sqrt(2 / n), float(err)


# --------------------------------------------------------------------------- evidence
def _evidence_problem(lik, temperature=1.0):
    ref = reference(lik, 20)
    subset = AllWeights(ref["module"])
    L = LIKELIHOODS[lik]()
    unit = torch.ones(N_OUT[lik], dtype=DT)
    post = compute_posterior("full", subset, L, ref["X"], ref["y"], unit, "ggn")
    f = ref["F"]
    if lik == "gaussian":
        sse = ((ref["y"] - f) ** 2).sum(0)

        def rebuild(out_scale):  # out_scale = 1/σ per output
            return compute_posterior("full", subset, L, ref["X"], ref["y"], out_scale, "ggn")

        ev = Evidence(post, subset.theta, temperature, 20, sse=sse, rebuild=rebuild)
    else:
        nll = float(sum(ref_nll_f(lik, f[n], ref["y"][n]) for n in range(20)))
        ev = Evidence(post, subset.theta, temperature, 20, nll=nll)
    J = ref["J"]
    if lik == "gaussian":  # unit-noise GGN Σ J_nᵀ J_n; σ enters through s = 1/σ²
        H_unit = torch.einsum("ncp,ncq->pq", J, J)
    else:
        H_unit = ref_curvature(ref, list(range(J.shape[2])), "ggn")
    return ref, ev, H_unit


def _hand_evidence(theta, loglik, H, s, delta):
    P = theta.numel()
    d = delta.expand(P) if delta.dim() == 0 else delta
    return (loglik - 0.5 * (d * theta**2).sum() + 0.5 * torch.log(d).sum()
            - 0.5 * torch.logdet(s * H + torch.diag(d)))


@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("kind_delta", ["scalar", "vector"])
def test_evidence_categorical_matches_formula(temperature, kind_delta):
    ref, ev, H = _evidence_problem("categorical", temperature)
    theta = ref["theta"]
    loglik = -torch.nn.functional.cross_entropy(ref["F"], ref["y"], reduction="sum")
    delta = prior(kind_delta, theta.numel())
    expected = _hand_evidence(theta, loglik / temperature, H, 1 / temperature, delta)
    close(ev(delta), expected)


@pytest.mark.parametrize("kind_delta", ["scalar", "vector"])
def test_evidence_gaussian_scalar_sigma_matches_formula(kind_delta):
    ref, ev, H = _evidence_problem("gaussian")
    theta, N, C, sigma = ref["theta"], 20, 2, 0.7
    sse = ((ref["y"] - ref["F"]) ** 2).sum()
    loglik = -(N * C / 2) * math.log(2 * math.pi * sigma**2) - sse / (2 * sigma**2)
    delta = prior(kind_delta, theta.numel())
    expected = _hand_evidence(theta, loglik, H, 1 / sigma**2, delta)
    close(ev(delta, torch.tensor(sigma, dtype=DT)), expected)


def test_evidence_gaussian_per_output_sigma_matches_formula():
    ref, ev, _ = _evidence_problem("gaussian")
    theta, N = ref["theta"], 20
    sigma = torch.tensor([0.6, 1.8], dtype=DT)
    sse = ((ref["y"] - ref["F"]) ** 2).sum(0)
    loglik = (-(N / 2) * torch.log(2 * math.pi * sigma**2) - sse / (2 * sigma**2)).sum()
    J = ref["J"]
    H = torch.einsum("ncp,c,ncq->pq", J, 1 / sigma**2, J)
    delta = torch.tensor(0.9, dtype=DT)
    close(ev(delta, sigma), _hand_evidence(theta, loglik, H, 1.0, delta))


def test_maximize_evidence_scalar_reaches_grid_max():
    ref, ev, H = _evidence_problem("categorical")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        log_delta, log_sigma = maximize_evidence(ev, [0.0], lambda v: v[0])
    assert log_sigma is None
    tuned = float(ev(torch.tensor(np.exp(log_delta[0]), dtype=DT)))
    grid = torch.logspace(-4, 4, 1601, dtype=DT)
    values = torch.stack([ev(d) for d in grid])
    assert tuned >= float(values.max()) - 1e-6
    assert LOG_PRIOR_BOUNDS[0] < log_delta[0] < LOG_PRIOR_BOUNDS[1]


def test_maximize_evidence_delta_and_sigma_reaches_grid_max():
    ref, ev, H = _evidence_problem("gaussian")
    theta, N, C = ref["theta"], 20, 2
    sse = float(((ref["y"] - ref["F"]) ** 2).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        log_delta, log_sigma = maximize_evidence(ev, [0.0], lambda v: v[0],
                                                 np.log(np.array(1.0)), 1e-3)
    delta_t, sigma_t = np.exp(log_delta[0]), float(np.exp(log_sigma))
    tuned = float(ev(torch.tensor(delta_t, dtype=DT), torch.tensor(sigma_t, dtype=DT)))
    # Vectorized hand formula on a fine 2-D grid, from the eigenvalues of the unit-noise GGN.
    lam = torch.linalg.eigvalsh(H).clamp_min(0)
    d = torch.logspace(-4, 4, 801, dtype=DT)[:, None, None]
    sig = torch.logspace(-2, 1, 801, dtype=DT)[None, :, None]
    P, tt = theta.numel(), float(theta @ theta)
    grid = (-(N * C / 2) * torch.log(2 * math.pi * sig**2) - sse / (2 * sig**2)
            - 0.5 * d * tt + 0.5 * P * torch.log(d)
            - 0.5 * torch.log(lam / sig**2 + d).sum(-1, keepdim=True))
    assert tuned >= float(grid.max()) - 1e-6
    # The grid formula is the evidence (spot check at one point).
    close(grid[400, 400, 0], ev(d[400, 0, 0], sig[0, 400, 0]))


@pytest.mark.parametrize("likelihood", ["categorical", "gaussian"])
def test_maximize_evidence_ends_at_the_stationary_point_whatever_the_start(likelihood):
    """L-BFGS-B alone stops within its gradient tolerance, at a point that depends on its
    path (starts, BLAS kernels, weighted rows against duplicated ones differ there by
    ~1e-9); the Newton polish ends at the stationary point itself, so every start gives
    the same δ and σ up to rounding, with a gradient at rounding level."""
    ref, ev, H = _evidence_problem(likelihood)
    gaussian = likelihood == "gaussian"
    ends = []
    for start in (-2.0, 0.0, 1.5):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            log_delta, log_sigma = maximize_evidence(
                ev, [start], lambda v: v[0], *((np.log(np.array(2.0)), 1e-3) if gaussian
                                               else ()))
        ends.append(np.r_[log_delta, np.ravel(log_sigma) if gaussian else []])
    for end in ends[1:]:
        np.testing.assert_allclose(end, ends[0], rtol=0, atol=1e-11)
    x = torch.tensor(ends[0], dtype=DT, requires_grad=True)
    value = ev(torch.exp(x[0]), torch.exp(x[1]) if gaussian else None)
    (grad,) = torch.autograd.grad(value, x)
    assert float(grad.abs().max()) <= 1e-10 * max(1.0, abs(float(value.detach())))


def test_maximize_evidence_warns_at_upper_bound():
    """θ* = 0: the evidence −½ Σ log(1 + sλ_i/δ) increases in δ up to the bound 1e4."""
    ref, ev, H = _evidence_problem("categorical")
    ev0 = Evidence(ev.posterior, torch.zeros_like(ev.theta), 1.0, 20, nll=ev.nll)
    with pytest.warns(ConvergenceWarning, match="bound"):
        log_delta, _ = maximize_evidence(ev0, [0.0], lambda v: v[0])
    assert log_delta[0] == pytest.approx(LOG_PRIOR_BOUNDS[1], abs=1e-6)


def test_kron_rejects_prior_varying_within_a_tensor():
    ref, subset, cols, post = _build("categorical", "all", 20, "kron", "ggn")
    delta = prior("vector", len(cols))  # differs inside each weight tensor
    with pytest.raises(ValueError, match="one prior precision per weight"):
        post.log_det(delta, torch.tensor(S, dtype=DT))
    with pytest.raises(ValueError, match="one prior precision per weight"):
        post = post.with_prior(delta, torch.tensor(S, dtype=DT))


def test_log_det_gradients_match_finite_differences():
    """The custom Cholesky log-det backward (per-parameter and layer-wise δ, and s)."""
    g = torch.Generator().manual_seed(0)
    U = torch.randn(12, 5, generator=g, dtype=DT)
    post = EigenPosterior.from_factor(U)
    layerwise = torch.tensor([0.5, 2.0, 1.5], dtype=DT, requires_grad=True)
    groups = torch.tensor([0] * 4 + [1] * 6 + [2] * 2)
    s = torch.tensor(0.7, dtype=DT, requires_grad=True)
    torch.autograd.gradcheck(lambda d, s_: post.log_det(d[groups], s_), (layerwise, s))
    per_param = (0.5 + torch.rand(12, generator=g, dtype=DT)).requires_grad_(True)
    torch.autograd.gradcheck(lambda d: post.log_det(d, s.detach()), (per_param,))


def test_memory_guard_names_cheaper_options():
    ref = reference("categorical", 40)
    subset = AllWeights(ref["module"])
    with pytest.raises(MemoryError, match="kron.*diag|diag.*kron"):
        compute_posterior("full", subset, LIKELIHOODS["categorical"](), ref["X"], ref["y"],
                          torch.ones(3, dtype=DT), "ggn", budget=1000)


def test_layerwise_log_det_gradient_is_finite_with_zero_eigenvalues():
    """A rank-deficient GGN (dead units, more rows than weights) must not give NaN gradients."""
    V = torch.linalg.qr(torch.randn(6, 6, dtype=DT, generator=torch.Generator().manual_seed(1)))[0]
    post = EigenPosterior(V, torch.tensor([0.0, 0.0, 1.0, 2.0, 3.0, 4.0], dtype=DT), 6)
    delta = torch.tensor([0.5, 2.0], dtype=DT, requires_grad=True)
    s = torch.tensor(0.7, dtype=DT, requires_grad=True)
    value = post.log_det(delta[torch.tensor([0, 0, 0, 1, 1, 1])], s)
    grads = torch.autograd.grad(value, (delta, s))
    assert all(torch.isfinite(g).all() for g in grads)


# --------------------------------------------------------------------------- last-layer predictive
@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("structure", ["full", "diag", "kron", "lowrank"])
@pytest.mark.parametrize("bias_last", [True, False])
@pytest.mark.parametrize("block_rows", [2, 4096])
def test_last_layer_moments_match_dense(monkeypatch, lik, structure, bias_last, block_rows):
    """Closed-form last-layer moments (one output: triangular root) = f and J Σ Jᵀ, dense."""
    monkeypatch.setattr(last_layer_module, "FEATURE_BLOCK_ROWS", block_rows)
    ref = reference(lik, 20, bias_last)
    subset, cols = make_subset("last_layer", ref["module"], ref["X"])
    post = compute_posterior(structure, subset, LIKELIHOODS[lik](), ref["X"], ref["y"],
                             out_scale_for(lik), "ggn", 3 if structure == "lowrank" else None)
    delta = prior("scalar", len(cols))
    post = post.with_prior(delta, torch.tensor(S, dtype=DT))
    X_test = torch.randn(5, 3, generator=torch.Generator().manual_seed(7), dtype=DT)
    J_test = probe_jacobians(ref["module"], cols)
    f, var = subset.moments(X_test, post)
    with torch.no_grad():
        close(f, ref["module"](X_test))
    # functional_variance(J) is checked against dense matrices per structure elsewhere.
    close(var, post.functional_variance(J_test))
    if structure == "kron":
        Sigma = torch.linalg.inv(S * kron_dense(post, len(cols)) + delta * torch.eye(len(cols), dtype=DT))
        close(var, J_test @ Sigma @ J_test.transpose(1, 2))


def test_spectrum_only_gives_the_same_scalar_evidence():
    from sklaplace import LaplaceRegressor
    from sklaplace._laplace.curvature import compute_posterior
    from sklaplace._laplace.likelihoods import Gaussian

    rng = np.random.RandomState(0)
    for n in (12, 80):  # the kernel path (N < P) and the P × P path
        X, y = rng.randn(n, 3), rng.randn(n)
        est = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=3, hyperparameter_tuning=None,
                               subset_of_weights="all", hessian_structure="full",
                               random_state=0).fit(X, y)
        device = est.laplace_.subset.theta.device
        y_model = torch.as_tensor((y - y.mean()) / y.std(), device=device)
        args = (est.laplace_.subset, Gaussian(), torch.as_tensor(X, device=device), y_model,
                torch.ones(1, dtype=torch.float64, device=device))
        full = compute_posterior("full", *args)
        spectrum = compute_posterior("full", *args, eigenvalues_only=True)
        for delta in (0.1, 3.0):
            d, s = torch.tensor(delta, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
            assert float(spectrum.log_det(d, s)) == pytest.approx(float(full.log_det(d, s)),
                                                                  rel=1e-10)


class SharedLinear(nn.Module):
    """An nn.Linear applied at T = 4 positions of each row, then a mean and a head."""

    def __init__(self, n_out):
        super().__init__()
        self.body = nn.Linear(3, 5)
        self.head = nn.Linear(5, n_out)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x.reshape(-1, 4, 3))).mean(1))


def test_kron_of_a_linear_applied_at_several_positions():
    """The body's factors: G summed over the positions before the outer product makes
    the bias block exact for any rows (it summed b_t b_tᵀ), and A averaged over them
    makes the weight block exact for a row constant along the positions (A summed
    over them: T times too large)."""
    from torch.func import functional_call, jacrev

    from sklaplace._laplace.continual import kron_factors
    from sklaplace._laplace.curvature import kron_curvature
    from sklaplace._laplace.likelihoods import LIKELIHOODS
    from sklaplace._laplace.subsets import AllWeights

    torch.manual_seed(0)
    module = SharedLinear(3).double()
    names = [k for k, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    L = LIKELIHOODS["categorical"]()
    ones = torch.ones(3, dtype=torch.float64)

    def exact(X):
        theta = torch.cat([p.detach().reshape(-1) for p in module.parameters()])

        def f(th):
            params, i = {}, 0
            for k, sh in zip(names, shapes):
                params[k] = th[i:i + sh.numel()].reshape(sh)
                i += sh.numel()
            return functional_call(module, params, (X,))

        J = jacrev(f)(theta).detach()  # (n, C, P)
        with torch.no_grad():
            S = L.sqrt_hessian(f(theta))  # (n, C, K)
        U = torch.einsum("ncp,nck->npk", J, S)
        return torch.einsum("npk,nqk->pq", U, U)

    X = torch.randn(20, 12, dtype=torch.float64)
    y = torch.zeros(20, dtype=torch.long)
    blocks = kron_factors(kron_curvature(AllWeights(module), L, X, y, ones))
    H = exact(X)
    (b_sl, (Gb,)) = blocks[1]
    torch.testing.assert_close(Gb, H[b_sl, b_sl], rtol=1e-9, atol=1e-12)

    row = torch.arange(3, dtype=torch.float64).repeat(4)[None] / 3
    (w_sl, (G, A)), _ = kron_factors(kron_curvature(AllWeights(module), L, row, y[:1], ones))[:2]
    torch.testing.assert_close(torch.kron(G, A), exact(row)[w_sl, w_sl], rtol=1e-9, atol=1e-12)
