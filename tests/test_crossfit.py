"""The held-out δ pooled over folds (``_crossfit``) where the held-out rows are few."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator

from sklaplace import LaplaceClassifier
from sklaplace.estimators import _crossfit
from sklaplace._laplace import nets
from sklaplace._laplace.holdout import LOG10_PRIOR_GRID, one_standard_error_choice

FAST = dict(hidden_layer_sizes=[(6,)], max_epochs=15, lr=0.03, random_state=0)


def _rows(n=120, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3)
    y = (X[:, 0] - X[:, 1] ** 2 + 0.5 * rng.randn(n) > -0.5).astype(int)
    return X, y


def _spied_fit(monkeypatch, est, X, y):
    """Fit ``est``, recording every MAP training: (its rows' indices, the trained net)."""
    calls, train_map = [], nets.train_map
    index = {row.tobytes(): i for i, row in enumerate(np.asarray(X, dtype=np.float32))}

    def spy(net, Xt, yt, **kwargs):
        out = train_map(net, Xt, yt, **kwargs)
        rows = np.array([index[r.tobytes()] for r in np.asarray(Xt, dtype=np.float32)])
        calls.append((rows, out))
        return out

    monkeypatch.setattr(nets, "train_map", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    return calls


@pytest.fixture(autouse=True)
def pooled(monkeypatch):
    """The pooled choice as measured (off by default: ``POOLED_ROWS = 0``)."""
    monkeypatch.setattr(_crossfit, "POOLED_ROWS", 500)


def test_off_by_default_one_fold_chooses(monkeypatch):
    monkeypatch.setattr(_crossfit, "POOLED_ROWS", 0)
    assert _crossfit.n_extra_folds(150, 30) == 0
    X, y = _rows()
    calls = _spied_fit(monkeypatch, LaplaceClassifier(**FAST), X, y)
    assert [len(rows) for rows, _ in calls] == [96, 120]


def test_extra_folds_until_enough_rows_are_held_out():
    assert _crossfit.n_extra_folds(1000, 200) == 2  # 3 folds hold out 600 ≥ 500 rows
    assert _crossfit.n_extra_folds(150, 30) == _crossfit.MAX_EXTRA_FOLDS == 2  # at most
    assert _crossfit.n_extra_folds(100, 50) == 1  # the data hold two folds
    assert _crossfit.n_extra_folds(2600, 520) == 0  # one fold holds enough
    folds = _crossfit.extra_folds(np.arange(20, 100), 20, 3, np.repeat([0, 1], 50), 0)
    assert [len(f) for f in folds] == [20, 20, 20]
    assert len(np.unique(np.concatenate(folds))) == 60 and np.concatenate(folds).min() >= 20


def test_the_pooled_delta_is_the_grid_choice_of_every_folds_own_net(monkeypatch):
    X, y = _rows()
    est = LaplaceClassifier(**FAST)
    calls = _spied_fit(monkeypatch, est, X, y)
    n = len(X)
    # the held-out pass, two more folds, the refit on all rows
    assert [len(rows) for rows, _ in calls] == [96] * 3 + [n]
    held = [np.setdiff1d(np.arange(n), rows) for rows, _ in calls[:3]]
    assert len(np.unique(np.concatenate(held))) == 3 * 24  # disjoint folds
    # brute force through the public predictor: each fold's net, its LA on its own rows,
    # every grid prior scored on the rows that net never trained on
    losses = []
    for (rows, net), out in zip(calls[:3], held):
        part = LaplaceClassifier(FrozenEstimator(net), hyperparameter_tuning=None).fit(
            X[rows], y[rows])
        fitted, fold = part.laplace_, []
        for log10 in LOG10_PRIOR_GRID:
            part.laplace_ = fitted.with_prior(10.0**log10)
            fold.append(-np.log(part.predict_proba(X[out])[np.arange(len(out)), y[out]]))
        losses.append(np.array(fold))
    losses = np.concatenate(losses, axis=1)
    chosen = one_standard_error_choice(losses)
    assert est.prior_precision_ == pytest.approx(10.0 ** LOG10_PRIOR_GRID[chosen])
    assert est.validation_nll_ == pytest.approx(losses[chosen].mean(), rel=1e-8)
    # the refit predicts at that δ
    full = LaplaceClassifier(FrozenEstimator(est.net_), hyperparameter_tuning=None,
                             prior_precision=est.prior_precision_).fit(X, y)
    np.testing.assert_allclose(est.predict_proba(X), full.predict_proba(X), rtol=1e-10)


def test_large_held_out_sets_train_once(monkeypatch):
    X, y = _rows(n=120)
    monkeypatch.setattr(_crossfit, "POOLED_ROWS", 10)
    est = LaplaceClassifier(**FAST)
    calls = _spied_fit(monkeypatch, est, X, y)
    assert [len(rows) for rows, _ in calls] == [96, 120]


def test_the_transfer_benchmark_reports_the_oracle_delta_of_the_final_net():
    from benchmarks import transfer

    records = transfer.run(["iris"], ["one-fold"], 1, 60, sizes=[(4,)],
                           params={"max_epochs": 10}, log=lambda line: None)
    (r,) = records
    assert r["oracle_nll"] <= r["nll"] + 1e-12  # the grid holds the chosen δ
    assert r["oracle_delta"] in 10.0 ** transfer.LOG10_PRIOR_GRID
    assert r["sizes"] == "(4,)" and "| iris | 0 | one-fold |" in transfer.table(records)
