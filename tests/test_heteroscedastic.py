"""LaplaceRegressor(noise="heteroscedastic"): the predictive moments against Monte Carlo,
a ground truth of linear natural parameters recovered, the units, the joint predictive,
the parameter rules and the scikit-learn workflows."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from skorch import NeuralNetRegressor
from torch import nn

from sklaplace import LaplaceRegressor
from sklaplace._laplace import natural
from sklaplace.nets import MLP, HeteroscedasticGaussianNLLLoss

DT = torch.float64
SMALL = dict(noise="heteroscedastic", hidden_layer_sizes=(10,), max_epochs=30, random_state=0)


def random_gaussian(n, T, scale, seed=0):
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(n, 2 * T, generator=g, dtype=DT)
    A = torch.randn(n, 2 * T, 2 * T, generator=g, dtype=DT) * scale
    return f, A @ A.transpose(1, 2)


def draws(f, cov, n_draws, seed=1):
    g = torch.Generator().manual_seed(seed)
    L = torch.linalg.cholesky(cov + 1e-12 * torch.eye(cov.shape[-1], dtype=DT))
    z = torch.randn(n_draws, *f.shape, generator=g, dtype=DT)
    return f + torch.einsum("ncd,snd->snc", L, z)


def linearized(f, s):
    """μ of the draws ``s`` linearized at ``f``: μ(f) + ∇μ·(s − f), ∇μ = (e^(−g), −μ)."""
    T = f.shape[-1] // 2
    var = torch.exp(-f[..., T:])
    mu = f[..., :T] * var
    return mu + var * (s[..., :T] - f[..., :T]) - mu * (s[..., T:] - f[..., T:])


def test_moments_match_many_draw_monte_carlo():
    f, cov = random_gaussian(6, 2, 0.25)
    mean, epistemic, aleatoric = natural.moments(f, cov)
    s = draws(f, cov, 400_000)
    T = 2
    torch.testing.assert_close(aleatoric, torch.exp(-f[:, T:]))  # σ² of the MAP outputs
    # the linearized mean function: its draws' mean and variance, for any V
    mu = linearized(f, s)
    se = mu.std(0) / np.sqrt(len(mu))
    assert ((mean - mu.mean(0)).abs() < 5 * se).all()
    se_var = ((mu - mu.mean(0)) ** 2).std(0) / np.sqrt(len(mu))
    assert ((epistemic - mu.var(0)).abs() < 5 * se_var).all()
    # the draws' own moments (pred_type="nn") are exactly those statistics
    var = torch.exp(-s[..., T:])
    m2, e2, a2 = natural.sample_moments(s[:1000])
    torch.testing.assert_close(m2, (s[:1000, :, :T] * var[:1000]).mean(0))
    torch.testing.assert_close(a2, var[:1000].mean(0))


def test_moments_approach_the_exact_mixture_moments_for_a_small_covariance():
    """μ = η₁e^(−g) of many draws: mean and variance within 2 % of the linearized ones."""
    f, cov = random_gaussian(6, 2, 0.02)
    mean, epistemic, aleatoric = natural.moments(f, cov)
    s = draws(f, cov, 400_000)
    var = torch.exp(-s[..., 2:])
    mu = s[..., :2] * var
    torch.testing.assert_close(mu.var(0), epistemic, rtol=0.02, atol=0)
    torch.testing.assert_close(mu.mean(0), mean, rtol=0.02, atol=0.02 * epistemic.sqrt().max())
    torch.testing.assert_close(var.mean(0), aleatoric, rtol=0.02, atol=0)


def test_joint_moments_match_the_per_row_ones_and_monte_carlo():
    g = torch.Generator().manual_seed(4)
    n, T = 3, 2
    f = torch.randn(n, 2 * T, generator=g, dtype=DT)
    A = torch.randn(n * 2 * T, n * 2 * T, generator=g, dtype=DT) * 0.15
    cov = (A @ A.T).reshape(n, 2 * T, n, 2 * T)
    mean, cov_mu, aleatoric = natural.joint(f, cov)
    per_row = torch.stack([cov[i, :, i, :] for i in range(n)])
    m1, e1, a1 = natural.moments(f, per_row)
    torch.testing.assert_close(mean, m1)
    torch.testing.assert_close(aleatoric, a1)
    torch.testing.assert_close(torch.stack([cov_mu[i, :, i, :].diagonal() for i in range(n)]),
                               e1)
    s = draws(f.reshape(1, -1), cov.reshape(1, n * 2 * T, n * 2 * T), 400_000)[:, 0]
    mu = linearized(f, s.reshape(-1, n, 2 * T)).reshape(len(s), -1)
    torch.testing.assert_close(cov_mu.reshape(n * T, n * T), torch.cov(mu.T), rtol=0.01,
                               atol=0.01 * float(cov_mu.abs().max()))


def linear_truth(n, seed=0):
    """η₁ = 0.5 + x₁ and log precision 1 + 1.5·x₂ − x₁: exactly a net without hidden layer."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-1, 1, (n, 2))
    log_prec = 1 + 1.5 * X[:, 1] - X[:, 0]
    var = np.exp(-log_prec)
    mu = (0.5 + X[:, 0]) * var
    return X, mu + np.sqrt(var) * rng.randn(n), mu, var


def test_linear_natural_parameters_are_recovered():
    X, y, mu, var = linear_truth(4000)
    reg = LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes=(), normalize_y=False,
                           solver="lbfgs", max_epochs=200, hyperparameter_tuning="evidence",
                           random_state=0).fit(X, y)
    W = reg.net_.module_.layers[0]
    w, b = W.weight.detach().double().numpy(), W.bias.detach().double().numpy()
    np.testing.assert_allclose(w[1], [-1.0, 1.5], atol=0.1)  # the log precision
    np.testing.assert_allclose(b, [0.5, 1.0], atol=0.1)
    np.testing.assert_allclose(w[0], [1.0, 0.0], atol=0.1)
    Xt, _, mu_t, var_t = linear_truth(1000, seed=1)
    dist = reg.predict_dist(Xt)
    assert np.median(np.abs(dist.aleatoric_var / var_t - 1)) < 0.1
    # the evidence tuned the prior alone, and there is no single sigma
    assert not hasattr(reg, "sigma_noise_")
    assert np.isfinite(reg.log_evidence_)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, (150, 2))
    y = np.sin(3 * X[:, 0]) + (0.05 + 0.3 * np.abs(X[:, 0])) * rng.randn(150)
    return X, y, LaplaceRegressor(**SMALL).fit(X, y)


def test_std_cov_and_samples_agree(fitted):
    X, y, reg = fitted
    mean, std = reg.predict(X[:6], return_std=True)
    dist = reg.predict_dist(X[:6])
    np.testing.assert_allclose(std**2, dist.aleatoric_var + dist.epistemic_var, rtol=1e-10)
    mean_c, cov = reg.predict(X[:6], return_cov=True)
    np.testing.assert_allclose(mean_c, mean, rtol=1e-10)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-8)
    samples = reg.sample_y(X[:6], n_samples=20000, random_state=0)
    np.testing.assert_allclose(samples.mean(1), mean, atol=5 * std.max() / np.sqrt(20000))
    np.testing.assert_allclose(samples.std(1), std, rtol=0.03)
    f = reg.sample_functions(X[:6], n_samples=3, random_state=0)
    assert f.shape == (3, 6, 1) and np.isfinite(f).all()


def test_normalize_y_scales_both_heads(fitted):
    X, y, reg = fitted
    scaled = LaplaceRegressor(**SMALL).fit(X, 100 * y + 5)
    a, b = reg.predict_dist(X[:5]), scaled.predict_dist(X[:5])
    np.testing.assert_allclose(b.mean, 100 * a.mean + 5, rtol=1e-4)
    np.testing.assert_allclose(b.aleatoric_var, 1e4 * a.aleatoric_var, rtol=1e-3)
    np.testing.assert_allclose(b.epistemic_var, 1e4 * a.epistemic_var, rtol=1e-3)


def test_extrapolation_variance_adds_to_the_mean_variance(fitted):
    X, y, reg = fitted
    wide = LaplaceRegressor(**SMALL, extrapolation_variance=1.0).fit(X, y)
    far = np.array([[3.0, 0.0], [0.0, 0.0]])
    a, b = reg.predict_dist(far), wide.predict_dist(far)
    np.testing.assert_allclose(b.aleatoric_var, a.aleatoric_var, rtol=1e-10)
    extra = b.epistemic_var - a.epistemic_var
    assert extra[0] > 0 and abs(extra[1]) < 1e-12


def test_multi_output_shapes():
    rng = np.random.RandomState(1)
    X = rng.randn(80, 3)
    Y = np.c_[X[:, 0] + 0.1 * rng.randn(80), X[:, 1] * (0.2 + np.abs(X[:, 2]))]
    reg = LaplaceRegressor(**SMALL).fit(X, Y)
    dist = reg.predict_dist(X[:4])
    assert dist.mean.shape == dist.aleatoric_var.shape == (4, 2)
    assert reg.predict(X[:4], return_cov=True)[1].shape == (4, 4, 2)
    assert reg.sample_y(X[:4], n_samples=3).shape == (4, 2, 3)


@pytest.mark.parametrize("settings", [
    dict(hessian_structure="kron"), dict(hessian_structure="diag", curvature="ef"),
    dict(subset_of_weights="last_layer", hessian_structure="full"),
    dict(subset_of_weights="last_layer", hessian_structure="kron"),
    dict(hessian_structure="lowrank", lowrank_rank=5),
    dict(subset_of_weights="subnetwork", subnetwork=8), dict(pred_type="gp", gp_subset_size=40),
    dict(hyperparameter_tuning="cv"),
    dict(hyperparameter_tuning="online", online_frequency=5),
])
def test_every_structure_subset_and_tuner_predicts(fitted, settings):
    X, y, _ = fitted
    reg = LaplaceRegressor(**{**SMALL, **settings}).fit(X, y)
    dist = reg.predict_dist(X[:5])
    assert np.isfinite(dist.mean).all() and (dist.epistemic_var >= 0).all()
    assert (dist.aleatoric_var > 0).all() and not hasattr(reg, "sigma_noise_")
    assert np.isfinite(reg.log_evidence())


def test_rules_and_errors(fitted):
    X, y, reg = fitted
    with pytest.raises(ValueError, match="sigma_noise must stay at its default"):
        LaplaceRegressor(**{**SMALL, "sigma_noise": 0.5}).fit(X, y)
    with pytest.raises(ValueError, match="refine"):
        LaplaceRegressor(**SMALL, refine="laplace").fit(X, y)
    with pytest.raises(ValueError, match="leave sigma_noise=None"):
        reg.log_evidence(sigma_noise=1.0)
    assert not hasattr(reg, "partial_fit")
    mse_net = NeuralNetRegressor(MLP, module__n_features=2, module__n_outputs=2, max_epochs=2)
    with pytest.raises(ValueError, match="HeteroscedasticGaussianNLLLoss"):
        LaplaceRegressor(mse_net, noise="heteroscedastic").fit(X, y)
    one = NeuralNetRegressor(MLP, module__n_features=2, module__n_outputs=1, max_epochs=2,
                             criterion=HeteroscedasticGaussianNLLLoss)
    with pytest.raises(ValueError, match="expects 2: η₁"):
        LaplaceRegressor(one, noise="heteroscedastic").fit(X, y)
    with pytest.raises(ValueError, match="use noise='heteroscedastic'"):
        LaplaceRegressor(one).fit(X, y)
    with pytest.raises(ValueError, match="noise"):
        LaplaceRegressor(noise="poisson").fit(X, y)
    with pytest.raises(ValueError, match="model_averaging=True needs noise='homoscedastic'"):
        LaplaceRegressor(model_averaging=True, noise="heteroscedastic").fit(X, y)


def test_sampled_predictive_is_refused_at_fit_and_after_it(fitted):
    """μ = η₁e^(−g) of sampled networks is heavy-tailed: pred_type="nn" is refused, with a
    message naming both parameters, in fit and when set on a fitted estimator."""
    X, y, reg = fitted
    message = r"noise='heteroscedastic': pred_type='nn' is not available"
    with pytest.raises(ValueError, match=message):
        LaplaceRegressor(**SMALL, pred_type="nn").fit(X, y)
    switched = pickle.loads(pickle.dumps(reg)).set_params(pred_type="nn")
    for call in (lambda: switched.predict(X[:3]), lambda: switched.predict_dist(X[:3]),
                 lambda: switched.predict(X[:3], return_cov=True),
                 lambda: switched.sample_functions(X[:3])):
        with pytest.raises(ValueError, match=message):
            call()
    assert np.isfinite(reg.predict(X[:3])).all()  # the fitted one is untouched


def test_unstandardized_targets_far_from_unit_scale_warn():
    """normalize_y=False trains the natural parameters in the units of y: y in micro-units
    (×1e6) gave means 10³ times the targets' range; the fit says so."""
    rng = np.random.RandomState(0)
    x = rng.uniform(-1, 1, (200, 1))
    y = np.sin(3 * x[:, 0]) + (0.05 + 0.4 * np.abs(x[:, 0])) * rng.randn(200)
    small = dict(noise="heteroscedastic", normalize_y=False, hidden_layer_sizes=(10,),
                 max_epochs=5, tol=None, random_state=0)
    with pytest.warns(UserWarning, match=r"normalize_y=False .* root mean square is 7\.\d+e\+05"):
        LaplaceRegressor(**small).fit(x, y * 1e6)
    with pytest.warns(UserWarning, match="normalize_y=True"):
        LaplaceRegressor(**small).fit(x, y * 1e-3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*normalize_y=False.*")
        LaplaceRegressor(**small).fit(x, y)  # unit scale
        LaplaceRegressor(**{**small, "normalize_y": True}).fit(x, y * 1e6)


def test_user_net_frozen_net_pickle_pipeline_and_search(fitted):
    X, y, reg = fitted
    net = NeuralNetRegressor(MLP, module__n_features=2, module__n_outputs=2,
                             module__hidden_layer_sizes=(10,), max_epochs=20, lr=0.01,
                             optimizer=torch.optim.Adam, criterion=HeteroscedasticGaussianNLLLoss)
    own = LaplaceRegressor(net, noise="heteroscedastic", random_state=0).fit(X, y)
    assert np.isfinite(own.predict(X[:3])).all()
    frozen = LaplaceRegressor(FrozenEstimator(reg.net_), noise="heteroscedastic").fit(X, y)
    np.testing.assert_allclose(frozen.predict(X[:3]), reg.predict(X[:3]), rtol=1e-5)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_allclose(again.predict(X[:4], return_std=True),
                               reg.predict(X[:4], return_std=True))
    pipe = make_pipeline(StandardScaler(), LaplaceRegressor(**SMALL)).fit(X, y)
    assert pipe.predict(X[:3]).shape == (3,)
    search = GridSearchCV(LaplaceRegressor(**SMALL, hyperparameter_tuning=None),
                          {"prior_precision": [0.1, 10.0]}, cv=2).fit(X, y)
    assert search.best_params_["prior_precision"] in (0.1, 10.0)
