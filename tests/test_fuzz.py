"""Property-based fuzz over the estimators' public parameters (hypothesis).

Every combination of parameter values (valid ones, and invalid ones among them) on small
data either fits and predicts sane numbers — finite; single-label probabilities summing to
one, multilabel ones in [0, 1]; positive standard deviations; a finite evidence — or raises a
``ValueError``/``TypeError`` naming a parameter, or the memory guard's ``MemoryError``.
Warnings are allowed; nothing else, no NaN, no hang. The examples are derandomized (the same
on every run) and bounded in number and time.
"""

import os
import re
import signal
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sklaplace import LaplaceClassifier, LaplaceRegressor

#: Seconds one example may take before it counts as a hang.
HANG_SECONDS = 120

#: ``SKLAPLACE_FUZZ_EXAMPLES=500`` explores further (random, not derandomized examples).
_EXPLORE = int(os.environ.get("SKLAPLACE_FUZZ_EXAMPLES", 0))
SETTINGS = settings(max_examples=_EXPLORE or 12, deadline=None, derandomize=not _EXPLORE,
                    database=None, suppress_health_check=list(HealthCheck))

BAD_NUMBERS = [0, -1, float("nan"), float("inf")]

COMMON = {
    "hidden_layer_sizes": [(3,), (2, 2), (), (0,), (-1,), 3, "3"],
    "max_epochs": [1, 3, 0],
    "lr": [1e-2, 0.1, 3.0, *BAD_NUMBERS],
    "batch_size": [5, 128, 0],
    "tol": [None, 1e-4, 0.0, -1.0],
    "n_iter_no_change": [1, 4, 0],
    "solver": ["adam", "lbfgs", "sgd"],
    "prior_precision": [1.0, 1e-3, 1e3, *BAD_NUMBERS, [1.0, 2.0], "x"],
    "prior_structure": ["scalar", "layerwise", "diag", "none"],
    "hyperparameter_tuning": ["auto", "evidence", "online", "cv", None, "grid"],
    "validation_fraction": [0.2, 0.5, 0.0, 1.0],
    "subset_of_weights": ["auto", "all", "last_layer", "subnetwork", "first"],
    "hessian_structure": ["auto", "full", "diag", "kron", "lowrank", "dense"],
    "subnetwork": [None, 1, 4, 10**6, 0, [0, 1]],
    "lowrank_rank": [None, 1, 3, 0],
    "curvature": ["ggn", "ef", "fisher"],
    "pred_type": ["glm", "nn", "gp", "map"],
    "gp_subset_size": [None, 4, 0],
    "n_samples": [1, 10, 0],
    "extrapolation_variance": ["auto", 0.0, 2.0, None, -1.0],
    "temperature": [1.0, 0.3, 10.0, *BAD_NUMBERS],
    "refine": [None, "laplace", "vi", "glm"],
    "online_frequency": [1, 5, 0],
    "online_burn_in": [0, 1, -1],
    "online_steps": [None, 1, 0],
    "online_lr": [0.1, 0.0],
}
CLASSIFIER = {**COMMON, "link_approx": ["probit", "bridge", "mc", "exact"],
              "class_weight": [None, "balanced", {0: 2.0}, "x"]}
REGRESSOR = {**COMMON, "sigma_noise": [1.0, 0.1, [1.0, 2.0], *BAD_NUMBERS],
             "normalize_y": [True, False]}


def _params(space):
    """Parameter dicts: each parameter left at its default or set to one of its values (a
    few at a time, so that most draws reach the fit)."""
    return st.dictionaries(st.sampled_from(sorted(space)), st.none(), max_size=5).flatmap(
        lambda chosen: st.fixed_dictionaries(
            {name: st.sampled_from(space[name]) for name in chosen}))


def _timeout(signum, frame):
    raise TimeoutError(f"one fuzz example ran over {HANG_SECONDS} s")


def _fit_or_refuse(est, X, y, params):
    """Fit; a refusal must be a ValueError/TypeError naming a parameter, or a MemoryError.
    Returns the fitted estimator or None."""
    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(HANG_SECONDS)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return est.fit(X, y)
    except MemoryError:
        return None
    except (ValueError, TypeError) as error:
        names = list(est.get_params()) + ["X", "y", "sample_weight"]
        assert any(re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", str(error))
                   for name in names), (
            f"{type(error).__name__} names no parameter: {error}; params {params}")
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _data(draw_seed, n_rows, n_features):
    rng = np.random.default_rng(draw_seed)
    X = rng.normal(size=(n_rows, n_features))
    return X, rng


BASE = dict(hidden_layer_sizes=(3,), max_epochs=3, n_samples=20, random_state=0)


@SETTINGS
@given(params=_params(CLASSIFIER), seed=st.integers(0, 2**16), n_rows=st.integers(12, 30),
       n_features=st.integers(1, 3), n_classes=st.sampled_from([2, 3, "multilabel"]))
def test_classifier_fits_sanely_or_refuses(params, seed, n_rows, n_features, n_classes):
    X, rng = _data(seed, n_rows, n_features)
    if n_classes == "multilabel":
        y = np.c_[X[:, 0] > 0, rng.random(n_rows) > 0.5].astype(int)
        y[:2] = [[0, 1], [1, 0]]
    else:
        y = np.arange(n_rows) % n_classes
        rng.shuffle(y)
    est = _fit_or_refuse(LaplaceClassifier(**{**BASE, **params}), X, y, params)
    if est is None:
        return
    proba = est.predict_proba(X)
    assert np.all(np.isfinite(proba)) and np.all((proba >= 0) & (proba <= 1)), params
    if n_classes != "multilabel":
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-9)
    assert np.isfinite(est.log_evidence_), params
    assert est.predict(X).shape[0] == n_rows


@SETTINGS
@given(params=_params(REGRESSOR), seed=st.integers(0, 2**16), n_rows=st.integers(12, 30),
       n_features=st.integers(1, 3), n_outputs=st.sampled_from([1, 2]),
       y_scale=st.sampled_from([1.0, 1e-3, 1e4]))
def test_regressor_fits_sanely_or_refuses(params, seed, n_rows, n_features, n_outputs, y_scale):
    X, rng = _data(seed, n_rows, n_features)
    y = y_scale * (np.sin(X[:, :1] * np.arange(1, n_outputs + 1)) + 0.1 * rng.normal(
        size=(n_rows, n_outputs)))
    y = y.ravel() if n_outputs == 1 else y
    est = _fit_or_refuse(LaplaceRegressor(**{**BASE, **params}), X, y, params)
    if est is None:
        return
    mean, std = est.predict(X, return_std=True)
    assert np.all(np.isfinite(mean)) and mean.shape == y.shape, params
    assert np.all(np.isfinite(std)) and np.all(std > 0), params
    assert np.isfinite(est.log_evidence_), params


@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_the_fuzz_reaches_fits(Estimator):
    """The spaces' defaults fit (the fuzz does not only collect refusals)."""
    X, rng = _data(0, 20, 2)
    y = np.arange(20) % 2 if Estimator is LaplaceClassifier else X[:, 0]
    assert _fit_or_refuse(Estimator(**BASE), X, y, {}) is not None
