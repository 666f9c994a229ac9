"""The fast curvature / predictive paths equal the generic Jacobian-based ones."""

import numpy as np
import pytest
import torch
from torch import nn

from sklaplace._laplace import curvature as cv
from sklaplace._laplace import layer_factors as lf
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.nets import MLP
from sklaplace._laplace.posterior import KronPosterior
from sklaplace._laplace.subsets import AllWeights, LastLayer
from sklaplace._laplace.subsets.last_layer import _layer_input

DT = torch.float64


def _mlp_rows(likelihood, n_out, n_rows):
    """(subset, likelihood, X, y, out_scale) of a seeded float64 MLP(5, n_out, (7, 6))."""
    torch.manual_seed(0)
    module = MLP(5, n_out, (7, 6)).to(DT)
    X = torch.randn(n_rows, 5, dtype=DT)
    if likelihood == "gaussian":
        y = torch.randn(n_rows, n_out, dtype=DT)
    else:
        y = torch.randint(0, max(n_out, 2), (n_rows,))
    out_scale = torch.full((n_out,), 0.7, dtype=DT)
    return AllWeights(module), LIKELIHOODS[likelihood](), X, y, out_scale


@pytest.mark.parametrize("likelihood,n_out", [("categorical", 3), ("bernoulli", 1),
                                              ("gaussian", 2)])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_linear_diag_equals_jacobian_diag(likelihood, n_out, curvature):
    subset, lik, X, y, out_scale = _mlp_rows(likelihood, n_out, 40)
    fast = lf.linear_diag(subset, lik, X, y, out_scale, curvature, chunk=16)
    with torch.no_grad():
        slow = sum((JF**2).sum((0, 2)) for JF in cv._gram_rows(subset, lik, X, y, out_scale,
                                                               curvature))
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)


class _Twice(nn.Module):
    """One nn.Linear run twice: its factors miss half of its gradient."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 5), nn.Linear(5, 2)

    def forward(self, X):
        return self.b(torch.tanh(self.a(torch.tanh(self.a(X)))))


class _Scale(nn.Module):
    """A parameter outside nn.Linear layers."""

    def __init__(self):
        super().__init__()
        self.layer, self.scale = nn.Linear(5, 2), nn.Parameter(torch.ones(2))

    def forward(self, X):
        return self.layer(X) * self.scale


@pytest.mark.parametrize("likelihood,n_out", [("categorical", 3), ("bernoulli", 1),
                                              ("gaussian", 2), ("gaussian", 1)])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
@pytest.mark.parametrize("weighted", [False, True])
def test_linear_kernel_equals_the_jacobian_kernel(likelihood, n_out, curvature, weighted):
    """The kernel from the layers' factors is UᵀU of the Jacobians, column for column,
    so the online updates' spectrum is the factor's."""
    subset, lik, X, y, out_scale = _mlp_rows(likelihood, n_out, 30)
    weight = torch.rand(30, dtype=DT) + 0.5 if weighted else None
    fast = lf.linear_kernel(subset, lik, X, y, out_scale, curvature, weight)
    with torch.no_grad():
        U = torch.cat([JF.permute(1, 0, 2).reshape(subset.n_params, -1)
                       for JF in cv._gram_rows(subset, lik, X, y, out_scale, curvature, weight)],
                      1)
    torch.testing.assert_close(fast, U.T @ U, rtol=1e-12, atol=1e-12)
    spectrum = cv.full_curvature(subset, lik, X, y, out_scale, curvature, weight=weight,
                                 eigenvalues_only=True)
    torch.testing.assert_close(spectrum.lam, cv.full_curvature(
        subset, lik, X, y, out_scale, curvature, weight=weight).lam, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("make", [_Twice, _Scale])
def test_linear_kernel_leaves_other_nets_to_the_jacobians(make):
    torch.manual_seed(0)
    module = make().to(DT)
    X, y = torch.randn(8, 5, dtype=DT), torch.randn(8, 2, dtype=DT)
    out_scale = torch.ones(2, dtype=DT)
    subset, lik = AllWeights(module), LIKELIHOODS["gaussian"]()
    assert lf.linear_kernel(subset, lik, X, y, out_scale, "ggn") is None
    if make is _Twice:  # P = 42 > N·K = 16: the kernel path, through the Jacobians
        spectrum = cv.full_curvature(subset, lik, X, y, out_scale, eigenvalues_only=True)
        torch.testing.assert_close(spectrum.lam, cv.full_curvature(
            subset, lik, X, y, out_scale).lam, rtol=1e-9, atol=1e-9)


def test_kron_rotation_matches_explicit_kronecker_product():
    g = torch.Generator().manual_seed(0)
    G = torch.randn(3, 3, dtype=DT, generator=g)
    A = torch.randn(4, 4, dtype=DT, generator=g)
    post = KronPosterior([(slice(0, 12), [G @ G.T, A @ A.T]), (slice(12, 15), [G @ G.T])], 15)
    post = post.with_prior(torch.tensor(0.5, dtype=DT), torch.tensor(2.0, dtype=DT))
    J = torch.randn(5, 2, 15, dtype=DT, generator=g)
    Sigma = torch.zeros(15, 15, dtype=DT)
    for (sl, factors, _), inv in zip(post.blocks, post._inv):
        Q = factors[0][0] if len(factors) == 1 else torch.kron(factors[0][0], factors[1][0])
        Sigma[sl, sl] = Q @ torch.diag(inv) @ Q.T
    torch.testing.assert_close(post.functional_variance(J), J @ Sigma @ J.transpose(1, 2))
    torch.testing.assert_close(post.marginal_variance(), Sigma.diagonal())


class _Scaled(nn.Module):
    """The Sequential runs on 2·X: its body alone would miss the scaling."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))

    def forward(self, X):
        return self.net(2 * X)


class _ScaledMLP(MLP):
    def forward(self, X):
        return self.layers(2 * X)


@pytest.mark.parametrize("make,plain", [
    (lambda: MLP(4, 2, (6, 5)), True),
    (lambda: MLP(4, 2, ()), True),  # no hidden layer: the features are X
    (lambda: nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)), True),
    (lambda: nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2), nn.Flatten()), False),
    (_Scaled, False),
    (lambda: _ScaledMLP(4, 2, (6,)), False),
])
def test_last_layer_features_without_hooks_equal_the_hooked_ones(make, plain):
    """Hook-free features only where the architecture makes them plain, and equal there."""
    torch.manual_seed(0)
    module = make()
    X = torch.randn(9, 4, dtype=DT)
    subset = LastLayer(module, X)
    assert (subset.body is not None) == plain
    with torch.no_grad():
        hooked = _layer_input(module, subset.layer_name, X.float())
    torch.testing.assert_close(subset.native_features(X), hooked, rtol=0, atol=0)
    # the LA's outputs: the last layer in float64 on the net's (float32) features
    layer = module.get_submodule(subset.layer_name)
    weight, bias = layer.weight.detach().double(), layer.bias.detach().double()
    torch.testing.assert_close(subset.forward(X), hooked.double() @ weight.T + bias,
                               rtol=1e-12, atol=1e-14)
    # the float32 net's outputs differ from them by its last layer's rounding alone: at most
    # γ_{K+1}·(|W||φ| + |b|) for K features, whatever order or FMA the CPU's kernel uses
    K, u = weight.shape[1], 2.0**-24
    bound = (K + 1) * u / (1 - (K + 1) * u) * (hooked.double().abs() @ weight.abs().T
                                                + bias.abs())
    with torch.no_grad():
        float32_out = module(X.float()).double()
    assert torch.all((float32_out - subset.forward(X)).abs() <= bound)


@pytest.mark.parametrize("hidden", [(), (6,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_place_last_layer_variance_leaves_inputs_alone(hidden, dtype):
    """One-output kron works in place on a scratch copy, never on X (no hidden layer: φ = X)."""
    torch.manual_seed(0)
    module = MLP(4, 1, hidden).to(dtype)
    X = torch.randn(30, 4, dtype=DT)
    y = (X[:, 0] > 0).to(DT)
    subset = LastLayer(module, X)
    post = cv.compute_posterior("kron", subset, LIKELIHOODS["bernoulli"](), X, y,
                                torch.ones(1, dtype=DT), "ggn", None)
    post = post.with_prior(torch.tensor(0.5, dtype=DT), torch.tensor(1.0, dtype=DT))
    X_test = torch.randn(7, 4, dtype=DT)
    before = X_test.clone()
    _, var = subset.moments(X_test, post)
    assert torch.equal(X_test, before)
    _, J = subset.jacobians(X_test)
    torch.testing.assert_close(var, post.functional_variance(J), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("likelihood,n_out", [("categorical", 4), ("gaussian", 2),
                                              ("bernoulli", 1)])
@pytest.mark.parametrize("curvature", ["ggn", "ef"])
def test_last_layer_full_matrix_from_features_equals_the_jacobian_gram(bias, likelihood, n_out,
                                                                       curvature):
    """Σ_n Λ_n[c, d] φ̃_n φ̃_nᵀ, reordered to [vec W, b], is the Jacobians' Σ_n J_nᵀ F_n F_nᵀ J_n."""
    from sklaplace._laplace.curvature import _gram_rows, _last_layer_matrix
    from sklaplace._laplace.likelihoods import LIKELIHOODS
    from sklaplace._laplace.subsets import LastLayer

    gen = torch.Generator().manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, n_out, bias=bias)).double()
    X = torch.randn(37, 3, dtype=torch.float64, generator=gen)
    if likelihood == "categorical":
        y = torch.randint(0, n_out, (37,), generator=gen)
    elif likelihood == "bernoulli":
        y = torch.randint(0, 2, (37,), generator=gen).double()
    else:
        y = torch.randn(37, n_out, dtype=torch.float64, generator=gen)
    subset, lik = LastLayer(module, X[:2]), LIKELIHOODS[likelihood]()
    out_scale = 0.5 + torch.rand(n_out, dtype=torch.float64, generator=gen)
    weight = torch.rand(37, dtype=torch.float64, generator=gen)
    fast = _last_layer_matrix(subset, lik, X, y, out_scale, curvature, weight)
    reference = sum(torch.einsum("npk,nqk->pq", JF, JF)
                    for JF in _gram_rows(subset, lik, X, y, out_scale, curvature, weight))
    np.testing.assert_allclose(fast.numpy(), reference.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("structure", ["full", "diag", "kron", "lowrank"])
def test_with_prior_leaves_the_fitted_curvature_alone(structure):
    """with_prior returns a new posterior; the curvature the evidence holds is unchanged,
    so predictions and log_evidence at another prior never interfere."""
    from sklearn.datasets import load_iris

    from sklaplace import LaplaceClassifier

    X, y = load_iris(return_X_y=True)
    clf = LaplaceClassifier(hidden_layer_sizes=(6,), max_epochs=10, subset_of_weights="all",
                            hessian_structure=structure, lowrank_rank=5,
                            hyperparameter_tuning=None, random_state=0).fit(X, y)
    assert clf.laplace_.posterior is not clf.laplace_.evidence.posterior
    before = clf.predict_proba(X)
    other = clf.laplace_.evidence.posterior.with_prior(torch.tensor(100.0, dtype=torch.float64),
                                               torch.tensor(1.0, dtype=torch.float64))
    Xt = torch.as_tensor(X, dtype=torch.float64)
    with torch.no_grad():
        _, cov_other = clf.laplace_.subset.moments(Xt, other)
        _, cov_fitted = clf.laplace_.subset.moments(Xt, clf.laplace_.posterior)
    assert not torch.allclose(cov_other, cov_fitted)
    np.testing.assert_array_equal(clf.predict_proba(X), before)
    clf.log_evidence(prior_precision=3.0)
    np.testing.assert_array_equal(clf.predict_proba(X), before)
