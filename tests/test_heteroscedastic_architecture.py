"""LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes="auto"): the architecture is
the default's choice among the one-σ mean networks, and the natural parameters start from
the chosen one; an explicit tuple keeps one architecture."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from sklaplace import LaplaceRegressor

FIT = dict(max_epochs=100, random_state=0)


def linear_log_precision(n, seed):
    """y = σ(x)ε with the log precision −log σ² = 1 − x₁ + 1.5·x₂ on [−1, 1]² (a mean of
    zero: η₁ = 0, both natural parameters linear in x)."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-1, 1, (n, 2))
    g = 1 - X[:, 0] + 1.5 * X[:, 1]
    return X, np.exp(-g / 2) * rng.randn(n)


def sine(n=300, seed=0):
    """y = sin 3x + ε with σ(x) = 0.05 + 0.3|x| on [−2, 2]."""
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, (n, 1))
    return X, np.sin(3 * X[:, 0]) + (0.05 + 0.3 * np.abs(X[:, 0])) * rng.randn(n)


def quiet_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


def test_a_linear_log_precision_chooses_the_linear_model_and_recovers_its_slopes():
    X, y = linear_log_precision(500, seed=1)
    reg = quiet_fit(LaplaceRegressor(noise="heteroscedastic", normalize_y=False, **FIT), X, y)
    assert reg.hidden_layer_sizes_ == ()
    results = reg.model_selection_results_
    assert results["hidden_layer_sizes"] == [(), (50,), (50, 50)]
    assert results["rank"][0] == 1 and np.isnan(results["held_out_nll"][2])  # greedy stop
    layer = reg.net_.module_.layers[0]  # rows: η₁, then the log precision
    w, b = layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy()
    np.testing.assert_allclose(w[1], [-1.0, 1.5], atol=0.2)
    assert abs(b[1] - 1.0) < 0.2
    np.testing.assert_allclose(w[0], [0.0, 0.0], atol=0.1)


def test_a_sine_with_growing_noise_does_not_choose_the_linear_model():
    X, y = sine()
    reg = quiet_fit(LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes=[(50,), ()],
                                     **FIT), X, y)
    assert reg.hidden_layer_sizes_ == (50,)
    nll = reg.model_selection_results_["held_out_nll"]  # by capacity: (), then (50,)
    assert nll[1] < nll[0] - 0.1
    # σ(x) grows with |x| (the natural parameters trained from the chosen mean)
    var = reg.predict_dist(np.array([[0.0], [1.8]])).aleatoric_var.ravel()
    assert var[1] > 3 * var[0]


@pytest.mark.parametrize("tuning", ["online", "cv"])
def test_the_selection_is_the_default_ones(tuning):
    """Same seed, same rows: the candidates' scores are the one-σ default's, bit for bit."""
    X, y = sine(200)
    params = dict(hidden_layer_sizes=[(), (8,)], max_epochs=30, random_state=0,
                  hyperparameter_tuning=tuning)
    homo = quiet_fit(LaplaceRegressor(**params), X, y)
    hetero = quiet_fit(LaplaceRegressor(noise="heteroscedastic", **params), X, y)
    for key in ("held_out_nll", "log_evidence", "n_params", "rank"):
        np.testing.assert_array_equal(hetero.model_selection_results_[key],
                                      homo.model_selection_results_[key])
    assert hetero.hidden_layer_sizes_ == homo.hidden_layer_sizes_
    # the natural-parameter net has the chosen sizes and 2 outputs per target
    assert hetero.net_.module_.layers[-1].out_features == 2
    assert hetero.hyperparameter_tuning_ == tuning


def test_an_explicit_tuple_keeps_one_architecture_and_pickles():
    X, y = sine(150)
    one = quiet_fit(LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes=(8,),
                                     max_epochs=20, random_state=0), X, y)
    assert one.hidden_layer_sizes_ == (8,)
    assert not hasattr(one, "model_selection_results_")
    auto = quiet_fit(LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes=[(), (8,)],
                                      max_epochs=20, random_state=0), X, y)
    assert auto.hidden_layer_sizes_ in {(), (8,)}
    again = pickle.loads(pickle.dumps(auto))
    assert again.hidden_layer_sizes_ == auto.hidden_layer_sizes_
    np.testing.assert_array_equal(again.model_selection_results_["held_out_nll"],
                                  auto.model_selection_results_["held_out_nll"])
    np.testing.assert_array_equal(again.predict(X[:5]), auto.predict(X[:5]))
    # a refit with a tuple drops the selection's results
    quiet_fit(auto.set_params(hidden_layer_sizes=(8,)), X, y)
    assert not hasattr(auto, "model_selection_results_")
