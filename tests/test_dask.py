"""``fit`` and prediction on dask collections, on a 2-worker ``LocalCluster`` (processes).

The workers import this checkout (PYTHONPATH set before the cluster starts) and do not
share the client's ``torch.set_default_dtype``: a frozen float64 net's LA fitted on the
partitions equals the in-memory LA.
"""

import os
import pathlib
import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator

from sklaplace import LaplaceClassifier, LaplaceRegressor

da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")

ROOT = str(pathlib.Path(__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def client():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT if not old else ROOT + os.pathsep + old
    import dask

    try:
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
                distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                         dashboard_address=None,
                                         worker_dashboard_address=None) as cluster, \
                distributed.Client(cluster) as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _float64_net(estimator, X, y):
    """A net trained in float64 on the client (the workers keep torch's float32 default)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return estimator.fit(X, y).net_
    finally:
        torch.set_default_dtype(old)


@pytest.fixture(scope="module")
def three_classes():
    rng = np.random.RandomState(0)
    X = rng.randn(240, 4)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    net = _float64_net(LaplaceClassifier(hidden_layer_sizes=(6,), max_epochs=20,
                                         hyperparameter_tuning="evidence", random_state=0),
                       X, y)
    return X, y, net


CASES = [("all", s) for s in ("full", "diag", "kron", "lowrank")] + \
        [("last_layer", s) for s in ("full", "diag", "kron", "lowrank")] + \
        [("subnetwork", s) for s in ("full", "diag")]


@pytest.mark.parametrize("subset,structure", CASES)
def test_frozen_net_la_on_partitions_equals_in_memory(client, three_classes, subset, structure):
    X, y, net = three_classes
    params = dict(net=FrozenEstimator(net), subset_of_weights=subset,
                  hessian_structure=structure, random_state=0, lowrank_rank=5,
                  subnetwork=12 if subset == "subnetwork" else None)
    memory = LaplaceClassifier(**params).fit(X, y)
    Xd, yd = da.from_array(X, chunks=70), da.from_array(y, chunks=70)
    dist = LaplaceClassifier(**params).fit(Xd, yd)
    assert dist.hessian_structure_ == memory.hessian_structure_ == structure
    assert dist.log_evidence_ == pytest.approx(memory.log_evidence_, abs=1e-6)
    np.testing.assert_allclose(dist.prior_precision_, memory.prior_precision_, rtol=1e-6)
    assert dist.extrapolation_variance_ == memory.extrapolation_variance_
    proba = dist.predict_proba(Xd)
    assert isinstance(proba, da.Array)
    np.testing.assert_allclose(proba.compute(), memory.predict_proba(X), atol=1e-6, rtol=0)


def test_regressor_on_dataframes_equals_in_memory(client):
    rng = np.random.RandomState(1)
    X = pd.DataFrame(rng.randn(200, 3), columns=["a", "b", "c"])
    y = 2 * X["a"].to_numpy() + np.sin(X["b"].to_numpy()) + 0.1 * rng.randn(200)
    net = _float64_net(LaplaceRegressor(hidden_layer_sizes=(5,), max_epochs=20,
                                        hyperparameter_tuning="evidence", random_state=0), X, y)
    memory = LaplaceRegressor(net=FrozenEstimator(net), hessian_structure="kron").fit(X, y)
    Xd = dd.from_pandas(X, npartitions=3)
    yd = dd.from_pandas(pd.Series(y), npartitions=3)
    dist = LaplaceRegressor(net=FrozenEstimator(net), hessian_structure="kron").fit(Xd, yd)
    assert dist.log_evidence_ == pytest.approx(memory.log_evidence_, abs=1e-6)
    np.testing.assert_allclose(dist.sigma_noise_, memory.sigma_noise_, rtol=1e-6)
    np.testing.assert_array_equal(dist.feature_names_in_, memory.feature_names_in_)
    mean, std = dist.predict(Xd, return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    expected = memory.predict(X, return_std=True)
    np.testing.assert_allclose(mean.compute(), expected[0], atol=1e-6, rtol=0)
    np.testing.assert_allclose(std.compute(), expected[1], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="predict_dist"):
        dist.predict_dist(Xd)


def test_lazy_prediction_equals_in_memory(client, three_classes):
    X, y, net = three_classes
    fitted = LaplaceClassifier(net=FrozenEstimator(net), random_state=0).fit(X, y)
    Xd = da.from_array(X, chunks=50)
    for name in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        lazy = getattr(fitted, name)(Xd)
        assert isinstance(lazy, da.Array), name
        expected = getattr(fitted, name)(X)
        assert lazy.shape == expected.shape and lazy.dtype == expected.dtype
        np.testing.assert_allclose(lazy.compute(), expected, atol=1e-12, rtol=0)


def test_client_memory_does_not_hold_the_rows(client, three_classes):
    _, _, net = three_classes
    n = 300_000  # 9.6 MB of float64 X, generated on the workers
    X = da.random.RandomState(0).standard_normal((n, 4), chunks=(50_000, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
    estimator = LaplaceClassifier(net=FrozenEstimator(net), hessian_structure="diag",
                                  random_state=0)
    estimator.fit(X[:1000], y[:1000]).predict_proba(X[:1000]).sum().compute()  # imports
    tracemalloc.start()
    try:
        estimator.fit(X, y)
        total = float(estimator.predict_proba(X)[:, 0].sum().compute())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 0 < total < n
    # the scheduler of the LocalCluster runs in this process (about 1.7 MB of its
    # bookkeeping); a gather of X alone would take X.nbytes
    assert peak < X.nbytes / 3, f"the client's peak traced memory was {peak / 1e6:.1f} MB"


def test_unsupported_and_mismatched_inputs(client, three_classes):
    X, y, net = three_classes
    Xd = da.from_array(X, chunks=60)
    with pytest.raises(ValueError, match="partitioned alike"):
        LaplaceClassifier(net=FrozenEstimator(net)).fit(Xd, da.from_array(y, chunks=50))
    frame = dd.from_pandas(pd.DataFrame(X), npartitions=3)
    with pytest.raises(ValueError, match="partitioned alike"):
        LaplaceClassifier(net=FrozenEstimator(net)).fit(
            frame, dd.from_pandas(pd.Series(y), npartitions=4))
    with pytest.raises(ValueError, match="refine"):
        LaplaceClassifier(net=FrozenEstimator(net), refine="laplace").fit(
            Xd, da.from_array(y, chunks=60))
    with pytest.raises(ValueError, match="sample_weight"):
        LaplaceClassifier(net=FrozenEstimator(net)).fit(
            Xd, da.from_array(y, chunks=60), sample_weight=np.ones(len(y)))
    with pytest.raises(ValueError, match="multilabel"):
        LaplaceClassifier(net=FrozenEstimator(net)).fit(
            Xd, da.from_array(np.c_[y > 0, y > 1].astype(int), chunks=(60, 2)))
    with pytest.raises(ValueError, match="hyperparameter_tuning"):
        LaplaceClassifier(net=FrozenEstimator(net), hyperparameter_tuning="cv").fit(
            Xd, da.from_array(y, chunks=60))


def test_trained_fit_reaches_the_in_memory_held_out_nll(client):
    from sklearn.metrics import log_loss

    rng = np.random.RandomState(0)

    def rows(n):
        X = rng.randn(n, 5)
        logit = 2 * X[:, 0] - X[:, 1] + np.sin(2 * X[:, 2])
        return X, (logit + rng.logistic(size=n) > 0).astype(int)

    (X, y), (X_test, y_test) = rows(10_000), rows(4_000)
    params = dict(hidden_layer_sizes=(8,), max_epochs=30, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        memory = LaplaceClassifier(solver="lbfgs", hyperparameter_tuning="evidence",
                                   **params).fit(X, y)
        dist = LaplaceClassifier(**params).fit(da.from_array(X, chunks=2_500),
                                               da.from_array(y, chunks=2_500))
    assert dist.hyperparameter_tuning_ == "evidence"
    assert abs(dist.n_iter_ - memory.n_iter_) <= 5
    nll = log_loss(y_test, dist.predict_proba(X_test))
    assert abs(nll - log_loss(y_test, memory.predict_proba(X_test))) < 0.02


def test_trained_regressor_default_configuration(client):
    rng = np.random.RandomState(2)
    X = rng.randn(1_000, 3)
    y = 3 * X[:, 0] + np.sin(X[:, 1]) + 0.3 * rng.randn(1_000) + 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        memory = LaplaceRegressor(solver="lbfgs", hyperparameter_tuning="evidence",
                                  hidden_layer_sizes=(10,), max_epochs=40, random_state=0).fit(X, y)
        dist = LaplaceRegressor(hidden_layer_sizes=(10,), max_epochs=40, random_state=0).fit(
            da.from_array(X, chunks=500), da.from_array(y, chunks=500))
    assert dist.sigma_noise_ == pytest.approx(memory.sigma_noise_, rel=0.05)
    mean = dist.predict(da.from_array(X, chunks=500)).compute()
    np.testing.assert_allclose(mean, memory.predict(X), atol=0.05)
    with pytest.raises(ValueError, match="lr"):
        LaplaceRegressor(lr=0.1).fit(da.from_array(X, chunks=500), da.from_array(y, chunks=500))


def _exit_on_worker(block):
    try:
        distributed.get_worker()
    except ValueError:
        return block
    os._exit(1)


def test_lost_workers_leave_the_estimator_unchanged(client, three_classes):
    X, y, net = three_classes
    estimator = LaplaceClassifier(net=FrozenEstimator(net), random_state=0).fit(X, y)
    before = dict(estimator.__dict__)
    Xd = da.from_array(X, chunks=60).map_blocks(_exit_on_worker, dtype=X.dtype)
    with pytest.raises(RuntimeError, match="Workers were lost"):
        estimator.fit(Xd, da.from_array(y, chunks=60))
    assert estimator.__dict__.keys() == before.keys()
    assert all(estimator.__dict__[k] is v for k, v in before.items())


def test_import_does_not_import_dask():
    import subprocess
    import sys

    code = ("import sys, sklaplace; "
            "print(any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert out.stdout.strip() == "False"
