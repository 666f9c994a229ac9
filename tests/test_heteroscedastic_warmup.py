"""The mean-first training of LaplaceRegressor(noise="heteroscedastic"): the natural-parameter
start keeps the mean's function exactly; with constant noise the mean is as good as the
one-σ regressor's and σ(x) stays flat; with a noise that varies σ(x) follows it."""

import numpy as np
import pytest
import torch

from sklaplace import LaplaceRegressor
from sklaplace.estimators import _warmup as warmup
from sklaplace.nets import MLP

FIT = dict(hidden_layer_sizes=(20,), max_epochs=100, random_state=0)


def surface(sigma, n_train=300, seed=0):
    """y = sin(2x₁)cos(x₂) + x₂²/2 + σ(x)ε on [−2, 2]²: ``n_train`` training rows, 100 test
    rows (with the noise-free f of the test rows and their σ)."""
    rng = np.random.RandomState(seed)
    n = n_train + 100
    x = rng.uniform(-2, 2, (n, 2))
    f = np.sin(2 * x[:, 0]) * np.cos(x[:, 1]) + 0.5 * x[:, 1] ** 2
    s = sigma(x)
    y = f + s * rng.randn(n)
    return x[:n_train], y[:n_train], x[n_train:], f[n_train:], s[n_train:]


def test_natural_start_keeps_the_mean_function_and_starts_a_constant_noise():
    torch.manual_seed(0)
    mean = MLP(3, 2, (7, 5)).double()
    rng = np.random.RandomState(0)
    X = rng.randn(50, 3)
    y = rng.randn(50, 2)
    w = rng.uniform(0.5, 2, 50)
    for weight in (None, w):
        module, g0 = warmup.natural_start(mean, X, y, weight)
        with torch.no_grad():
            m = mean(torch.as_tensor(X)).numpy()
            f = module(torch.as_tensor(X)).numpy()
        r2 = (y - m) ** 2
        ms = r2.mean(0) if weight is None else (weight[:, None] * r2).sum(0) / weight.sum()
        np.testing.assert_allclose(g0, -np.log(ms), rtol=1e-12)
        np.testing.assert_allclose(f[:, 2:], np.broadcast_to(g0, (50, 2)), rtol=1e-12)
        np.testing.assert_allclose(f[:, :2] * np.exp(-f[:, 2:]), m, rtol=1e-10, atol=1e-12)


def test_natural_prior_keeps_hidden_layers_and_scales_the_output_layer():
    mean_tensors = warmup.mean_sizes((4,), 3, 1)  # 12, 4, 4, 1
    sizes = warmup.mean_sizes((4,), 3, 2)  # 12, 4, 8, 2
    delta = np.repeat([2.0, 3.0, 5.0, 7.0], mean_tensors)
    prior = warmup.natural_prior(delta, mean_tensors, sizes, np.array([np.log(10.0)]))
    np.testing.assert_allclose(prior, np.repeat([2.0, 3.0, 0.05, 0.07], sizes))
    np.testing.assert_allclose(warmup.natural_prior(np.array(4.0), mean_tensors, sizes,
                                                    np.zeros(1)), np.full(26, 4.0))


def test_constant_noise_mean_matches_the_one_sigma_fit_and_the_noise_stays_flat():
    X, y, Xt, ft, _ = surface(lambda x: np.full(len(x), 0.2))
    homo = LaplaceRegressor(**FIT).fit(X, y)
    hetero = LaplaceRegressor(noise="heteroscedastic", **FIT).fit(X, y)
    rmse = {name: np.sqrt(np.mean((reg.predict(Xt) - ft) ** 2))
            for name, reg in (("homo", homo), ("hetero", hetero))}
    assert rmse["hetero"] <= 1.2 * rmse["homo"], rmse
    std = np.sqrt(hetero.predict_dist(Xt).aleatoric_var).ravel()
    low, median, high = np.percentile(std, [5, 50, 95])
    assert high / low < 1.5, (low, median, high)
    assert abs(median / 0.2 - 1) < 0.25, median
    # the mean's epochs count in n_iter_: more than the natural parameters' alone
    assert hetero.n_iter_ > len(hetero.net_.history)


def test_input_dependent_noise_is_tracked():
    X, y, Xt, _, sigma = surface(lambda x: 0.05 + 0.3 * np.abs(x[:, 0]), n_train=600)
    reg = LaplaceRegressor(noise="heteroscedastic", **FIT).fit(X, y)
    std = np.sqrt(reg.predict_dist(Xt).aleatoric_var).ravel()
    rank = lambda a: np.argsort(np.argsort(a))  # noqa: E731
    assert np.corrcoef(rank(std), rank(sigma))[0, 1] > 0.8
    assert np.median(np.abs(std / sigma - 1)) < 0.3


@pytest.mark.parametrize("net_given", [False, True])
def test_only_the_default_mlp_from_scratch_starts_with_the_mean(net_given):
    from types import SimpleNamespace

    from sklaplace._laplace import likelihoods

    s = SimpleNamespace(net=object() if net_given else None)
    hetero, gauss = likelihoods.get("heteroscedastic"), likelihoods.get("gaussian")
    assert warmup.applies(s, hetero, None, None) is (not net_given)
    assert not warmup.applies(s, gauss, None, None)
    assert not warmup.applies(s, hetero, None, torch.nn.Linear(1, 1))
