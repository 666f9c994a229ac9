"""Evidence inside scikit-learn: MAP cache across LA-only refits, evidence_scorer, online tuning."""

import numpy as np
import pytest
import torch
from skorch import NeuralNetClassifier
from sklearn.datasets import load_iris, make_regression
from sklearn.model_selection import GridSearchCV
from torch import nn

import sklaplace._laplace.nets
from sklaplace import LaplaceClassifier, LaplaceRegressor

FAST = dict(hidden_layer_sizes=(6,), max_epochs=30, lr=0.03, random_state=0)


@pytest.fixture
def iris():
    return load_iris(return_X_y=True)


def test_grid_search_over_la_parameters_trains_once_per_fold(iris, tmp_path, monkeypatch):
    X, y = iris
    calls = []
    original = sklaplace._laplace.nets.train_map

    def counting_train_map(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(sklaplace._laplace.nets, "train_map", counting_train_map)
    search = GridSearchCV(
        LaplaceClassifier(memory=str(tmp_path), hyperparameter_tuning="evidence", **FAST),
        {"hessian_structure": ["full", "diag"], "link_approx": ["probit", "bridge"]},
        cv=2, scoring="neg_log_loss",
    ).fit(X, y)
    # 4 candidates × 2 folds + the refit: the MAP net is trained once per fold and once
    # for the refit on all rows; every other fit reuses the cache.
    assert len(calls) == 3
    assert search.best_estimator_.hessian_structure_ in ("full", "diag")


def test_memory_refit_gives_the_same_net(iris, tmp_path):
    X, y = iris
    a = LaplaceClassifier(memory=str(tmp_path), **FAST).fit(X, y)
    b = LaplaceClassifier(memory=str(tmp_path), hessian_structure="kron", **FAST).fit(X, y)
    for pa, pb in zip(a.net_.module_.parameters(), b.net_.module_.parameters()):
        assert torch.equal(pa, pb)
    c = LaplaceClassifier(memory=str(tmp_path), **{**FAST, "prior_precision": 3.0}).fit(X, y)
    assert not torch.equal(next(a.net_.module_.parameters()), next(c.net_.module_.parameters()))


def test_evidence_scorer_selects_by_training_evidence(iris):
    from sklaplace.metrics import evidence_scorer

    X, y = iris
    search = GridSearchCV(LaplaceClassifier(**FAST), {"hidden_layer_sizes": [(2,), (8,)]},
                          scoring=evidence_scorer, cv=2).fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)
    est = LaplaceClassifier(hyperparameter_tuning="evidence", **FAST).fit(X, y)
    assert evidence_scorer(est, X, y) == est.log_evidence_


@pytest.mark.parametrize("prior_structure", ["scalar", "layerwise"])
def test_online_tuning_records_history_and_moves_the_prior(iris, prior_structure):
    X, y = iris
    clf = LaplaceClassifier(hyperparameter_tuning="online", prior_structure=prior_structure,
                            online_frequency=10, online_steps=20, **FAST).fit(X, y)
    history = clf.evidence_history_
    assert [h["epoch"] for h in history] == [10, 20, 30]
    assert np.all(np.isfinite([h["log_evidence"] for h in history]))
    prior = np.atleast_1d(clf.prior_precision_)
    assert prior.shape == ((1,) if prior_structure == "scalar" else (4,))
    assert not np.allclose(prior, 1.0)
    # The training objective used the tuned prior: the criterion holds it.
    crit_prior = clf.net_.criterion_.prior_precision
    assert float(crit_prior.reshape(-1)[0]) == pytest.approx(float(prior[0]))
    assert clf.log_evidence_ == pytest.approx(clf.log_evidence())
    best = max(history, key=lambda h: h["log_evidence"])
    np.testing.assert_allclose(np.atleast_1d(clf.prior_precision_),
                               best["prior_precision"] if prior_structure == "layerwise"
                               else best["prior_precision"][:1])


def test_online_tuning_regression_tunes_sigma():
    X, y = make_regression(n_samples=80, n_features=3, noise=10.0, random_state=0)
    reg = LaplaceRegressor(hyperparameter_tuning="online", normalize_y=True,
                           online_frequency=10, online_steps=30, **FAST).fit(X, y)
    history = reg.evidence_history_
    sigmas = [h["sigma_noise"] for h in history]
    assert len(sigmas) == 3 and sigmas[-1] != pytest.approx(sigmas[0])
    # The state of the best update is restored, as in laplace-torch's marglik_training.
    best = max(history, key=lambda h: h["log_evidence"])
    assert reg.sigma_noise_ == pytest.approx(best["sigma_noise"])
    assert 1.0 < reg.sigma_noise_ < 3 * y.std()


def test_online_with_a_user_net(iris):
    X, y = iris

    class Module(nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))

        def forward(self, X):
            return self.seq(X)

    net = NeuralNetClassifier(Module, criterion=nn.CrossEntropyLoss, max_epochs=10,
                              optimizer=torch.optim.Adam, lr=0.03, batch_size=-1, verbose=0)
    clf = LaplaceClassifier(net, hyperparameter_tuning="online", online_frequency=5,
                            online_steps=10, random_state=0).fit(X.astype(np.float32), y)
    assert len(clf.evidence_history_) == 2
