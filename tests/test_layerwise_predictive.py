"""All-weights predictive of Kronecker and diagonal posteriors without Jacobians.

For nets whose weights all sit in nn.Linear layers, J Σ Jᵀ is contracted layer by
layer from the layer inputs and the output gradients of the pre-activations
(``subsets.layerwise._layer_moments``); it must equal the Jacobian computation exactly.
"""

import numpy as np
import pytest
import torch
from torch import nn

from sklaplace._laplace.curvature import compute_posterior
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.subsets import AllWeights
from sklaplace._laplace.subsets.base import _jacobian_moments
from sklaplace._laplace.subsets.layerwise import _layer_moments


class Residual(nn.Module):
    def __init__(self, d_in=4, width=6, n_out=3):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.block = nn.Linear(width, width)
        self.head = nn.Linear(width, n_out)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        return self.head(h + torch.relu(self.block(h)))


class Shared(nn.Module):
    """One nn.Linear applied twice: no single input per layer, so the Jacobians are used."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 5)
        self.twice = nn.Linear(5, 5)
        self.head = nn.Linear(5, 3)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.head(self.twice(self.act(self.twice(self.act(self.inp(x))))))


def _nets():
    torch.manual_seed(0)
    frozen = nn.Sequential(nn.Linear(4, 7), nn.Tanh(), nn.Linear(7, 3))
    for p in frozen[0].parameters():
        p.requires_grad_(False)
    no_bias = nn.Sequential(nn.Linear(4, 5, bias=False), nn.GELU(), nn.Linear(5, 3))
    return {
        "mlp": nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6), nn.ReLU(),
                             nn.Linear(6, 3)),
        "residual": Residual(),
        "frozen_first": frozen,
        "no_bias": no_bias,
        "one_output": nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1)),
    }


@pytest.mark.parametrize("structure", ["kron", "diag"])
@pytest.mark.parametrize("name", list(_nets()))
@pytest.mark.parametrize("layerwise_prior", [False, True])
def test_layer_moments_equal_jacobian_moments(structure, name, layerwise_prior):
    module = _nets()[name].double()
    rng = np.random.RandomState(1)
    X = torch.as_tensor(rng.randn(25, 4))
    subset = AllWeights(module)
    n_out = subset.forward(X[:1]).shape[1]
    likelihood = LIKELIHOODS["gaussian" if n_out == 1 else "categorical"]()
    y = torch.as_tensor(rng.randn(25, 1) if n_out == 1 else rng.randint(0, n_out, 25))
    posterior = compute_posterior(structure, subset, likelihood, X, y,
                                  torch.ones(n_out, dtype=torch.float64))
    delta = torch.tensor(0.7, dtype=torch.float64)
    if layerwise_prior:  # one value per tensor
        delta = torch.as_tensor(0.3 + subset.group_index.astype(float), dtype=torch.float64)
    posterior = posterior.with_prior(delta, torch.tensor(2.5, dtype=torch.float64))
    X_test = torch.as_tensor(rng.randn(11, 4))
    with torch.no_grad():
        f_ref, var_ref = _jacobian_moments(subset, X_test, posterior)
        layers = subset._layers()
        assert layers, "every parameter of these nets is in an nn.Linear layer"
        f, var = _layer_moments(module, layers, X_test, posterior)
        f_used, var_used = subset.moments(X_test, posterior)
    np.testing.assert_allclose(f.numpy(), f_ref.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(var.numpy(), var_ref.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var_used.numpy(), var_ref.numpy(), rtol=1e-10, atol=1e-12)


def test_shared_layer_falls_back_to_jacobians():
    module = Shared().double()
    rng = np.random.RandomState(2)
    X = torch.as_tensor(rng.randn(20, 4))
    subset = AllWeights(module)
    posterior = compute_posterior("diag", subset, LIKELIHOODS["categorical"](), X,
                                  torch.as_tensor(rng.randint(0, 3, 20)),
                                  torch.ones(3, dtype=torch.float64))
    posterior = posterior.with_prior(torch.tensor(1.0, dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64))
    with torch.no_grad():
        assert _layer_moments(module, subset._layers(), X, posterior) is None
        f, var = subset.moments(X, posterior)
        f_ref, var_ref = _jacobian_moments(subset, X, posterior)
    np.testing.assert_allclose(var.numpy(), var_ref.numpy(), rtol=1e-12)
    assert not module._forward_hooks and not module.twice._forward_hooks  # hooks removed


def test_estimator_predictions_use_layer_moments(monkeypatch):
    """The fitted estimator's all-weights kron predictive goes through the layer path,
    with the same probabilities as the Jacobian path."""
    from sklearn.datasets import load_iris

    import sklaplace._laplace.subsets.all_weights as all_weights  # looks _layer_moments up
    from sklaplace import LaplaceClassifier

    X, y = load_iris(return_X_y=True)
    clf = LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=30, subset_of_weights="all",
                            hessian_structure="kron", hyperparameter_tuning="evidence",
                            random_state=0).fit(X, y)
    calls = []
    real = all_weights._layer_moments
    monkeypatch.setattr(all_weights, "_layer_moments",
                        lambda *a: calls.append(1) or real(*a))
    proba = clf.predict_proba(X)
    assert calls
    monkeypatch.setattr(all_weights, "_layer_moments", lambda *a: None)
    np.testing.assert_allclose(proba, clf.predict_proba(X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(_nets()))
def test_layer_jacobians_equal_torch_func(name):
    module = _nets()[name].double()
    X = torch.as_tensor(np.random.RandomState(3).randn(13, 4))
    subset = AllWeights(module)
    with torch.no_grad():
        f, J = subset.jacobians(X)
        f_ref, J_ref = subset._functional_jacobians(X)
    assert subset._layers()
    np.testing.assert_allclose(f.numpy(), f_ref.numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(J.numpy(), J_ref.numpy(), rtol=1e-12, atol=1e-13)


def test_shared_layer_jacobians_fall_back_to_torch_func():
    module = Shared().double()
    X = torch.as_tensor(np.random.RandomState(3).randn(9, 4))
    subset = AllWeights(module)
    from sklaplace._laplace.subsets.layerwise import _layer_jacobians

    assert _layer_jacobians(module, subset._layers(), X, subset.n_params) is None
    np.testing.assert_allclose(subset.jacobians(X)[1].numpy(),
                               subset._functional_jacobians(X)[1].numpy(), rtol=1e-12)
