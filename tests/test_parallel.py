"""Model selection across processes: loky (n_jobs=2) and dask.distributed."""

import joblib
import numpy as np
import pytest
from joblib.externals.loky import get_reusable_executor
from sklearn.datasets import load_iris
from sklearn.model_selection import GridSearchCV
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier

FAST = dict(hidden_layer_sizes=(5,), max_epochs=5, random_state=0)
GRID = {"prior_precision": [0.1, 10.0]}


@pytest.fixture(scope="module", autouse=True)
def stop_loky_workers():
    """Stop joblib's reusable worker processes here, not at interpreter exit (where a
    slow shutdown makes pytest-xdist interrupt its worker)."""
    yield
    get_reusable_executor().shutdown(wait=True)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    rows = np.r_[0:20, 50:70, 100:120]
    return StandardScaler().fit_transform(X[rows]), y[rows]


def _search(**kwargs):
    return GridSearchCV(LaplaceClassifier(hyperparameter_tuning=None, **FAST), GRID, cv=2,
                        scoring="neg_log_loss", **kwargs)


@pytest.fixture(scope="module")
def sequential(iris):
    return _search().fit(*iris)


def _same_results(search, reference):
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], rtol=1e-10)
    assert search.best_params_ == reference.best_params_
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def _predict(est, X):
    return est.predict_proba(X)


def test_grid_search_n_jobs_2(iris, sequential):
    search = _search(n_jobs=2).fit(*iris)
    _same_results(search, sequential)
    assert search.best_estimator_.prior_precision_ == search.best_params_["prior_precision"]
    # fitted estimators travel to worker processes and predict the same there
    est = search.best_estimator_
    remote = joblib.Parallel(n_jobs=2)(joblib.delayed(_predict)(est, iris[0]) for _ in range(2))
    for proba in remote:
        np.testing.assert_array_equal(proba, est.predict_proba(iris[0]))


def test_grid_search_with_dask(iris, sequential):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster), joblib.parallel_backend("dask"):
            search = _search().fit(*iris)
    _same_results(search, sequential)
