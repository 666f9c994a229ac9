"""Behaviour of the estimators inside scikit-learn workflows."""

import numpy as np
import pandas as pd
import pytest
import torch
from skorch import NeuralNetClassifier
from sklearn.base import clone
from sklearn.datasets import load_iris, make_classification, make_regression
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor

FAST = dict(hidden_layer_sizes=(8,), max_epochs=60, lr=0.03, random_state=0)


class MLPModule(nn.Module):
    def __init__(self, n_features=4, n_outputs=3):
        super().__init__()
        self.hidden = nn.Linear(n_features, 8)
        self.out = nn.Linear(8, n_outputs)

    def forward(self, X):
        return self.out(torch.tanh(self.hidden(X)))


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def test_pipeline_and_string_labels(iris):
    X, y = iris
    labels = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = make_pipeline(StandardScaler(), LaplaceClassifier(**FAST)).fit(X, labels)
    assert set(clf.predict(X)) <= set(labels)
    np.testing.assert_array_equal(clf[-1].classes_, np.unique(labels))
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1)
    assert clf.score(X, labels) > 0.8


def test_grid_search_over_prior_precision(iris):
    X, y = iris
    search = GridSearchCV(
        LaplaceClassifier(hyperparameter_tuning=None, **FAST),
        {"prior_precision": [0.1, 1.0, 10.0]}, scoring="neg_log_loss", cv=2,
    ).fit(X, y)
    # the search's scores are those of independent cross-validations of each candidate
    # (clones are deterministic), and it picks their argmax
    grid = [0.1, 1.0, 10.0]
    manual = [cross_val_score(LaplaceClassifier(hyperparameter_tuning=None, prior_precision=d,
                                                **FAST), X, y, scoring="neg_log_loss", cv=2).mean()
              for d in grid]
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], manual, rtol=1e-10)
    assert search.best_params_["prior_precision"] == grid[int(np.argmax(manual))]
    assert search.best_estimator_.prior_precision_ == search.best_params_["prior_precision"]


def test_pandas_keeps_feature_names(iris):
    X, y = iris
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    clf = LaplaceClassifier(**FAST).fit(df, y)
    np.testing.assert_array_equal(clf.feature_names_in_, ["a", "b", "c", "d"])
    np.testing.assert_allclose(clf.predict_proba(df), clf.predict_proba(X))
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(df.rename(columns={"a": "z"}))


def test_binary_uses_one_logit_and_decision_function_is_log_odds():
    X, y = make_classification(n_samples=80, n_features=4, random_state=0)
    clf = LaplaceClassifier(**FAST).fit(X, y)
    assert clf.net_.module_.layers[-1].out_features == 1
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(clf.decision_function(X), np.log(proba[:, 1] / proba[:, 0]))
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[(clf.decision_function(X) > 0) * 1])


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("subset", ["last_layer", "all"])
def test_predict_proba_equals_predict_dist_proba(iris, binary, subset):
    """predict_proba's probit shortcut gives predict_dist(X).proba() to the last bit."""
    X, y = iris
    if binary:
        X, y = make_classification(n_samples=80, n_features=4, random_state=0)
    for link in ("probit", "bridge"):
        clf = LaplaceClassifier(link_approx=link, subset_of_weights=subset,
                                hessian_structure="kron", **FAST).fit(X, y)
        np.testing.assert_array_equal(clf.predict_proba(X), clf.predict_dist(X).proba())


def test_predictions_are_deterministic(iris):
    X, y = iris
    for link in ("probit", "bridge", "mc"):
        clf = LaplaceClassifier(link_approx=link, n_samples=30, **FAST).fit(X, y)
        np.testing.assert_array_equal(clf.predict_proba(X), clf.predict_proba(X))
        np.testing.assert_allclose(clf.predict_proba(X[:7]), clf.predict_proba(X)[:7], atol=1e-12)
    again = LaplaceClassifier(link_approx="mc", n_samples=30, **FAST).fit(X, y)
    np.testing.assert_array_equal(again.predict_proba(X), clf.predict_proba(X))


def test_user_skorch_net_is_copied_and_trained(iris):
    X, y = iris
    net = NeuralNetClassifier(MLPModule, criterion=nn.CrossEntropyLoss, max_epochs=60,
                              optimizer=torch.optim.Adam, lr=0.05, batch_size=-1, verbose=0)
    clf = LaplaceClassifier(net, random_state=0).fit(X.astype(np.float32), y)
    assert not hasattr(net, "module_")  # self.net is not mutated
    assert clf.net_.module_ is not None and clf.score(X, y) > 0.6
    assert clf.n_params_ == 4 * 8 + 8 + 8 * 3 + 3


def test_frozen_net_keeps_weights_and_survives_clone(iris):
    X, y = iris
    net = NeuralNetClassifier(MLPModule, criterion=nn.CrossEntropyLoss, max_epochs=5,
                              lr=0.05, batch_size=-1, train_split=None)
    net.fit(X.astype(np.float32), y)
    before = {k: v.clone() for k, v in net.module_.state_dict().items()}
    clf = LaplaceClassifier(FrozenEstimator(net)).fit(X, y)
    for k, v in net.module_.state_dict().items():
        assert torch.equal(before[k], v)
    assert clf.net_ is net
    cloned = clone(LaplaceClassifier(FrozenEstimator(net)))
    assert cloned.net.estimator is net
    GridSearchCV(LaplaceClassifier(FrozenEstimator(net), hyperparameter_tuning=None),
                 {"prior_precision": [1.0, 10.0]}, cv=2).fit(X, y)


def test_uninitialized_frozen_net_errors(iris):
    X, y = iris
    net = NeuralNetClassifier(MLPModule, criterion=nn.CrossEntropyLoss)
    with pytest.raises(ValueError, match="initialized"):
        LaplaceClassifier(FrozenEstimator(net)).fit(X, y)


@pytest.mark.parametrize(
    "net, match",
    [
        (NeuralNetClassifier(MLPModule), "criterion"),  # skorch's default NLLLoss
        (NeuralNetClassifier(MLPModule, criterion=nn.CrossEntropyLoss,
                             optimizer__weight_decay=1e-3), "weight_decay"),
        (NeuralNetClassifier(MLPModule, criterion=nn.CrossEntropyLoss,
                             optimizer=torch.optim.AdamW), "weight_decay"),
    ],
)
def test_bad_nets_are_refused(iris, net, match):
    X, y = iris
    with pytest.raises(ValueError, match=match):
        LaplaceClassifier(net).fit(X, y)


def test_regressor_multi_output_and_normalize_y():
    X, Y = make_regression(n_samples=60, n_features=3, n_targets=2, noise=5.0, random_state=0)
    Y = Y * [1.0, 100.0] + [0.0, 1000.0]
    reg = LaplaceRegressor(normalize_y=True, **FAST).fit(X, Y)
    mean, std = reg.predict(X, return_std=True)
    assert mean.shape == std.shape == (60, 2)
    assert np.all(std > 0)
    assert abs(mean[:, 1].mean() - Y[:, 1].mean()) < 0.2 * Y[:, 1].std()
    dist = reg.predict_dist(X)
    np.testing.assert_allclose(dist.std, std)
    assert reg.sample_functions(X[:5], n_samples=3, random_state=0).shape == (3, 5, 2)


def test_normalize_y_reports_evidence_in_original_units():
    X, y = make_regression(n_samples=50, n_features=3, noise=1.0, random_state=0)
    params = dict(hyperparameter_tuning=None, normalize_y=True, **FAST)
    # sigma_noise is in units of the standardized target: the same model for y and 10·y.
    a = LaplaceRegressor(sigma_noise=0.2, **params).fit(X, y)
    b = LaplaceRegressor(sigma_noise=0.2, **params).fit(X, y * 10)
    # log p(y) changes by −N log 10; sigma_noise_ is reported in the units of y.
    assert b.log_evidence_ == pytest.approx(a.log_evidence_ - len(y) * np.log(10), rel=1e-6)
    assert a.sigma_noise_ == pytest.approx(0.2 * y.std())
    assert b.sigma_noise_ == pytest.approx(2.0 * y.std())
    np.testing.assert_allclose(b.predict(X), 10 * a.predict(X), rtol=1e-6)


def test_unfitted_raises():
    for est in (LaplaceClassifier(), LaplaceRegressor()):
        with pytest.raises(NotFittedError):
            est.predict(np.zeros((2, 2)))
        with pytest.raises(NotFittedError):
            est.log_evidence()


@pytest.mark.parametrize(
    "params, match",
    [
        ({"hessian_structure": "banded"}, "hessian_structure"),
        ({"subset_of_weights": "first_layer"}, "subset_of_weights"),
        ({"link_approx": "logit"}, "link_approx"),
        ({"prior_precision": -1.0}, "prior_precision"),
        ({"prior_precision": [1.0, 2.0]}, "prior_precision"),
        ({"temperature": 0}, "temperature"),
        ({"subset_of_weights": "subnetwork"}, "subnetwork"),
        ({"subset_of_weights": "subnetwork", "subnetwork": 3, "hessian_structure": "kron"},
         "subnetwork"),
        ({"hyperparameter_tuning": "online", "subset_of_weights": "last_layer"},
         "subset_of_weights"),
        ({"curvature": "hessian"}, "curvature"),
        ({"pred_type": "bnn"}, "pred_type"),
    ],
)
def test_bad_parameters(iris, params, match):
    X, y = iris
    with pytest.raises(ValueError, match=match):
        LaplaceClassifier(**{**FAST, **params}).fit(X, y)


def test_one_class_and_nan_errors(iris):
    X, y = iris
    with pytest.raises(ValueError, match="class"):
        LaplaceClassifier(**FAST).fit(X, np.zeros(len(X)))
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        LaplaceClassifier(**FAST).fit(X_nan, y)
    with pytest.raises(ValueError, match="sigma_noise"):
        LaplaceRegressor(sigma_noise=-1, **FAST).fit(X, y.astype(float))


def test_prior_precision_per_group_and_per_parameter(iris):
    X, y = iris
    n_groups = 4  # weight and bias of two layers
    clf = LaplaceClassifier(prior_precision=np.ones(n_groups), prior_structure="layerwise",
                            **FAST).fit(X, y)
    assert clf.prior_precision_.shape == (n_groups,)
    n_params = 4 * 8 + 8 + 8 * 3 + 3
    assert clf.log_evidence(prior_precision=np.full(n_params, 2.0)) == pytest.approx(
        clf.log_evidence(prior_precision=2.0)
    )


@pytest.mark.parametrize("subset,structure", [("all", "kron"), ("last_layer", "diag"),
                                              ("all", "lowrank"), ("subnetwork", "full")])
def test_structures_predict(iris, subset, structure):
    X, y = iris
    clf = LaplaceClassifier(subset_of_weights=subset, hessian_structure=structure,
                            subnetwork=20, **FAST).fit(X, y)
    assert clf.subset_of_weights_ == subset and clf.hessian_structure_ == structure
    np.testing.assert_allclose(clf.predict_proba(X).sum(1), 1)
    assert np.isfinite(clf.log_evidence_)
