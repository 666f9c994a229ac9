"""hidden_layer_sizes="auto": a candidate losing on the held-out rows stops training."""

import math
import types
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from torch import nn

from sklaplace import LaplaceRegressor
from sklaplace._laplace import losing
from sklaplace._laplace.convergence import Converged
from sklaplace.estimators import _selection


def linear_rows(n=300, d=5, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + 0.3 * rng.normal(size=n)


def sine_rows(n=300, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    return X, np.sin(2 * X[:, 0]) * X[:, 1] + 0.1 * rng.normal(size=n)


@pytest.fixture(autouse=True)
def rule_on(monkeypatch):
    monkeypatch.setattr(_selection, "LOSING_MIN_STEPS", 0)  # tiny data: epochs of 2 steps


def fit(X, y, **params):
    est = LaplaceRegressor(hidden_layer_sizes=[(), (20,)], max_epochs=100, random_state=0,
                           **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


def test_plugin_nll_is_the_gaussian_nll_of_the_net_at_sigma():
    torch.manual_seed(0)
    module = nn.Linear(3, 2).double()
    X = torch.randn(20, 3, dtype=torch.float64)
    y = np.random.RandomState(0).normal(size=(20, 2))
    weight = np.arange(1.0, 21.0)
    sigma = 0.7
    f = module(X).detach().numpy()
    cells = 0.5 * np.log(2 * math.pi * sigma**2) + 0.5 * (y - f) ** 2 / sigma**2
    expected = np.average(cells.mean(1), weights=weight)
    assert losing.plugin_nll(module, X, y, "gaussian", torch.tensor(sigma, dtype=torch.float64),
                              weight) == (
        pytest.approx(expected, rel=1e-12))


def fake_net(module, sigma=1.0):
    return types.SimpleNamespace(history=[], module_=module, callbacks_=[],
                                 criterion_=types.SimpleNamespace(
                                     sigma_noise=torch.tensor(sigma)))


def drive(callback, net, weights):
    """Run ``callback`` over epochs whose net weights are ``weights``; the epoch it
    stopped at, or None."""
    for w in weights:
        with torch.no_grad():
            net.module_.weight.copy_(torch.as_tensor(w).reshape(1, -1))
        net.history.append({})
        try:
            callback.on_epoch_end(net)
        except Converged:
            return len(net.history)
    return None


def rule_case(reference, weights, patience=3):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(50, 2))
    y = X @ np.array([1.0, -1.0])
    module = nn.Linear(2, 1, bias=False).double()
    callback = losing.LosingCandidate(X, y[:, None], "gaussian", reference, patience,
                                      tol=1e-4).initialize()
    return callback, drive(callback, fake_net(module), weights)


def test_a_stalled_candidate_behind_the_reference_stops_after_patience():
    weights = [[0.5, -0.5]] * 10  # no improvement after the first epoch
    callback, stopped = rule_case(reference=-5.0, weights=weights)
    assert stopped == 4 and callback.stopped_  # epoch 1 sets the best, 3 more stall
    assert len(callback.history_) == 4


def test_a_candidate_that_keeps_improving_is_not_stopped():
    weights = [[a, -a] for a in np.linspace(0.1, 0.9, 12)]  # towards the truth (1, −1)
    callback, stopped = rule_case(reference=-50.0, weights=weights)
    assert stopped is None and not callback.stopped_
    assert np.all(np.diff([nll for _, nll in callback.history_]) < 0)


def test_a_stalled_candidate_ahead_of_the_reference_is_not_stopped():
    callback, stopped = rule_case(reference=50.0, weights=[[0.5, -0.5]] * 10)
    assert stopped is None and not callback.stopped_


def test_a_losing_candidate_stops_and_is_recorded():
    X, y = linear_rows()
    est = fit(X, y)
    r = est.model_selection_results_
    assert est.hidden_layer_sizes_ == ()
    assert list(r["stopped_losing"]) == [False, True]
    assert r["n_iter"][1] < 100 and r["n_iter"][0] > 0
    # the stored net keeps no held-out rows
    assert not [cb for _, cb in est.net_.callbacks_ if isinstance(cb, losing.LosingCandidate)]


def test_a_stopped_candidate_is_logged(capsys):
    X, y = linear_rows()
    fit(X, y, verbose=1)
    assert "hidden_layer_sizes=(20,): stopped after" in capsys.readouterr().out


def test_a_winning_larger_candidate_is_not_stopped():
    X, y = sine_rows()
    est = fit(X, y)
    assert est.hidden_layer_sizes_ == (20,)
    assert not est.model_selection_results_["stopped_losing"].any()


def test_few_steps_an_epoch_delay_the_stop(monkeypatch):
    X, y = linear_rows()  # 240 fit rows: 2 steps an epoch
    monkeypatch.setattr(_selection, "LOSING_MIN_STEPS", 400)  # no stop before epoch 200
    r = fit(X, y).model_selection_results_
    assert not r["stopped_losing"].any() and r["n_iter"][1] == 100


@pytest.mark.parametrize("batch_size, n_rows, expected", [
    (128, 240, (10, 1000)),         # 2 steps an epoch: 2,000 steps are 1,000 epochs
    (128, 800_000, (10, 1)),        # 6,250 steps an epoch
    (32, 3_200, (10, 20)),          # a smaller batch: 100 steps an epoch
    ("auto", 240, (10, 1000)),      # "auto" is 128 rows up to 2,048: as 128
    ("auto", 8_000, (10, 125)),     # 16 steps an epoch above 2,048 rows
    ("auto", 800_000, (10, 125)),   # the stall itself: 10 epochs, not 125
])
def test_the_least_steps_count_from_the_start(monkeypatch, batch_size, n_rows, expected):
    monkeypatch.setattr(_selection, "LOSING_MIN_STEPS", 2000)
    s = types.SimpleNamespace(n_iter_no_change=10, batch_size=batch_size)
    assert _selection.losing_patience(s, n_rows) == expected


def test_a_stalled_candidate_does_not_stop_before_its_least_epochs():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(50, 2))
    y = X @ np.array([1.0, -1.0])
    callback = losing.LosingCandidate(X, y[:, None], "gaussian", -5.0, 3, tol=1e-4,
                                      min_epochs=7).initialize()
    module = nn.Linear(2, 1, bias=False).double()
    assert drive(callback, fake_net(module), [[0.5, -0.5]] * 10) == 7  # not 4
    assert callback.stopped_
