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
from sklaplace.estimators import _base
from sklaplace.estimators._dask_holdout import global_split, partition_rows

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
    with pytest.raises(ValueError, match="hyperparameter_tuning='cv'"):
        LaplaceRegressor(hyperparameter_tuning="cv").fit(Xd, da.from_array(X[:, 0], chunks=60))


def _text_column(X):
    """X as a DataFrame whose column "b" holds its numbers as strings (object dtype)."""
    frame = pd.DataFrame(X, columns=list("abcd"))
    frame["b"] = pd.Series([repr(float(v)) for v in X[:, 1]], dtype=object)
    return frame


def test_partitions_are_converted_as_in_memory(client, three_classes):
    """scikit-learn's conversions of the in-memory fit, on each partition where it is
    read: numeric strings, in a DataFrame or an object array, fit as the numbers."""
    X, y, net = three_classes
    frame = _text_column(X)
    params = dict(net=FrozenEstimator(net), random_state=0)
    memory = LaplaceClassifier(**params).fit(frame, y)
    yd = dd.from_pandas(pd.Series(y), npartitions=4)
    inputs = [(dd.from_pandas(frame, npartitions=4), yd),
              (da.from_array(frame.to_numpy(dtype=object), chunks=(70, 4)),
               da.from_array(y, chunks=70))]
    for Xd, target in inputs:
        dist = LaplaceClassifier(**params).fit(Xd, target)
        assert dist.log_evidence_ == pytest.approx(memory.log_evidence_, abs=1e-6)
        np.testing.assert_allclose(dist.predict_proba(Xd).compute(),
                                   memory.predict_proba(frame), atol=1e-6, rtol=0)
        assert (getattr(dist, "feature_names_in_", None) is None) == (not hasattr(Xd, "columns"))
    np.testing.assert_array_equal(
        LaplaceClassifier(**params).fit(*inputs[0]).feature_names_in_, memory.feature_names_in_)
    # integer column names are not feature names, in memory and on partitions alike
    assert not hasattr(LaplaceClassifier(**params).fit(pd.DataFrame(X), y), "feature_names_in_")
    assert not hasattr(LaplaceClassifier(**params).fit(
        dd.from_pandas(pd.DataFrame(X), npartitions=4), yd), "feature_names_in_")


def _invalid(case, X, y):
    """(estimator, X, y) of a fit that the in-memory checks refuse."""
    # a copy: under pandas 2 without copy-on-write the frame is a view, and the NaN case
    # would write into the shared fixture
    frame = pd.DataFrame(X.copy(), columns=list("abcd"))
    if case == "category":
        frame["b"] = np.where(X[:, 1] > 0, "red", "blue").astype(object)
    elif case == "nan":
        frame.iloc[200, 2] = np.nan  # in the last partition
    elif case == "labels":
        return LaplaceClassifier, frame, X[:, 0]
    elif case == "targets":
        return LaplaceRegressor, frame, np.where(X[:, 0] > 0, "high", "low").astype(object)
    return LaplaceClassifier, frame, y


@pytest.mark.parametrize("case", ["category", "nan", "labels", "targets"])
def test_invalid_partitions_raise_the_in_memory_errors(client, three_classes, case):
    X, y, _ = three_classes
    cls, frame, target = _invalid(case, X, y)
    params = dict(max_epochs=1, hyperparameter_tuning="evidence")
    with pytest.raises(ValueError) as memory:
        cls(**params).fit(frame, target)
    with pytest.raises(ValueError) as dist:
        cls(**params).fit(dd.from_pandas(frame, npartitions=4),
                          dd.from_pandas(pd.Series(target), npartitions=4))
    assert str(dist.value) == str(memory.value)
    if case == "category":
        assert "OneHotEncoder" in str(dist.value)


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
        memory = LaplaceClassifier(solver="lbfgs", **params).fit(X, y)
        dist = LaplaceClassifier(**params).fit(da.from_array(X, chunks=2_500),
                                               da.from_array(y, chunks=2_500))
    assert dist.hyperparameter_tuning_ == memory.hyperparameter_tuning_ == "cv"
    assert dist.validation_nll_ == pytest.approx(memory.validation_nll_, abs=0.02)
    assert abs(dist.n_iter_ - memory.n_iter_) <= 5
    nll = log_loss(y_test, dist.predict_proba(X_test))
    assert abs(nll - log_loss(y_test, memory.predict_proba(X_test))) < 0.02


def test_trained_regressor_default_configuration(client):
    rng = np.random.RandomState(2)
    X = rng.randn(1_000, 3)
    y = 3 * X[:, 0] + np.sin(X[:, 1]) + 0.3 * rng.randn(1_000) + 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        memory = LaplaceRegressor(solver="lbfgs", hidden_layer_sizes=(10,), max_epochs=40,
                                  random_state=0).fit(X, y)
        dist = LaplaceRegressor(hidden_layer_sizes=(10,), max_epochs=40, random_state=0).fit(
            da.from_array(X, chunks=500), da.from_array(y, chunks=500))
    # "online": the evidence's δ and σ updated during training, from sums over the partitions
    assert dist.hyperparameter_tuning_ == memory.hyperparameter_tuning_ == "online"
    assert [h["epoch"] for h in dist.evidence_history_] == \
        [h["epoch"] for h in memory.evidence_history_]
    np.testing.assert_allclose(dist.prior_precision_, memory.prior_precision_, rtol=0.05)
    assert dist.sigma_noise_ == pytest.approx(memory.sigma_noise_, rel=0.05)
    mean = dist.predict(da.from_array(X, chunks=500)).compute()
    np.testing.assert_allclose(mean, memory.predict(X), atol=0.05)
    with pytest.raises(ValueError, match="lr"):
        LaplaceRegressor(lr=0.1).fit(da.from_array(X, chunks=500), da.from_array(y, chunks=500))


_SAME_SEED_FIT = """
import sys, warnings
import numpy as np
import dask.array as da
from sklaplace import LaplaceClassifier

rng = np.random.RandomState(3)
X = rng.randn(2_000, 5)
logit = 2 * X[:, 0] - X[:, 1] + np.sin(2 * X[:, 2])
y = (logit + rng.logistic(size=len(X)) > 0).astype(int)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    fitted = LaplaceClassifier(hidden_layer_sizes=(50,), max_epochs=8, random_state=0).fit(
        da.from_array(X, chunks=1_000), da.from_array(y, chunks=1_000))
assert fitted.hyperparameter_tuning_ == "cv"  # the held-out rows' sums too
proba = fitted.predict_proba(X)
"""


def test_same_seed_gives_the_same_fit_bitwise_on_any_scheduler(client, tmp_path):
    """The same seed: bitwise the same probabilities over repeated fits on the 2 worker
    processes (one torch thread each) and on dask's local threaded scheduler in a
    process of 2 torch threads, whose tasks run in its threads. Partitions of 1,000
    rows: a matrix product of that size adds in another order on 2 threads than on 1."""
    import runpy
    import subprocess
    import sys

    script = tmp_path / "fit.py"
    script.write_text(_SAME_SEED_FIT)
    on_workers = [runpy.run_path(str(script))["proba"] for _ in range(2)]
    np.testing.assert_array_equal(on_workers[1], on_workers[0])
    local = tmp_path / "local.npy"
    script.write_text(_SAME_SEED_FIT + f"np.save({str(local)!r}, proba)\n")
    env = {k: v for k, v in os.environ.items() if k != "MKL_NUM_THREADS"}
    subprocess.run([sys.executable, str(script)], check=True,
                   env={**env, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "2"})
    np.testing.assert_array_equal(np.load(local), on_workers[0])


def test_a_local_scheduler_set_in_the_config_runs_beside_a_client(client, three_classes):
    """``dask.config.set(scheduler=...)`` runs the fit on that scheduler, as it does
    ``dask.compute``, while a client is the default; the same numbers."""
    import dask

    X, y, net = three_classes
    Xd, yd = da.from_array(X, chunks=70), da.from_array(y, chunks=70)
    params = dict(net=FrozenEstimator(net), hessian_structure="kron", random_state=0)
    on_workers = LaplaceClassifier(**params).fit(Xd, yd)
    with dask.config.set(scheduler="sync"):
        local = LaplaceClassifier(**params).fit(Xd, yd)
        proba = local.predict_proba(Xd).compute()
    assert local.log_evidence_ == on_workers.log_evidence_
    # the local scheduler computes the partitions in this process, whose torch may run MKL
    # kernels on more threads than the workers' one: equal up to rounding, not bitwise
    np.testing.assert_allclose(proba, on_workers.predict_proba(Xd).compute(), rtol=1e-12,
                               atol=1e-15)


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


def test_partition_masks_hold_out_each_partitions_share():
    y = np.arange(102) % 3
    fit, held = global_split([50, 50, 2], 0.2, 7, labels=y)
    assert len(held) == 10 + 10 + 0  # ⌈0.2·50⌉ per partition; 2 rows are too few to split
    assert np.array_equal(np.sort(np.r_[fit, held]), np.arange(102))
    np.testing.assert_array_equal(partition_rows(50, 0.2, 7, 1, y[50:100])[1] + 50, held[10:])
    assert not np.array_equal(partition_rows(50, 0.2, 8, 1)[1], partition_rows(50, 0.2, 7, 1)[1])


def test_held_out_delta_on_partitions_equals_in_memory(client, three_classes, monkeypatch):
    """The same mask in memory (the in-memory split replaced by the partitions' masks):
    the held-out δ, its NLL and the refit's predictions agree."""
    X, y, net = three_classes
    chunks = 70
    sizes = [len(X[i:i + chunks]) for i in range(0, len(X), chunks)]
    params = dict(net=FrozenEstimator(net), hyperparameter_tuning="cv", random_state=0)
    dist = LaplaceClassifier(**params)
    with pytest.warns(UserWarning, match="FrozenEstimator"):
        dist.fit(da.from_array(X, chunks=chunks), da.from_array(y, chunks=chunks))
    monkeypatch.setattr(_base, "validation_split", lambda n, fraction, seed, labels=None:
                        global_split(sizes, fraction, seed, labels))
    with pytest.warns(UserWarning, match="FrozenEstimator"):
        memory = LaplaceClassifier(**params).fit(X, y)
    assert dist.hyperparameter_tuning_ == memory.hyperparameter_tuning_ == "cv"
    assert dist.prior_precision_ == pytest.approx(memory.prior_precision_, rel=1e-6)
    assert dist.validation_nll_ == pytest.approx(memory.validation_nll_, abs=1e-6)
    assert dist.log_evidence_ == pytest.approx(memory.log_evidence_, abs=1e-6)
    assert dist.extrapolation_variance_ == pytest.approx(memory.extrapolation_variance_,
                                                         rel=1e-6)
    np.testing.assert_allclose(dist.predict_proba(X), memory.predict_proba(X), atol=1e-6)


def _synthetic_rows(rng, n):
    X = rng.randn(n, 5)
    logit = 2 * X[:, 0] - X[:, 1] + np.sin(2 * X[:, 2])
    return X, (logit + rng.logistic(size=n) > 0).astype(int)


def test_default_classifier_on_partitions_reaches_the_in_memory_default(client):
    """The default configuration (max_epochs=30 on both sides, to keep the test short):
    the architecture chosen on held-out rows of the partitions, δ by their held-out NLL;
    a test NLL within 0.02 of the in-memory fit's."""
    from sklearn.metrics import log_loss

    rng = np.random.RandomState(0)
    (X, y), (X_test, y_test) = _synthetic_rows(rng, 2_000), _synthetic_rows(rng, 4_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        memory = LaplaceClassifier(max_epochs=30, random_state=0).fit(X, y)
        dist = LaplaceClassifier(max_epochs=30, random_state=0).fit(
            da.from_array(X, chunks=500), da.from_array(y, chunks=500))
    assert dist.hyperparameter_tuning_ == "cv"
    results = dist.model_selection_results_
    assert results.keys() == memory.model_selection_results_.keys()
    assert results["hidden_layer_sizes"] == [(), (50,), (50, 50)]
    assert dist.hidden_layer_sizes_ == results["hidden_layer_sizes"][np.argmin(results["rank"])]
    assert dist.validation_nll_ == pytest.approx(np.nanmin(results["held_out_nll"]), abs=1e-12)
    nll = log_loss(y_test, dist.predict_proba(X_test))
    assert abs(nll - log_loss(y_test, memory.predict_proba(X_test))) < 0.02


def test_logistic_truth_picks_the_linear_model_on_partitions(client):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(400, 8))
    p = 1 / (1 + np.exp(-(X[:, :3] @ np.array([1.5, -1.0, 0.5]))))
    y = (rng.uniform(size=400) < p).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dist = LaplaceClassifier(max_epochs=20, random_state=0).fit(
            da.from_array(X, chunks=200), da.from_array(y, chunks=200))
    results = dist.model_selection_results_
    assert dist.hidden_layer_sizes_ == ()
    assert [p.shape for p in dist.net_.module_.parameters()] == [(1, 8), (1,)]
    assert np.isnan(results["held_out_nll"][2])  # (50,) did not improve: (50, 50) not fitted


def test_default_regressor_on_partitions_picks_the_linear_model(client):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(400, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=400) + 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        dist = LaplaceRegressor(max_epochs=20, random_state=0).fit(
            da.from_array(X, chunks=200), da.from_array(y, chunks=200))
    assert dist.hidden_layer_sizes_ == ()
    assert dist.hyperparameter_tuning_ == "online"
    assert dist.model_selection_results_["criterion"][0] == "held_out_nll"
    assert dist.sigma_noise_ == pytest.approx(0.3, rel=0.2)


def test_default_fit_does_not_gather_the_rows(client, monkeypatch):
    """The defaults (held-out masks, "cv", the architecture's candidates) on rows
    generated on the workers: every result a computation brings to the client is a sum
    (at most a P × P matrix), far below the rows (a gather of the held-out fifth alone
    would exceed X.nbytes / 5)."""
    import pickle

    from sklaplace.estimators import _dask, _dask_fit, _dask_holdout, _dask_train

    sizes = []

    def measured(*collections):
        out = _dask.compute(*collections)
        sizes.append(len(pickle.dumps(out)))
        return out

    for module in (_dask_fit, _dask_holdout, _dask_train):
        monkeypatch.setattr(module, "compute", measured)
    n = 400_000  # 6.4 MB of float64 X; the largest sum: the (50,) net's 201 × 201 curvature
    X = da.random.RandomState(1).standard_normal((n, 2), chunks=(100_000, 2))
    y = (X[:, 0] - X[:, 1] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        estimator = LaplaceClassifier(max_epochs=1, random_state=0).fit(X, y)
    assert estimator.hyperparameter_tuning_ == "cv"
    assert len(estimator.model_selection_results_["hidden_layer_sizes"]) == 3
    assert len(sizes) > 10 and max(sizes) < X.nbytes / 10, max(sizes)
