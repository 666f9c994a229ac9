"""Predictions run per row chunk, end to end: Jacobians → J Σ Jᵀ → link → probabilities.

``predict_proba`` / ``predict`` of the classifier and ``predict`` of the regressor never
hold the (n, C, C) logit covariance, the MC draws (n, S, C) or the weight-sample outputs
(S, n, C) for all rows: they concatenate (n, C) results of row chunks sized to
``sklaplace._laplace.fitted.PREDICT_CHUNK_BYTES``. Checked three ways: forced one-row chunks give
the whole-array link of ``predict_dist`` (MC draws shared by all rows: common random
numbers); no stage sees more rows than its chunk; and the peak resident memory of
``predict_proba`` on 20,000 rows × 40 classes, in a fresh process.
"""

import os
import subprocess
import sys
import dataclasses
import textwrap

import numpy as np
import pytest
import torch

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.estimators._classifier_predictive import Link
from sklaplace._laplace import fitted as _fitted

CONFIGS = [("all", "kron"), ("all", "diag"), ("all", "full"), ("last_layer", "full"),
           ("last_layer", "kron"), ("subnetwork", "full")]


def _data(n=40, d=4, k=3, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, d))
    return X, (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 0.5) * (k - 2)


def _classifier(subset, structure, k=3, **params):
    X, y = _data(k=k)
    params.setdefault("pred_type", "glm")
    est = LaplaceClassifier(subset_of_weights=subset, hessian_structure=structure,
                            subnetwork=20 if subset == "subnetwork" else None,
                            hidden_layer_sizes=(6,), max_epochs=20,
                            hyperparameter_tuning=None, random_state=0, **params)
    return est.fit(X, y), X


def _spy_link_rows(monkeypatch):
    """Record the number of rows each call of the link (``Link.proba``) receives."""
    rows, original = [], Link.proba

    def spy(self, mean, cov):
        rows.append(len(mean))
        return original(self, mean, cov)

    monkeypatch.setattr(Link, "proba", spy)
    return rows


def _spy_rows(monkeypatch, obj, name):
    """Record the number of rows each call of ``obj.name`` receives."""
    rows, original = [], getattr(obj, name)

    def spy(*args, **kwargs):
        rows.append(len(args[0]))
        return original(*args, **kwargs)

    if dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen:
        # the immutable fitted LA: its class's method, calling this object's
        monkeypatch.setattr(type(obj), name, lambda self, *args, **kwargs: spy(*args, **kwargs))
    else:
        monkeypatch.setattr(obj, name, spy)
    return rows


@pytest.mark.parametrize("subset,structure", CONFIGS)
@pytest.mark.parametrize("link", ["probit", "bridge", "mc"])
def test_one_row_chunks_give_the_whole_array_link(monkeypatch, subset, structure, link):
    # The last layer reads the features of the net in its own dtype: a float32 net's
    # features of one row and of 40 rows come from different matrix kernels, whose float32
    # rounding each CPU decides. A float64 net makes the chunks one computation in float64,
    # as the other subsets (a float64 copy of the net) are whatever the net's dtype.
    dtype = torch.get_default_dtype()
    if subset == "last_layer":
        torch.set_default_dtype(torch.float64)
    try:
        est, X = _classifier(subset, structure, link_approx=link, n_samples=50)
    finally:
        torch.set_default_dtype(dtype)
    whole = est.predict_dist(X).proba()  # the link on the (n, C, C) array of all rows
    assert np.allclose(est.predict_proba(X), whole, rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(_fitted, "PREDICT_CHUNK_BYTES", 1)  # one row per chunk
    moment_rows = _spy_rows(monkeypatch, est.laplace_.subset, "moments")
    link_rows = _spy_link_rows(monkeypatch)
    chunked = est.predict_proba(X)
    assert moment_rows == [1] * len(X) and link_rows == [1] * len(X)
    np.testing.assert_allclose(chunked, whole, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(est.predict_log_proba(X), np.log(whole), rtol=1e-9)


@pytest.mark.parametrize("k", [2, 4])
def test_sampled_net_predictive_per_chunk_shares_the_weight_samples(monkeypatch, k):
    est, X = _classifier("all", "diag", k=k, pred_type="nn", n_samples=20)
    whole = est.predict_dist(X).proba()
    monkeypatch.setattr(_fitted, "PREDICT_CHUNK_BYTES", 1)
    sample_rows = _spy_rows(monkeypatch, est.laplace_, "nn_samples")
    np.testing.assert_allclose(est.predict_proba(X), whole, rtol=1e-10, atol=1e-13)
    assert sample_rows == [1] * len(X)


def test_mc_probabilities_of_a_row_do_not_depend_on_the_other_rows():
    est, X = _classifier("all", "kron", k=4, link_approx="mc", n_samples=30)
    proba = est.predict_proba(X)
    np.testing.assert_array_equal(proba, est.predict_proba(X))  # deterministic
    np.testing.assert_allclose(est.predict_proba(X[7:9]), proba[7:9], rtol=1e-12)


def test_held_out_link_runs_by_blocks_of_rows(monkeypatch):
    """The link of moments already computed (held-out tuning) is applied by row blocks."""
    est, X = _classifier("all", "diag", link_approx="mc", n_samples=40)
    f, cov = est.laplace_.glm_moments(torch.as_tensor(X))
    link = Link("mc", False, 40, est.laplace_.prediction_seed)
    whole = link.proba(f, cov)
    monkeypatch.setattr(_fitted, "PREDICT_CHUNK_BYTES", 5 * link.row_bytes(f.shape[1]))
    link_rows = _spy_link_rows(monkeypatch)
    np.testing.assert_allclose(link.proba_by_rows(f, cov), whole, rtol=1e-12)
    assert max(link_rows) == 5 and sum(link_rows) == len(X)


@pytest.mark.parametrize("pred_type", ["glm", "nn"])
@pytest.mark.parametrize("n_targets", [1, 2])
def test_regressor_per_chunk_equals_one_chunk(monkeypatch, pred_type, n_targets):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 3))
    y = np.column_stack([np.sin(X[:, 0]), X[:, 1]])[:, :n_targets].squeeze()
    est = LaplaceRegressor(hidden_layer_sizes=(5,), max_epochs=20, hessian_structure="kron",
                           hyperparameter_tuning=None, pred_type=pred_type, n_samples=10,
                           random_state=0).fit(X, y)
    mean, std = est.predict(X, return_std=True)
    monkeypatch.setattr(_fitted, "PREDICT_CHUNK_BYTES", 1)
    spied = _spy_rows(monkeypatch, *((est.laplace_.subset, "moments") if pred_type == "glm"
                                     else (est.laplace_, "nn_samples")))
    mean_chunked, std_chunked = est.predict(X, return_std=True)
    assert spied == [1] * len(X)
    np.testing.assert_allclose(mean_chunked, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(std_chunked, std, rtol=1e-10)


_PEAK_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    from benchmarks.speed import _read_hwm, _reset_hwm, _rss
    from sklaplace import LaplaceClassifier

    torch.set_num_threads(1)
    subset, structure, link = sys.argv[1:4]
    rng = np.random.RandomState(0)
    C, d = 40, 8
    X = rng.normal(size=(400, d))
    y = np.arange(400) % C
    est = LaplaceClassifier(subset_of_weights=subset, hessian_structure=structure,
                            link_approx=link, n_samples=20, hidden_layer_sizes=(4,),
                            max_epochs=2, hyperparameter_tuning=None, random_state=0).fit(X, y)
    X_test = rng.normal(size=(20_000, d))
    est.predict_proba(X_test[:10])
    if not _reset_hwm() or _read_hwm() is None:
        print("unsupported")
        sys.exit()
    base = _rss()
    proba = est.predict_proba(X_test)
    assert proba.shape == (20_000, C)
    print((_read_hwm() - base) / 2**20)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS from /proc")
@pytest.mark.parametrize("subset,structure,link", [
    ("last_layer", "full", "probit"),
    pytest.param("all", "kron", "mc", marks=pytest.mark.slow)])
def test_predict_proba_of_20000_rows_and_40_classes_stays_under_200_mb(subset, structure,
                                                                       link):
    """Before: the (n, C, C) covariance of all rows (0.25 GB) and the link's copies; the
    last layer's (rows, C, P) projections 2,048 rows at a time (with 16 hidden units,
    +1.1 GB in all)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, subset, structure, link],
                         capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.split()[-1]
    if last == "unsupported":
        pytest.skip("cannot reset the peak RSS (/proc/self/clear_refs)")
    assert float(last) < 200, f"predict_proba peaked at +{float(last):.0f} MB"
