"""Fit and predict on dask collections against the same fit in memory.

``python -m benchmarks speed --sections dask --dask-rows 10000 100000``: for each N, the
default ``LaplaceClassifier`` with ``hidden_layer_sizes=(50,)`` on N × 50 float64
features (3 classes), trained by full-batch L-BFGS for ``--dask-epochs`` epochs (the
solver dask input uses; the in-memory fit with ``solver="lbfgs"`` beside it) and tuned by
the evidence, then ``predict_proba`` on the same rows. Rows are generated on the workers
(``da.random``), partitions of ``--dask-chunk`` rows. The clusters are ``LocalCluster``
processes with one thread each, on 1 and 2 workers: on a machine with 2 cores the second
worker measures contention as much as scale-out. Rows/s = N / seconds (fit: all epochs and
the LA; per epoch multiply by the epochs); the MAP rounds (objective evaluations) are counted.
"""

import os
import pathlib
import time
import warnings

import numpy as np

ROOT = str(pathlib.Path(__file__).resolve().parents[1])


def _data(n_rows, n_features, chunk, seed=0):
    import dask.array as da

    rs = da.random.RandomState(seed)
    X = rs.standard_normal((n_rows, n_features), chunks=(chunk, n_features))
    logit = X[:, 0] - X[:, 1] + 0.5 * X[:, 2]
    y = (logit > 0.5).astype(int) + (logit > -0.5).astype(int)
    return X, y


def _estimator(epochs, **kw):
    from sklaplace import LaplaceClassifier

    return LaplaceClassifier(hidden_layer_sizes=(50,), max_epochs=epochs, random_state=0,
                             hyperparameter_tuning="evidence", **kw)


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _rounds(fit):
    """(seconds, objective evaluations) of ``fit()``, counting the MAP's reductions."""
    from sklaplace.estimators import _dask_train

    count = [0]
    original = _dask_train._delayed_loss

    def counted(pair, static, theta):
        count[0] += 1
        return original(pair, static, theta)

    _dask_train._delayed_loss = counted
    try:
        seconds, model = _timed(fit)
    finally:
        _dask_train._delayed_loss = original
    return seconds, model, count[0]


def section_dask(out, rows=(10_000,), epochs=20, chunk=25_000, n_features=50):
    import dask
    import distributed

    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    out += ["## Fit and predict on dask collections", "",
            f"Default classifier with hidden_layer_sizes=(50,), {n_features} float64 features, "
            f"3 classes, {epochs} L-BFGS epochs, evidence tuning; partitions of {chunk} rows "
            "generated on the workers. `in memory` is the same fit with solver='lbfgs' on "
            "NumPy arrays (one process, one torch thread); the LocalClusters use processes "
            "with one thread each. On 2 cores, 2 workers measure contention as much as "
            "scale-out.", "",
            "| N | where | structure | fit s | fit rows/s | MAP rounds | fit s / round | "
            "predict s | predict rows/s | fit / in memory |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    warnings.simplefilter("ignore")
    X, y = dask.compute(*_data(500, n_features, 500))
    _estimator(2, solver="lbfgs").fit(X, y).predict_proba(X)  # warm: imports, first kernels
    for n in rows:
        X, y = _data(n, n_features, min(chunk, n))
        Xm, ym = dask.compute(X, y)
        memory_s, model = _timed(lambda: _estimator(epochs, solver="lbfgs").fit(Xm, ym))
        predict_s, _ = _timed(lambda: model.predict_proba(Xm))
        out.append(f"| {n} | in memory | {model.hessian_structure_} | {memory_s:.2f} | {n / memory_s:,.0f} | "
                   f"{model.n_iter_} epochs | | {predict_s:.2f} | {n / predict_s:,.0f} | 1 |")
        print(out[-1], flush=True)
        del Xm, ym
        for workers in (1, 2):
            with distributed.LocalCluster(n_workers=workers, threads_per_worker=1,
                                          processes=True, dashboard_address=None) as cluster, \
                    distributed.Client(cluster) as client:
                client.run(lambda: __import__("sklaplace"))  # imports not in the timings
                fit_s, fitted, rounds = _rounds(lambda: _estimator(epochs).fit(X, y))
                pred_s, _ = _timed(lambda: fitted.predict_proba(X).sum(0).compute())
            out.append(f"| {n} | dask, {workers} worker{'s' * (workers > 1)} | "
                       f"{fitted.hessian_structure_} | {fit_s:.2f} | "
                       f"{n / fit_s:,.0f} | {rounds // X.numblocks[0]} | "
                       f"{fit_s / max(1, rounds // X.numblocks[0]):.3f} | {pred_s:.2f} | "
                       f"{n / pred_s:,.0f} | {fit_s / memory_s:.2f} |")
            print(out[-1], flush=True)
    out.append("")
    return out


def _synthetic(rng, n):
    """The dask tests' classification problem: 5 features, a logistic truth with a sine."""
    X = rng.randn(n, 5)
    logit = 2 * X[:, 0] - X[:, 1] + np.sin(2 * X[:, 2])
    return X, (logit + rng.logistic(size=n) > 0).astype(int)


def section_dask_defaults(out, rows=(2_000, 10_000), partitions=4, workers=2):
    """``LaplaceClassifier()`` with every parameter at its default (``hidden_layer_sizes=
    "auto"``, ``"cv"`` tuning) in memory and on ``partitions`` dask partitions: the chosen
    architecture and δ, the held-out NLL of the choice, the NLL on 4,000 test rows, time."""
    import dask.array as da
    import distributed
    from sklearn.metrics import log_loss

    from sklaplace import LaplaceClassifier

    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    out += ["## The default classifier on dask collections", "",
            f"`LaplaceClassifier(random_state=0)` (every parameter at its default) on N rows "
            f"of 5 features, in memory and on {partitions} partitions on a LocalCluster of "
            f"{workers} worker processes (one thread each); test NLL on 4,000 rows of the "
            "same distribution.", "",
            "| N | where | hidden_layer_sizes_ | prior_precision_ | held-out NLL | "
            "candidates' held-out NLL | test NLL | fit s |",
            "|---|---|---|---|---|---|---|---|"]
    warnings.simplefilter("ignore")
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.run(lambda: __import__("sklaplace"))  # imports not in the timings
        for n in rows:
            rng = np.random.RandomState(0)
            (X, y), (X_test, y_test) = _synthetic(rng, n), _synthetic(rng, 4_000)
            chunk = -(-n // partitions)
            for where, fit in (
                    ("in memory", lambda: LaplaceClassifier(random_state=0).fit(X, y)),
                    ("dask", lambda: LaplaceClassifier(random_state=0).fit(
                        da.from_array(X, chunks=chunk), da.from_array(y, chunks=chunk)))):
                seconds, model = _timed(fit)
                scores = np.round(model.model_selection_results_["held_out_nll"], 4)
                out.append(f"| {n} | {where} | {model.hidden_layer_sizes_} | "
                           f"{model.prior_precision_:.3g} | {model.validation_nll_:.4f} | "
                           f"{' / '.join(str(v) for v in scores)} | "
                           f"{log_loss(y_test, model.predict_proba(X_test)):.4f} | "
                           f"{seconds:.1f} |")
                print(out[-1], flush=True)
    out.append("")
    return out


__all__ = ["section_dask", "section_dask_defaults"]


if __name__ == "__main__":
    print("\n".join(section_dask([], np.array([10_000]))))
