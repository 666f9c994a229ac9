"""Two more columns of the defaults scoreboard where the data change, on both tasks.

* In-range corruption (``corrupt_nll``): in each test row of the in-distribution
  split, half the columns (of the raw DataFrame, so categories stay valid; a seeded
  random half, rounded up) are replaced by those of one random training row. Every
  value stays inside the training range, so a range-based back-off cannot see it.
  NLL of every method from the same fits as the in-distribution columns.
* A sub-population never seen in training (``cluster_nll``): KMeans
  (:data:`N_CLUSTERS` clusters, seeded from the set's name) on the pipeline's
  features of all rows (one-hot and standardized); split ``k`` holds out the
  ``k``-th cluster (in order of size) among those of 5-40 % of the rows: every
  method is fitted on the split's training rows outside it and tested on all its
  rows (classification: those of a class seen in training). Extra fits, on the
  first ``--shift-splits`` splits.

Targets: LA NLL ≤ its MAP's under corruption, within max(0.01, 3 %) of its MAP's on
the held-out cluster (the five-MLP ensemble beside both).
"""

import warnings

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans

from .defaults import make_pipeline, map_predict, name_seed, predict, score, task_of

N_CLUSTERS = 5
TITLES = {"corrupt_nll": "NLL with half of each test row's columns from another training "
                         "row (in-range corruption)",
          "cluster_nll": "NLL on a held-out KMeans cluster (a sub-population never seen "
                         "in training)"}


def corrupt(X_te, X_tr, seed):
    """``X_te`` with half of each row's columns (rounded up) from a random row of ``X_tr``."""
    rng = np.random.RandomState(seed)
    out = X_te.copy()
    n, d = X_te.shape
    donors = rng.randint(0, len(X_tr), size=n)
    half = (d + 1) // 2
    for i in range(n):
        cols = rng.choice(d, half, replace=False)
        out.iloc[i, cols] = X_tr.iloc[donors[i], cols].to_numpy()
    return out


def corruption_metrics(task, name, pipe, X_te, y_te, X_tr, seed):
    """``{column: {"corrupt_nll": value}}`` of one fitted pipeline (the LA adds its MAP)."""
    Xc = corrupt(X_te, X_tr, seed)
    classes = getattr(pipe, "classes_", None)
    out = {name: {"corrupt_nll": score(task, y_te, predict(task, pipe, Xc), classes)["nll"]}}
    if name == "LA":
        out["MAP"] = {"corrupt_nll": score(task, y_te, map_predict(task, pipe, Xc),
                                           classes)["nll"]}
    return out


def held_out_cluster(name, X, y, train, k):
    """(training rows outside the held-out cluster, its rows) of split ``k``, or None."""
    Z = make_pipeline("passthrough").fit(X).transform(X)
    labels = KMeans(N_CLUSTERS, n_init=4, random_state=name_seed(name)).fit_predict(
        np.asarray(Z, dtype=float))
    sizes = np.bincount(labels, minlength=N_CLUSTERS) / len(labels)
    order = [c for c in np.argsort(-sizes, kind="stable") if 0.05 <= sizes[c] <= 0.4]
    if not order:
        return None
    cluster = order[k % len(order)]
    fit_rows = train[labels[train] != cluster]
    test = np.flatnonzero(labels == cluster)
    if task_of(name) == "classification":
        seen = np.unique(y[fit_rows])
        if len(seen) < 2:
            return None
        test = test[np.isin(y[test], seen)]
    return (fit_rows, test) if len(test) else None


def cluster_records(name, X, y, train, estimators, k, warned):
    """``cluster_nll`` records of split ``k`` (``[]`` where no cluster qualifies)."""
    task = task_of(name)
    rows = held_out_cluster(name, X, y, train, k)
    if rows is None:
        return []
    fit_rows, test = rows
    records = []
    for method, est in estimators.items():
        try:
            pipe = make_pipeline(clone(est))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                pipe.fit(X.iloc[fit_rows], y[fit_rows])
                preds = {method: predict(task, pipe, X.iloc[test])}
                if method == "LA":
                    preds["MAP"] = map_predict(task, pipe, X.iloc[test])
            for w in caught:
                warned[(f"{method} (cluster)",
                        f"{w.category.__name__}: {str(w.message).splitlines()[0][:90]}")] += 1
            classes = getattr(pipe, "classes_", None)
            cols = {m: {"cluster_nll": score(task, y[test], p, classes)["nll"]}
                    for m, p in preds.items()}
        except Exception as exc:  # one crashed method must not sink the scoreboard
            cols = {method: {"error": f"{type(exc).__name__}: {exc}"[:200]}}
        records += [{"dataset": name, "split": k, "method": m, "protocol": "cluster", **r}
                    for m, r in cols.items()]
    return records
