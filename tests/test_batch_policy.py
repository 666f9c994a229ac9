"""``batch_size="auto"``: the default MLP's minibatch grows with the training rows."""

import math

import numpy as np
import pytest
import torch
from skorch import NeuralNetRegressor
from torch import nn

from benchmarks.defaults import MAX_ROWS
from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace import policy

FAST = dict(hidden_layer_sizes=(8,), max_epochs=2, tol=None, hyperparameter_tuning=None,
            random_state=0)


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    return X, X[:, 0] - 2 * X[:, 1] + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize("n_rows, expected", [
    (1, 128), (128, 128), (2048, 128), (2049, 129), (3000, 188), (10_000, 625),
    (10**6, 62_500)])
def test_auto_is_128_rows_or_an_epoch_of_16_steps(n_rows, expected):
    assert policy.batch_rows("auto", n_rows) == expected
    assert math.ceil(n_rows / expected) <= max(16, math.ceil(n_rows / 128))


def test_an_integer_is_kept():
    assert policy.batch_rows(64, 10**6) == 64
    assert policy.batch_rows(np.int64(500), 10) == 500


def test_the_regressor_defaults_to_auto_the_classifier_to_128():
    assert LaplaceRegressor().batch_size == "auto"
    assert LaplaceClassifier().batch_size == 128


def test_the_scoreboard_sets_train_at_128_rows_a_batch():
    # the defaults scoreboard cuts sets to MAX_ROWS rows and trains on 75 % of them:
    # "auto" there is the earlier default, so the board holds for both
    assert policy.batch_rows("auto", math.ceil(0.75 * MAX_ROWS)) == 128


@pytest.mark.parametrize("Est", [LaplaceRegressor, LaplaceClassifier])
def test_auto_trains_16_steps_an_epoch_on_many_rows(Est):
    X, y = data(3000)
    if Est is LaplaceClassifier:
        y = (y > 0).astype(int)
    est = Est(batch_size="auto", **FAST).fit(X, y)
    assert est.net_.batch_size == 188
    assert [len(h["batches"]) for h in est.net_.history] == [16, 16]
    # an integer is what skorch gets
    est = Est(batch_size=1000, **FAST).fit(X, y)
    assert [len(h["batches"]) for h in est.net_.history] == [3, 3]


@pytest.mark.filterwarnings("ignore:hidden_layer_sizes. the largest candidate")
def test_the_selection_candidates_and_the_refit_each_take_their_rows(monkeypatch):
    seen = []
    rows = policy.batch_rows

    def spy(batch_size, n_rows):
        seen.append(n_rows)
        return rows(batch_size, n_rows)

    monkeypatch.setattr(policy, "batch_rows", spy)
    X, y = data(3000)
    est = LaplaceRegressor(hidden_layer_sizes=[(4,), (8,)], max_epochs=2, tol=None,
                           hyperparameter_tuning=None, random_state=0).fit(X, y)
    # each candidate on the 2,400 rows it trains on, then the refit on all 3,000
    assert 2400 in seen and seen[-1] == 3000
    assert est.net_.batch_size == 188


def test_auto_equals_128_rows_on_small_data():
    X, y = data(600)
    a = LaplaceRegressor(batch_size="auto", **FAST).fit(X, y)
    b = LaplaceRegressor(batch_size=128, **FAST).fit(X, y)
    np.testing.assert_array_equal(a.predict(X, return_std=True), b.predict(X, return_std=True))


def test_lbfgs_keeps_its_full_batch():
    X, y = data(3000)
    est = LaplaceRegressor(solver="lbfgs", **FAST).fit(X, y)
    assert [len(h["batches"]) for h in est.net_.history] == [1, 1]


def test_a_users_net_keeps_its_own_batch():
    X, y = data(3000)
    net = NeuralNetRegressor(nn.Linear, module__in_features=3, module__out_features=1,
                             optimizer=torch.optim.Adam, lr=0.01, batch_size=500, max_epochs=2,
                             train_split=None, verbose=0)
    est = LaplaceRegressor(net=net, tol=None, hyperparameter_tuning=None,
                           random_state=0).fit(X, y)
    assert [len(h["batches"]) for h in est.net_.history] == [6, 6]


def test_partial_fit_takes_the_batch_of_each_tasks_rows():
    X, y = data(6000)
    est = LaplaceRegressor(hidden_layer_sizes=(8,), max_epochs=2, tol=None, random_state=0)
    est.partial_fit(X[:1000], y[:1000])
    assert [len(h["batches"]) for h in est.net_.history] == [8, 8]
    est.partial_fit(X[1000:], y[1000:])  # 5,000 rows: ⌈5000/16⌉ = 313 rows a batch
    assert [len(h["batches"]) for h in est.net_.history] == [16, 16]


@pytest.mark.parametrize("bad", ["big", 0, 1.5])
def test_a_bad_batch_size_is_named(bad):
    X, y = data(50)
    with pytest.raises(ValueError, match="batch_size"):
        LaplaceRegressor(batch_size=bad, **FAST).fit(X, y)
