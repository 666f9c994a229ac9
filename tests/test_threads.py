"""Fits in threads: the process's thread settings and random_state."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from joblib import parallel_backend
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_info, threadpool_limits

from sklaplace import LaplaceClassifier

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    rows = np.r_[0:20, 50:70, 100:120]
    return StandardScaler().fit_transform(X[rows]).astype(np.float32), y[rows]


def _settings():
    """The calling thread's torch threads and every pool threadpoolctl sees."""
    return torch.get_num_threads(), [(i["filepath"], i["num_threads"]) for i in threadpool_info()]


def _blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def _in_a_clean_process(code):
    """Run ``code`` in a new interpreter whose BLAS pools and torch have 2 threads.

    A process of its own: once the main thread has set OpenBLAS's thread count (as
    any earlier ``threadpool_limits`` here did), other threads cannot change it.
    """
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


PRELUDE = """
import json, threading
import numpy as np, torch
from threadpoolctl import threadpool_info

def settings():
    # the calling thread's torch threads, a new thread's, and every pool threadpoolctl sees
    new = []
    t = threading.Thread(target=lambda: new.append(torch.get_num_threads()))
    t.start(); t.join()
    pools = [[i["filepath"], i["num_threads"]] for i in threadpool_info()]
    return [torch.get_num_threads(), new[0], pools]

def blas_threads():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
"""


def test_threaded_grid_search_leaves_thread_settings_as_found():
    # Two overlapping fits each limited the process-wide BLAS pools and
    # restored the other's lowered value ([2, 2] before, [1, 1] after)
    before, after = _in_a_clean_process("""
        from joblib import parallel_backend
        from sklearn.datasets import load_iris
        from sklearn.model_selection import GridSearchCV
        from sklaplace import LaplaceClassifier

        X, y = load_iris(return_X_y=True)
        before = settings()
        search = GridSearchCV(
            LaplaceClassifier(hidden_layer_sizes=(5,), max_epochs=5, random_state=0,
                              hyperparameter_tuning="evidence"),
            {"prior_precision": [0.1, 10.0]}, cv=2)
        with parallel_backend("threading", n_jobs=2):
            search.fit(X[::2], y[::2])
        print(json.dumps([before, settings()]))
    """)
    assert after == before
    # the environment gave the pools 2 threads (under heavy load one pool has reported 1
    # at start, before any fit: a lowered pool would still show in after != before)
    assert 2 in {n for _, n in before[2]}


def test_overlapping_blas_limits_restore_the_pools_and_keep_foreign_settings():
    # A enters (lowers), B enters (changes nothing), A leaves (restores), B leaves
    inside, after, foreign = _in_a_clean_process("""
        from sklaplace._laplace.threads import single_threaded_blas

        steps = {name: threading.Event() for name in ("a_in", "b_in", "a_out")}
        inside = []  # in B: while A is inside, after A left

        def a():
            with single_threaded_blas():
                steps["a_in"].set()
                steps["b_in"].wait(30)
            steps["a_out"].set()

        def b():
            steps["a_in"].wait(30)
            with single_threaded_blas():
                inside.append(blas_threads())
                steps["b_in"].set()
                steps["a_out"].wait(30)
                inside.append(blas_threads())

        threads = [threading.Thread(target=f) for f in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = blas_threads()

        from threadpoolctl import threadpool_limits
        with single_threaded_blas():
            threadpool_limits(limits=3, user_api="blas")  # someone else's setting: kept
        print(json.dumps([inside, after, blas_threads()]))
    """)
    assert inside[0] and set(inside[0]) == {1}
    assert set(inside[1]) == set(after) == {2}
    assert set(foreign) == {3}


class _DropoutMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(),
                                          torch.nn.Dropout(0.5), torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.layers(x)


def test_random_state_is_honoured_under_the_threading_backend(iris):
    # Shuffling and dropout draw from torch's global generator, which
    # concurrent fits shared: every threaded run gave other scores
    from sklearn.model_selection import cross_val_score
    from skorch import NeuralNetClassifier

    net = NeuralNetClassifier(_DropoutMLP, criterion=torch.nn.CrossEntropyLoss, max_epochs=10,
                              lr=0.05, batch_size=16, iterator_train__shuffle=True,
                              train_split=None, verbose=0)
    est = LaplaceClassifier(net=net, hyperparameter_tuning=None, random_state=0)
    sequential = cross_val_score(est, *iris, cv=3, scoring="neg_log_loss")
    for _ in range(3):
        with parallel_backend("threading", n_jobs=2):
            threaded = cross_val_score(est, *iris, cv=3, scoring="neg_log_loss")
        np.testing.assert_array_equal(threaded, sequential)
    # sklaplace's own MLP (no dropout, no shuffling) trains outside the lock: same scores
    default = LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=10,
                                hyperparameter_tuning=None, random_state=0)
    sequential_default = cross_val_score(default, *iris, cv=3, scoring="neg_log_loss")
    with parallel_backend("threading", n_jobs=2):
        threaded = cross_val_score(default, *iris, cv=3, scoring="neg_log_loss")
    np.testing.assert_array_equal(threaded, sequential_default)
    # the seed matters: another one gives other scores
    other = cross_val_score(est.set_params(random_state=1), *iris, cv=3, scoring="neg_log_loss")
    assert not np.array_equal(other, sequential)


def _recording_callback(seen):
    """A skorch callback appending torch's threads to ``seen`` at each epoch (a global
    list: the net and its callbacks are cloned)."""
    from skorch.callbacks import Callback

    class Record(Callback):
        def on_epoch_begin(self, net, **kwargs):
            seen.append(torch.get_num_threads())

    return Record()


def _recording_estimator(seen):
    from skorch import NeuralNetClassifier

    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    net = NeuralNetClassifier(module, criterion=torch.nn.CrossEntropyLoss, max_epochs=2,
                              train_split=None, verbose=0, callbacks=[("record", _recording_callback(seen))])
    return LaplaceClassifier(net=net, hyperparameter_tuning=None, random_state=0)


def _in_a_thread_with_two_torch_threads(fn):
    """``fn()``'s result, called in a new thread whose OpenMP (torch) threads are 2."""
    out = {}

    def run():
        torch.get_num_threads()  # start torch's pool of this thread first
        with threadpool_limits(limits=2, user_api="openmp"):
            before = torch.get_num_threads()
            out["result"] = fn()
            out["kept"] = torch.get_num_threads() == before == 2

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert out["kept"]
    return out["result"]


def test_small_nets_fit_and_predict_with_one_torch_thread(iris, monkeypatch):
    monkeypatch.delenv("SKLAPLACE_NUM_THREADS", raising=False)
    seen = []

    def fit_and_predict():
        est = _recording_estimator(seen).fit(*iris)
        in_predict = []
        from sklaplace.estimators import _base  # the shell validates X where prediction starts

        real = _base.validate_predict_X
        monkeypatch.setattr(_base, "validate_predict_X", lambda e, X: (
            in_predict.append(torch.get_num_threads()), real(e, X))[1])
        est.predict_proba(iris[0])
        return in_predict

    assert _in_a_thread_with_two_torch_threads(fit_and_predict) == [1]
    assert seen == [1, 1]


def test_user_override_and_threadpoolctl(iris, monkeypatch):
    seen = []
    monkeypatch.setenv("SKLAPLACE_NUM_THREADS", "2")
    _in_a_thread_with_two_torch_threads(lambda: _recording_estimator(seen).fit(*iris))
    assert seen == [2, 2]

    def limited():  # threadpoolctl around the fit lowers it further
        with threadpool_limits(limits=1):
            return _recording_estimator(seen).fit(*iris)

    seen.clear()
    _in_a_thread_with_two_torch_threads(limited)
    assert seen == [1, 1]
    monkeypatch.setenv("SKLAPLACE_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="SKLAPLACE_NUM_THREADS"):
        _recording_estimator(seen).fit(*iris)


def test_single_thread_holds_whatever_the_policy(monkeypatch):
    """A dask fit's tasks: one torch thread, also inside a policy section that would
    give two and under SKLAPLACE_NUM_THREADS; the calling thread's setting restored."""
    from sklaplace._laplace.threads import single_thread, torch_threads

    monkeypatch.setenv("SKLAPLACE_NUM_THREADS", "2")

    def nested():
        seen = []
        with torch_threads(None):
            seen.append(torch.get_num_threads())
            with single_thread():
                seen.append(torch.get_num_threads())
                with torch_threads(None):  # a prediction inside a task keeps the one thread
                    seen.append(torch.get_num_threads())
            seen.append(torch.get_num_threads())
        return seen

    assert _in_a_thread_with_two_torch_threads(nested) == [2, 1, 1, 2]


def test_overlapping_fits_in_threads_leave_thread_settings_as_found(iris, monkeypatch):
    monkeypatch.delenv("SKLAPLACE_NUM_THREADS", raising=False)
    start = threading.Barrier(3)
    before = _settings()
    errors = []

    def fit():
        try:
            start.wait(30)
            est = LaplaceClassifier(hidden_layer_sizes=(5,), max_epochs=5, random_state=0,
                                    hyperparameter_tuning="evidence").fit(*iris)
            est.predict_proba(iris[0])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=_in_a_thread_with_two_torch_threads, args=(fit,))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _settings() == before


@pytest.mark.parametrize("write", ["pickle", "sklaplace.io"])
def test_a_fit_saved_while_another_thread_predicts_saves_the_fitted_module(write, tmp_path):
    # A prediction borrows the fitted module (forward hooks of the per-layer Jacobians,
    # weights swapped in by torch.func); a save mid-call failed ("Can't pickle local
    # object 'preactivation_hooks...'") or could take the borrowed state along. A dask
    # worker sending a shared estimator to another while predicting hit this, and the
    # task then waited forever.
    import pickle
    import threading

    from sklaplace import io as skio

    rng = np.random.RandomState(0)
    X = rng.randn(2000, 5)
    y = (X[:, 0] > 0).astype(int)
    est = LaplaceClassifier(hidden_layer_sizes=(20,), max_epochs=3, subset_of_weights="all",
                            hessian_structure="diag", hyperparameter_tuning=None,
                            random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    expected = est.predict_proba(X[:5])
    stop = threading.Event()

    def predict():
        while not stop.is_set():
            est.predict_proba(X)

    thread = threading.Thread(target=predict)
    thread.start()
    try:
        for i in range(60):
            if write == "pickle":
                copy = pickle.loads(pickle.dumps(est))
            else:
                skio.save(est, tmp_path / "est.skl")
                copy = skio.load(tmp_path / "est.skl")
            np.testing.assert_array_equal(copy.predict_proba(X[:5]), expected)
    finally:
        stop.set()
        thread.join()
