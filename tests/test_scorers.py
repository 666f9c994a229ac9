"""Scorers of probabilistic regression, by object in GridSearchCV(scoring=...)."""

import functools

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.linear_model import BayesianRidge, LinearRegression
from sklearn.model_selection import GridSearchCV, KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceRegressor
from sklaplace.metrics import (
    crps_gaussian,
    gaussian_nll,
    interval_coverage,
    neg_coverage_error_scorer,
    neg_crps_scorer,
    neg_gaussian_nll_scorer,
)

RNG = np.random.RandomState(0)
X = RNG.uniform(-2, 2, size=(80, 2))
Y = X @ np.array([1.5, -0.5]) + np.sin(2 * X[:, 0]) + 0.3 * RNG.standard_normal(80)
COVERAGE_90 = functools.partial(neg_coverage_error_scorer, confidence=0.9)
SCORERS = {"nll": neg_gaussian_nll_scorer, "crps": neg_crps_scorer,
           "coverage": neg_coverage_error_scorer, "coverage_90": COVERAGE_90}


def _reference(name, mean, std, y):
    if name == "nll":
        return -gaussian_nll(y, mean, std)
    if name == "crps":
        return -crps_gaussian(y, mean, std)
    confidence = 0.9 if name == "coverage_90" else 0.95
    return -abs(interval_coverage(y, mean, std, confidence=confidence)[0] - confidence)


def test_grid_search_fold_scores_are_the_metrics_of_the_held_out_fold():
    cv = KFold(3, shuffle=True, random_state=0)
    grid = {"alpha_1": [1e-6, 10.0]}
    search = GridSearchCV(BayesianRidge(), grid, scoring=SCORERS, refit="nll", cv=cv)
    search.fit(X, Y)
    for i, params in enumerate(search.cv_results_["params"]):
        for fold, (train, test) in enumerate(cv.split(X)):
            model = clone(BayesianRidge()).set_params(**params).fit(X[train], Y[train])
            mean, std = model.predict(X[test], return_std=True)
            for name in SCORERS:
                assert_allclose(search.cv_results_[f"split{fold}_test_{name}"][i],
                                _reference(name, mean, std, Y[test]), rtol=1e-12)


def test_pipelines_ending_in_a_laplace_regressor():
    pipe = make_pipeline(StandardScaler(), LaplaceRegressor(
        hidden_layer_sizes=(6,), max_epochs=20, lr=0.03, random_state=0,
        hyperparameter_tuning=None))
    search = GridSearchCV(pipe, {"laplaceregressor__prior_precision": [0.1, 10.0]},
                          scoring=SCORERS, refit="crps", cv=2).fit(X, Y)
    for name in SCORERS:
        assert np.all(np.isfinite(search.cv_results_[f"mean_test_{name}"]))
    best = search.best_estimator_
    mean, std = best.predict(X, return_std=True)
    for name, scorer in SCORERS.items():
        assert_allclose(scorer(best, X, Y), _reference(name, mean, std, Y), rtol=1e-12)
    weight = np.arange(80) % 3
    assert_allclose(neg_gaussian_nll_scorer(best, X, Y, sample_weight=weight),
                    -gaussian_nll(Y, mean, std, sample_weight=weight), rtol=1e-12)


def test_a_regressor_without_std_is_refused():
    model = LinearRegression().fit(X, Y)
    for scorer in SCORERS.values():
        with pytest.raises(ValueError, match="LinearRegression has no predict"):
            scorer(model, X, Y)
