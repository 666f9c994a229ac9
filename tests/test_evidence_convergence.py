"""The convergence rule on the log evidence of online updates (``EVIDENCE_RULE``): under
online tuning, training also stops once the best log evidence of the updates has not
improved by ``tol`` per training row for n_iter_no_change updates (``PATIENCE_UNIT``
"updates") or ⌈n_iter_no_change / frequency⌉ updates ("epochs"); the loss rule goes on
as without it; ``tol=None`` runs ``max_epochs``."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from sklaplace import LaplaceRegressor
from sklaplace._laplace import convergence
from sklaplace._laplace.convergence import Converged, Convergence, warn_not_converged

N_TRAIN = 200


FALLING = [10.0 - 0.01 * e for e in range(1, 301)]  # a loss the loss rule never stops


@pytest.fixture(autouse=True)
def evidence_rule(monkeypatch):
    monkeypatch.setattr(convergence, "EVIDENCE_RULE", True)


@pytest.fixture
def epochs_unit(monkeypatch):
    monkeypatch.setattr(convergence, "PATIENCE_UNIT", "epochs")


class _Online:
    """What the rule reads of an ``OnlineEvidence`` callback."""

    UPDATES_EVIDENCE = True

    def __init__(self, frequency):
        self.frequency, self.history_ = frequency, []


class _Net:
    def __init__(self, online, max_epochs=1000):
        self.history, self.max_epochs = [], max_epochs
        self.callbacks_ = [("online", online)]
        self.criterion_ = type("Crit", (), {})()
        self.criterion_.prior_precision = torch.tensor(1.0)
        self.criterion_.sigma_noise = torch.tensor(1.0)
        self.criterion_.n_train = N_TRAIN


def stops_at(losses, evidences, frequency=5, tol=1e-3, n=10, burn_in=0, online=None):
    """The epoch (1-based) the rule stops at: epoch e has training loss ``losses[e-1]``
    and, at the update epochs (every ``frequency`` after ``burn_in``), the next value of
    ``evidences``."""
    online = online or _Online(frequency)
    cb, net, values = Convergence(tol, n).initialize(), _Net(online), iter(evidences)
    for epoch, loss in enumerate(losses, 1):
        cb.on_epoch_begin(net)
        net.history.append({"train_loss": loss})
        if epoch > burn_in and (epoch - burn_in) % frequency == 0:
            online.history_.append({"epoch": epoch, "log_evidence": next(values)})
            net.criterion_.prior_precision = torch.tensor(float(epoch))  # as an update does
        try:
            cb.on_epoch_end(net)
        except Converged:
            return epoch
    return None


def expected_stop(evidences, frequency, tol, n, n_rows=N_TRAIN):
    """The update epoch at which the best evidence has gone ``patience(n, frequency)``
    updates without an improvement of tol·n_rows."""
    best, count, m = -np.inf, 0, convergence.patience(n, frequency)
    for k, value in enumerate(evidences, 1):
        count = 0 if value > best + tol * n_rows else count + 1
        best = max(best, value)
        if count >= m:
            return k * frequency
    return None


PLATEAU = [0.0, 1.0, 2.0, 3.0, 3.1, 3.15, 3.2] + [10.0] * 40


def test_the_best_evidence_ends_training(epochs_unit):
    rising = [float(k) for k in range(60)]  # each update improves by 1 > tol·N = 0.2
    assert stops_at(FALLING, rising) is None
    # a plateau after 4 updates: updates 5 and 6 do not improve, 2 = ⌈10/5⌉ updates
    assert stops_at(FALLING, PLATEAU) == 30 == expected_stop(PLATEAU, 5, 1e-3, 10)
    # tol is per training row: improvements of 0.15 < 0.2 do not count, 0.25 do
    assert stops_at(FALLING, [0.15 * k for k in range(60)], tol=1e-3) == 15
    assert stops_at(FALLING, [0.25 * k for k in range(60)], tol=1e-3) is None
    # a dip does not move the best value: the updates after it are judged against it
    dip = [0.0, 5.0, 1.0, 5.1, 9.0, 9.0, 9.0]
    assert stops_at(FALLING, dip) == 20 == expected_stop(dip, 5, 1e-3, 10)
    # ⌈n_iter_no_change / frequency⌉ updates: 3 for n = 11 (or 15) and frequency 5
    assert stops_at(FALLING, PLATEAU, n=11) == 35 == stops_at(FALLING, PLATEAU, n=15)
    assert stops_at(FALLING, PLATEAU, frequency=2) == expected_stop(PLATEAU, 2, 1e-3, 10)


def test_n_iter_no_change_counts_updates():
    # the default unit: n_iter_no_change = 3 updates without improvement (5 to 7)
    assert convergence.PATIENCE_UNIT == "updates"
    assert stops_at(FALLING, PLATEAU, n=3) == 35 == expected_stop(PLATEAU, 5, 1e-3, 3)
    # n_iter_no_change = 10: update 8 improves, the count restarts and ends at update 18
    assert stops_at(FALLING, PLATEAU, n=10) == 90 == expected_stop(PLATEAU, 5, 1e-3, 10)
    assert stops_at(FALLING, PLATEAU[:7] + [3.2] * 40, n=10) == 70


def test_the_loss_rule_goes_on():
    # a flat loss stops training as without the evidence rule: the first loss after
    # each update (epochs 6 and 11) is the new reference and is not counted, and the
    # loss has run 10 epochs without improvement at epoch 13
    assert stops_at([1.0] * 200, [float(k) for k in range(40)]) == 13
    # before the first update (a burn-in of 30 epochs) it is the classic rule
    assert stops_at([1.0] * 200, [0.0] * 40, burn_in=30) == 11


def test_updates_of_an_earlier_fit_are_not_judged(epochs_unit):
    online = _Online(5)
    online.history_ = [{"epoch": 1, "log_evidence": 100.0}]
    assert stops_at(FALLING, [0.0, 1.0, 2.0, 2.0, 2.0], online=online) == 25


def test_without_the_switch_the_evidence_is_not_judged(monkeypatch):
    monkeypatch.setattr(convergence, "EVIDENCE_RULE", False)
    assert stops_at(FALLING, PLATEAU[:7] + [3.2] * 60) is None


def test_the_warning_names_the_evidence():
    online = _Online(5)
    online.history_ = [{"epoch": 5, "log_evidence": 1.0}]
    net = _Net(online, max_epochs=5)
    net.history = [{}] * 5
    with pytest.warns(ConvergenceWarning, match="log evidence of the online updates"):
        warn_not_converged(net, 1e-4, 10, False)


def smooth_data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 3))
    return X, np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def test_an_online_fit_stops_once_the_evidence_plateaus():
    X, y = smooth_data()
    params = dict(hidden_layer_sizes=(16,), hyperparameter_tuning="online", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = LaplaceRegressor(max_epochs=400, **params).fit(X, y)
    values = [h["log_evidence"] for h in est.evidence_history_]
    # the stop is the rule's, read off the updates (the history's evidence is in the
    # units of y: a constant offset, the same differences)
    assert est.n_iter_ == expected_stop(values, 5, est.tol, 10, len(X)) < 400
    assert est.n_iter_ == est.evidence_history_[-1]["epoch"]
    # tol=None: every epoch of max_epochs, no rule
    longer = LaplaceRegressor(max_epochs=est.n_iter_ + 20, tol=None, **params).fit(X, y)
    assert longer.n_iter_ == est.n_iter_ + 20
