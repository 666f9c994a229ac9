"""The public weight posterior (``posterior_``) against exact Bayesian linear and logistic
regression: nets without hidden layer, where the Laplace approximation is known in closed
form (Gaussian likelihood) or by a brute-force float64 Hessian at the mode (torch.func)."""

import numpy as np
import pytest
import scipy.stats
import torch
from scipy.sparse.linalg import LinearOperator
from skorch import NeuralNet, NeuralNetRegressor
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from torch import nn
from torch.func import functional_call, hessian

from sklaplace import LaplaceClassifier, LaplaceRegressor, WeightPosterior


def _linear_net(n_in, n_out, theta=None, criterion=nn.CrossEntropyLoss, cls=NeuralNet,
                frozen=True):
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(n_in, n_out)).double()
    if theta is not None:  # [vec W (row-major), b]
        with torch.no_grad():
            module[0].weight.copy_(torch.as_tensor(theta[:n_out * n_in]).reshape(n_out, n_in))
            module[0].bias.copy_(torch.as_tensor(theta[n_out * n_in:]))
    net = cls(module, criterion=criterion, max_epochs=5, lr=0.05, batch_size=64,
              train_split=None, verbose=0)
    return FrozenEstimator(net.initialize()) if frozen else net


def _regression_data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = 50 + 20 * (X @ np.array([1.5, -2.0, 0.5])[:d] + 0.3 + 0.4 * rng.normal(size=n))
    return X, y


def _blr(X, y, delta, sigma):
    """Bayesian linear regression, prior N(0, δ⁻¹I) on [w, b]: mean and precision."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    precision = Xb.T @ Xb / sigma**2 + delta * np.eye(Xb.shape[1])
    return np.linalg.solve(precision, Xb.T @ y / sigma**2), precision


def _block_diagonal(precision, d):
    """The Kronecker structure of a one-output linear layer: the weight block (exact, one
    output) and the bias block, without their cross terms."""
    out = np.zeros_like(precision)
    out[:d, :d], out[d:, d:] = precision[:d, :d], precision[d:, d:]
    return out


@pytest.mark.parametrize("structure", ["full", "lowrank", "diag", "kron"])
def test_linear_regression_posterior_is_exact(structure):
    X, y = _regression_data()
    d = X.shape[1]
    delta, sigma = 2.0, 9.0
    mean, precision = _blr(X, y, delta, sigma)
    reference = {"full": precision, "lowrank": precision, "diag": np.diag(np.diag(precision)),
                 "kron": _block_diagonal(precision, d)}[structure]
    reg = LaplaceRegressor(_linear_net(d, 1, mean, nn.MSELoss, NeuralNetRegressor),
                           subset_of_weights="all", hessian_structure=structure, lowrank_rank=d + 1,
                           prior_precision=delta, sigma_noise=sigma, hyperparameter_tuning=None,
                           normalize_y=False).fit(X, y)
    post = reg.posterior_
    assert isinstance(post, WeightPosterior)
    assert post.hessian_structure == structure and post.n_params == d + 1
    assert post.names == ["0.weight", "0.bias"] and post.shapes == [(1, d), (1,)]
    np.testing.assert_array_equal(post.indices, np.arange(d + 1))
    np.testing.assert_allclose(post.mean, mean, rtol=1e-12)
    assert isinstance(post.covariance, LinearOperator) and post.covariance.shape == (d + 1, d + 1)
    cov = np.linalg.inv(reference)
    np.testing.assert_allclose(post.covariance_matrix(), cov, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(post.precision_matrix(), reference, rtol=1e-9)
    v = np.arange(1.0, d + 2)
    np.testing.assert_allclose(post.covariance @ v, cov @ v, rtol=1e-9)
    np.testing.assert_allclose(post.precision.matmat(np.eye(d + 1)[:, :2]), reference[:, :2],
                               rtol=1e-9)
    np.testing.assert_allclose(post.variance, np.diag(cov), rtol=1e-9)
    theta = post.mean + np.random.default_rng(1).normal(size=(4, d + 1)) * 0.1
    np.testing.assert_allclose(post.log_prob(theta),
                               scipy.stats.multivariate_normal(mean, cov).logpdf(theta), rtol=1e-9)
    assert post.log_prob(theta[0]) == pytest.approx(
        scipy.stats.multivariate_normal(mean, cov).logpdf(theta[0]), rel=1e-9)


def test_normalized_regression_lives_in_standardized_units_at_the_tuned_prior():
    """With normalize_y the net is fitted to standardized targets: the posterior is that
    problem's, at the tuned δ and σ / std(y) (refine="laplace" puts the mean at the exact
    mode of the linear model whatever training reached)."""
    X, y = _regression_data(n=50)
    reg = LaplaceRegressor(_linear_net(3, 1, criterion=nn.MSELoss, cls=NeuralNetRegressor,
                                       frozen=False),
                           subset_of_weights="all", hessian_structure="full", refine="laplace",
                           hyperparameter_tuning="evidence", random_state=0).fit(X, y)
    y_model = (y - y.mean()) / y.std()
    mean, precision = _blr(X, y_model, reg.prior_precision_, reg.sigma_noise_ / y.std())
    post = reg.posterior_
    np.testing.assert_allclose(post.mean, mean, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(post.precision_matrix(), precision, rtol=1e-7)
    # the net at the mean predicts the (standardized) predictive mean
    net = post.net_at(post.mean)
    np.testing.assert_allclose(net.predict(X[:5]).ravel() * y.std() + y.mean(), reg.predict(X[:5]),
                               rtol=1e-7)


def _data(n=60, d=3, k=3, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    y = np.argmax(X[:, :k] + 0.7 * rng.randn(n, k), axis=1)
    return X, y


def _neg_log_joint(X, y, k, delta):
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    d = X.shape[1]

    def loss(theta):
        logits = Xt @ theta[:k * d].reshape(k, d).T + theta[k * d:]
        nll = torch.nn.functional.cross_entropy(logits, yt, reduction="sum")
        return nll + 0.5 * delta * theta @ theta

    return loss


def _logistic_mode(X, y, k, delta):
    """The MAP of softmax regression by Newton's method on torch.func's exact Hessian."""
    loss = _neg_log_joint(X, y, k, delta)
    theta = torch.zeros(k * X.shape[1] + k, dtype=torch.float64)
    for _ in range(50):
        grad = torch.func.grad(loss)(theta)
        if grad.abs().max() < 1e-12:
            break
        theta = theta - torch.linalg.solve(hessian(loss)(theta), grad)
    return theta.numpy(), hessian(loss)(theta).numpy()


def _kflr(X, theta, k, delta):
    """KFLR of a linear softmax layer: (Σ Λ_n) ⊗ (Σ x xᵀ)/N + δ on W, Σ Λ_n + δ on b, with
    the per-row logit Hessians Λ_n of the NLL by torch.func."""
    n, d = X.shape
    logits = torch.as_tensor(X) @ torch.as_tensor(theta[:k * d]).reshape(k, d).T \
        + torch.as_tensor(theta[k * d:])
    lam = torch.stack([hessian(lambda f: torch.logsumexp(f, 0))(f) for f in logits]).numpy()
    G, A = lam.sum(0), X.T @ X / n
    out = np.zeros((k * d + k, k * d + k))
    out[:k * d, :k * d] = np.kron(G, A)
    out[k * d:, k * d:] = G
    return out + delta * np.eye(k * d + k)


@pytest.fixture(scope="module")
def logistic():
    X, y = _data()
    delta = 1.5
    mode, H = _logistic_mode(X, y, 3, delta)
    return X, y, delta, mode, H


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_logistic_regression_posterior_is_the_laplace_at_the_mode(logistic, structure):
    X, y, delta, mode, H = logistic
    reference = {"full": H, "diag": np.diag(np.diag(H)),
                 "kron": _kflr(X, mode, 3, delta)}[structure]
    clf = LaplaceClassifier(_linear_net(3, 3, mode), subset_of_weights="all",
                            hessian_structure=structure, prior_precision=delta,
                            hyperparameter_tuning=None).fit(X, y)
    post = clf.posterior_
    np.testing.assert_allclose(post.mean, mode, rtol=1e-12)
    np.testing.assert_allclose(post.precision_matrix(), reference, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(post.covariance_matrix(), np.linalg.inv(reference), rtol=1e-8,
                               atol=1e-12)
    draws = post.sample(20_000, random_state=0)
    assert draws.shape == (20_000, 12)
    cov = np.linalg.inv(reference)
    se = np.sqrt(np.diag(cov) / len(draws))
    assert np.all(np.abs(draws.mean(0) - mode) < 5 * se)
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=5 * np.sqrt(2 / len(draws)) *
                               np.sqrt(np.outer(np.diag(cov), np.diag(cov))).max())
    np.testing.assert_array_equal(post.sample(3, random_state=1), post.sample(3, random_state=1))
    np.testing.assert_allclose(
        post.log_prob(draws[:5]), scipy.stats.multivariate_normal(mode, cov).logpdf(draws[:5]),
        rtol=1e-9)


def test_refined_posterior_is_at_the_mode(logistic):
    X, y, delta, mode, H = logistic
    clf = LaplaceClassifier(_linear_net(3, 3), subset_of_weights="all", hessian_structure="full",
                            refine="laplace", prior_precision=delta,
                            hyperparameter_tuning=None).fit(X, y)
    post = clf.posterior_
    np.testing.assert_allclose(post.mean, mode, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(post.precision_matrix(), H, rtol=1e-7)


def test_last_layer_and_subnetwork_name_their_weights():
    rng = np.random.RandomState(0)
    X, y = rng.randn(40, 3), rng.randint(0, 3, 40)
    common = dict(hidden_layer_sizes=(4,), max_epochs=3, hyperparameter_tuning=None,
                  random_state=0)
    clf = LaplaceClassifier(subset_of_weights="last_layer", hessian_structure="kron",
                            **common).fit(X, y)
    post = clf.posterior_
    module = clf.net_.module_
    names = [k for k, _ in module.named_parameters()]
    flat = np.concatenate([p.detach().double().numpy().ravel() for p in module.parameters()])
    assert post.names == names[-2:] and post.shapes == [(3, 4), (3,)]
    np.testing.assert_allclose(post.mean, flat[post.indices])
    sub = LaplaceClassifier(subset_of_weights="subnetwork", subnetwork=5,
                            hessian_structure="full", **common).fit(X, y)
    post = sub.posterior_
    assert post.n_params == 5 and post.indices.shape == (5,)
    np.testing.assert_allclose(post.mean, flat[post.indices], rtol=1e-6)
    assert set(post.names) <= set(names)
    # the net at θ: the subnetwork's entries replaced, the other weights kept
    theta = post.mean + 1.0
    net = post.net_at(theta)
    new = np.concatenate([p.detach().double().numpy().ravel() for p in net.module_.parameters()])
    expected = flat.copy()
    expected[post.indices] = theta
    np.testing.assert_allclose(new, expected, rtol=1e-6)
    assert not np.allclose(np.concatenate([p.detach().double().numpy().ravel()
                                           for p in sub.net_.module_.parameters()]), new)


def test_net_at_evaluates_the_network_at_those_weights(logistic):
    X, y, delta, mode, _ = logistic
    clf = LaplaceClassifier(_linear_net(3, 3, mode), subset_of_weights="all",
                            hessian_structure="diag", prior_precision=delta,
                            hyperparameter_tuning=None).fit(X, y)
    theta = clf.posterior_.sample(1, random_state=0)[0]
    net = clf.posterior_.net_at(theta)
    logits = X @ theta[:9].reshape(3, 3).T + theta[9:]
    np.testing.assert_allclose(net.forward(X).numpy(), logits, rtol=1e-10)
    with pytest.raises(ValueError, match="theta"):
        clf.posterior_.net_at(theta[:3])
    with pytest.raises(ValueError, match="n_samples"):
        clf.posterior_.sample(0)


def test_posterior_needs_a_fit_and_guards_dense_memory(monkeypatch):
    with pytest.raises(NotFittedError):
        LaplaceRegressor().posterior_
    X, y = _regression_data()
    reg = LaplaceRegressor(_linear_net(3, 1, _blr(X, y, 1.0, 9.0)[0], nn.MSELoss,
                                       NeuralNetRegressor),
                           hessian_structure="diag", sigma_noise=9.0, hyperparameter_tuning=None,
                           normalize_y=False).fit(X, y)
    from sklaplace import posterior as module

    monkeypatch.setattr(module, "memory_budget", lambda device: 8)
    with pytest.raises(MemoryError, match="covariance"):
        reg.posterior_.covariance_matrix()
    assert reg.posterior_.covariance.matvec(np.ones(4)).shape == (4,)  # no dense matrix
