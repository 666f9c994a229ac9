"""The two-sided scoreboard: the defaults scoreboard where the data change.

``python -m benchmarks defaults`` scores every method in distribution (random
75/25 splits, :mod:`.defaults`).  This module adds, on every set it covers:

* classification, covariate shift (``shift_conf``): the test rows of each
  in-distribution split, their *scaled* features (the pipeline's
  ColumnTransformer output) multiplied by :data:`SHIFT_FACTOR` before the last
  step — the mean top-label confidence of every method, from the same fits as
  the in-distribution columns (the MAP's from the LA's net, see
  :func:`~benchmarks.defaults.map_predict`);
* classification, unseen class (``unseen_auroc``, sets with more than two
  classes): the training rows of the split without the last class in sorted
  order; AUROC of 1 − top-label confidence separating the split's seen-class
  test rows (label 0) from its unseen-class test rows (label 1);
* regression, extrapolation (``extrap_*``): the first principal component of
  the standardized numeric features, fitted on all rows of the (subsampled)
  set; "up": train on the rows at or below its 80th percentile, test on those
  above; "down", the mirror: train at or above the 20th percentile, test
  below.  Gaussian NLL and coverage of the central 90 % interval per direction
  and their mean (``extrap_nll``, ``extrap_cov90``).  The split is fixed; the
  repeats differ in the estimators' seeds (``seed + k``, as the in-distribution
  split ``k``);
* an ``ensemble`` method on every task (in distribution too): five
  ``MLPClassifier`` / ``MLPRegressor`` fits with seeds ``seed .. seed + 4``,
  averaged probabilities, or for regression the Gaussian mixture of the
  members with each member's training-residual std (:func:`mixture_moments`).

The unseen-class and extrapolation fits are extra fits of every method (LA
with the same ``--laplace-params``), run on the first ``--shift-splits``
splits.  Records carry ``protocol`` ``"unseen"`` or ``"extrapolation"``;
:func:`targets` gives the two-sided targets, :func:`figures` one figure per task.
"""

import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from . import subpop
from .defaults import (
    ResidualStd,
    _mean,
    _verdict,
    make_pipeline,
    map_predict,
    predict,
    score,
    task_of,
)

SHIFT_FACTOR = 3.0
N_MEMBERS = 5
#: Extrapolation: the test rows are those beyond this quantile of PC 1 ("up") or below 1 − it.
EXTRAP_QUANTILE = 0.8
#: Metric titles of the shift tables, by task (in :data:`benchmarks.defaults.METRIC_TITLES`).
SHIFT_TITLES = {
    "classification": {
        "shift_conf": f"mean top-label confidence on test rows ×{SHIFT_FACTOR:g} "
                      "(scaled features; lower = backs off)",
        "unseen_auroc": "unseen-class AUROC (1 − confidence; last class held out of training)"},
    "regression": {
        "extrap_nll": "extrapolation NLL (PC 1 splits, mean of both directions)",
        "extrap_nll_up": "extrapolation NLL, train PC 1 ≤ 80th percentile, test above",
        "extrap_nll_down": "extrapolation NLL, train PC 1 ≥ 20th percentile, test below",
        "extrap_cov90": "extrapolation 90% interval coverage (mean of both directions)"},
}
for _titles in SHIFT_TITLES.values():
    _titles.update(subpop.TITLES)


# ----------------------------------------------------------------------------- ensemble


def mixture_moments(means, stds):
    """Mean and std of an equal-weight mixture of Gaussians.

    Parameters
    ----------
    means, stds : array-like of shape (n_members, n_samples)

    Returns
    -------
    mean, std : ndarray of shape (n_samples,)
        ``mean`` is the average of the means; the variance is the average of
        ``std² + mean²`` minus ``mean²`` (computed as the average of ``std²``
        plus the spread of the means, the same quantity without cancellation).
    """
    means, stds = np.asarray(means, float), np.asarray(stds, float)
    mean = means.mean(0)
    var = (stds**2).mean(0) + ((means - mean) ** 2).mean(0)
    return mean, np.sqrt(var)


class MLPEnsembleClassifier(ClassifierMixin, BaseEstimator):
    """``n_members`` default ``MLPClassifier`` fits, seeds ``random_state + i``, averaged.

    Parameters
    ----------
    n_members : int, default=5
    random_state : int, default=0
    """

    def __init__(self, n_members=N_MEMBERS, random_state=0):
        self.n_members = n_members
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the members, seeds ``random_state .. random_state + n_members - 1``."""
        self.members_ = [MLPClassifier(random_state=self.random_state + i).fit(X, y)
                         for i in range(self.n_members)]
        self.classes_ = self.members_[0].classes_
        return self

    def predict_proba(self, X):
        """The members' class probabilities, averaged."""
        return np.mean([m.predict_proba(X) for m in self.members_], axis=0)

    def predict(self, X):
        return self.classes_[np.argmax(self.predict_proba(X), 1)]


class MLPEnsembleRegressor(RegressorMixin, BaseEstimator):
    """``n_members`` default ``MLPRegressor`` fits as a Gaussian mixture.

    Each member's std is the std of its training residuals; the prediction is
    the mixture's mean and std (:func:`mixture_moments`).

    Parameters
    ----------
    n_members : int, default=5
    random_state : int, default=0
    """

    def __init__(self, n_members=N_MEMBERS, random_state=0):
        self.n_members = n_members
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the members, seeds ``random_state .. random_state + n_members - 1``."""
        self.members_ = [ResidualStd(MLPRegressor(random_state=self.random_state + i)).fit(X, y)
                         for i in range(self.n_members)]
        return self

    def predict(self, X, return_std=False):
        """The mixture's mean (and std with ``return_std``)."""
        means, stds = zip(*(m.predict(X, return_std=True) for m in self.members_))
        mean, std = mixture_moments(means, stds)
        return (mean, std) if return_std else mean


def ensemble(task, seed):
    """The ensemble method of ``task`` with seeds ``seed .. seed + 4``."""
    cls = MLPEnsembleClassifier if task == "classification" else MLPEnsembleRegressor
    return cls(random_state=seed)


# ----------------------------------------------------------------------------- covariate shift


def shifted_pipeline(pipe, factor=SHIFT_FACTOR):
    """The fitted ``pipe`` with its transformed features multiplied by ``factor``.

    Its steps are the fitted transformer steps of ``pipe``, a multiplication,
    and the fitted last step of ``pipe`` (shared, not copied), so that
    ``pipe[:-1]`` / ``pipe[-1]`` work as for the original (e.g.
    :func:`~benchmarks.defaults.map_predict`).
    """
    scale = FunctionTransformer(lambda Z: factor * np.asarray(Z, dtype=float))
    return Pipeline([*pipe.steps[:-1], ("shift", scale), pipe.steps[-1]])


def confidence(proba):
    """Top-label confidence of each row."""
    return np.max(np.asarray(proba), axis=1)


def shift_metrics(task, name, pipe, X_te, y_te=None, X_tr=None, seed=0):
    """``{column: {"shift_conf": value}}`` of a fitted classification pipeline (the LA adds
    MAP); with ``y_te`` and ``X_tr``, both tasks, also ``corrupt_nll``
    (:func:`benchmarks.subpop.corruption_metrics`).

    Regression without them: ``{}`` (its shift is the extrapolation split).
    """
    out = {}
    if y_te is not None and X_tr is not None:
        out = subpop.corruption_metrics(task, name, pipe, X_te, y_te, X_tr, seed)
    if task != "classification":
        return out
    shifted = shifted_pipeline(pipe)
    out.setdefault(name, {})["shift_conf"] = float(
        confidence(shifted.predict_proba(X_te)).mean())
    if name == "LA":
        out.setdefault("MAP", {})["shift_conf"] = float(
            confidence(map_predict(task, shifted, X_te)).mean())
    return out


# ----------------------------------------------------------------------------- extra fits


def held_out_class(y):
    """The class left out of training for the unseen-class column: the last in sorted order.

    ``None`` for two classes (a set with one class left is not a classification task).
    """
    classes = np.unique(y)
    return classes[-1] if len(classes) > 2 else None


def pc1_splits(X, quantile=EXTRAP_QUANTILE):
    """The two extrapolation splits along the first principal component.

    Parameters
    ----------
    X : pandas.DataFrame
        All rows of the set; its numeric columns are standardized and PC 1 is
        fitted on them.
    quantile : float, default=0.8

    Returns
    -------
    splits : dict
        ``{"up": (train, test), "down": (train, test)}`` of row indices: "up"
        tests on the rows above the ``quantile`` of PC 1 and trains on the
        rest, "down" tests below the ``1 − quantile`` and trains on the rest.
    """
    Z = StandardScaler().fit_transform(X.select_dtypes("number").to_numpy(dtype=float))
    s = PCA(n_components=1).fit_transform(Z)[:, 0]
    up, down = s > np.quantile(s, quantile), s < np.quantile(s, 1 - quantile)
    rows = np.arange(len(s))
    return {"up": (rows[~up], rows[up]), "down": (rows[~down], rows[down])}


def _fit_predict(task, name, estimator, X_tr, y_tr, X_te, warned, tag):
    """Predictions on ``X_te`` of one fit (the LA adds its MAP); warnings counted under ``tag``."""
    pipe = make_pipeline(clone(estimator))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(X_tr, y_tr)
        out = {name: predict(task, pipe, X_te)}
        if name == "LA":
            out["MAP"] = map_predict(task, pipe, X_te)
    for w in caught:
        warned[(f"{name} ({tag})",
                f"{w.category.__name__}: {str(w.message).splitlines()[0][:90]}")] += 1
    return out


def _records(name, k, protocol, estimators, one, warned):
    """Records of ``one(method, estimator) → {column: metrics}`` over the methods; errors kept."""
    records = []
    for method, est in estimators.items():
        try:
            cols = one(method, est)
        except Exception as exc:  # one crashed method must not sink the scoreboard
            cols = {method: {"error": f"{type(exc).__name__}: {exc}"[:200]}}
        records += [{"dataset": name, "split": k, "method": m, "protocol": protocol, **r}
                    for m, r in cols.items()]
    return records


def unseen_records(name, X, y, train, test, estimators, k, warned):
    """Unseen-class AUROC records of one split (``[]`` for a two-class set)."""
    held = held_out_class(y)
    if held is None:
        return []
    fit_rows = train[y[train] != held]
    unseen = (y[test] == held).astype(int)

    def one(method, est):
        preds = _fit_predict("classification", method, est, X.iloc[fit_rows], y[fit_rows],
                             X.iloc[test], warned, "unseen class")
        return {m: {"unseen_auroc": float(roc_auc_score(unseen, 1 - confidence(p)))}
                for m, p in preds.items()}

    return _records(name, k, "unseen", estimators, one, warned)


def extrapolation_records(name, X, y, splits, estimators, k, warned):
    """Extrapolation NLL / 90 % coverage records of one seed over both PC 1 splits."""
    def one(method, est):
        out = {}
        for direction, (train, test) in splits.items():
            preds = _fit_predict("regression", method, est, X.iloc[train], y[train],
                                 X.iloc[test], warned, "extrapolation")
            for m, prediction in preds.items():  # (a mixture's by its density: score)
                scores = score("regression", y[test], prediction)
                out.setdefault(m, {})[f"extrap_nll_{direction}"] = scores["nll"]
                out[m][f"extrap_cov90_{direction}"] = scores["coverage90"]
        for r in out.values():
            for metric in ("extrap_nll", "extrap_cov90"):
                r[metric] = float(np.mean([r[f"{metric}_{d}"] for d in splits]))
        return out

    return _records(name, k, "extrapolation", estimators, one, warned)


def split_records(name, X, y, train, test, estimators, k, warned, log=print):
    """The extra fits of split ``k``: unseen class or extrapolation, by the set's task."""
    t0 = time.perf_counter()
    if task_of(name) == "classification":
        records = unseen_records(name, X, y, train, test, estimators, k, warned)
        metric = "unseen_auroc"
    else:
        records = extrapolation_records(name, X, y, pc1_splits(X), estimators, k, warned)
        metric = "extrap_nll"
    cluster = subpop.cluster_records(name, X, y, train, estimators, k, warned)
    for rows, metric in ((records, metric), (cluster, "cluster_nll")):
        if rows:
            log(f"{name} split {k} {rows[0]['protocol']}: " + "  ".join(
                f"{r['method']}={r[metric]:.3f}" if metric in r else f"{r['method']}=ERROR"
                for r in rows) + f"  ({time.perf_counter() - t0:.1f} s)")
    return records + cluster


# ----------------------------------------------------------------------------- report


def _leq(a, b):
    """``a ≤ b`` up to a relative 1e-4 (float32 nets against float64 predictives)."""
    return a <= b + 1e-4 * abs(b)


def targets(agg, datasets):
    """Lines of the two-sided targets, then the same comparisons against the ensemble.

    Each target counts only the sets where both sides have a value; a target
    without any such set reads ``n/a``.
    """
    def m(d, method, metric):
        return _mean(agg, d, method, metric)

    def line(label, metric, sets, ok, need, ref):
        sets = [d for d in sets if np.isfinite(m(d, "LA", metric)) and all(
            np.isfinite(m(d, r, metric)) for r in ref)]
        if not sets:
            return f"- n/a {label}: no set has both columns"
        good = [d for d in sets if ok(d)]
        return _verdict(label, len(good), len(sets), [d for d in sets if d not in good], need)

    cls = [d for d in datasets if task_of(d) == "classification"]
    reg = [d for d in datasets if task_of(d) == "regression"]

    def in_distribution(ref):
        return lambda d: _leq(m(d, "LA", "nll"),
                              m(d, ref, "nll") + max(0.01, 0.03 * abs(m(d, ref, "nll"))))

    lines = [
        line("(A) in distribution: LA NLL ≤ MAP NLL + max(0.01, 3% |MAP|) on every set", "nll",
             datasets, in_distribution("MAP"), 1.0, ["MAP"]),
        line("(B) in distribution: LA NLL ≤ min(MLP, linear) NLL on ≥ 80% of sets", "nll",
             datasets, lambda d: _leq(m(d, "LA", "nll"), min(m(d, "MLP", "nll"),
                                                            m(d, "linear", "nll"))),
             0.8, ["MLP", "linear"]),
        line(f"(C) shift: LA confidence ×{SHIFT_FACTOR:g} ≤ MAP's − 0.02 on every "
             "classification set", "shift_conf", cls,
             lambda d: m(d, "LA", "shift_conf") <= m(d, "MAP", "shift_conf") - 0.02, 1.0, ["MAP"]),
        line("(D) unseen class: LA AUROC ≥ MAP's + 0.02 on every multi-class set", "unseen_auroc",
             cls, lambda d: m(d, "LA", "unseen_auroc") >= m(d, "MAP", "unseen_auroc") + 0.02,
             1.0, ["MAP"]),
        line("(E) extrapolation: LA NLL < MAP's on every regression set", "extrap_nll", reg,
             lambda d: m(d, "LA", "extrap_nll") < m(d, "MAP", "extrap_nll"), 1.0, ["MAP"]),
        line("(F) extrapolation: LA NLL ≤ BayesianRidge's on ≥ 2/3 of regression sets",
             "extrap_nll", reg, lambda d: _leq(m(d, "LA", "extrap_nll"),
                                               m(d, "linear", "extrap_nll")),
             2 / 3 - 1e-9, ["linear"]),
        line("(G) in-range corruption: LA NLL ≤ MAP NLL on every set", "corrupt_nll",
             datasets, lambda d: _leq(m(d, "LA", "corrupt_nll"), m(d, "MAP", "corrupt_nll")),
             1.0, ["MAP"]),
        line("(H) held-out cluster: LA NLL ≤ MAP NLL + max(0.01, 3% |MAP|) on every set",
             "cluster_nll", datasets, lambda d: _leq(
                 m(d, "LA", "cluster_nll"), m(d, "MAP", "cluster_nll")
                 + max(0.01, 0.03 * abs(m(d, "MAP", "cluster_nll")))), 1.0, ["MAP"]),
        "",
        "Against the five-MLP ensemble (context, not targets):",
        "",
        line("(A′) in distribution: LA NLL ≤ ensemble NLL + max(0.01, 3% |ensemble|)", "nll",
             datasets, in_distribution("ensemble"), 1.0, ["ensemble"]),
        line(f"(C′) shift: LA confidence ×{SHIFT_FACTOR:g} ≤ ensemble's − 0.02", "shift_conf",
             cls, lambda d: m(d, "LA", "shift_conf") <= m(d, "ensemble", "shift_conf") - 0.02,
             1.0, ["ensemble"]),
        line("(D′) unseen class: LA AUROC ≥ ensemble's + 0.02", "unseen_auroc", cls,
             lambda d: m(d, "LA", "unseen_auroc") >= m(d, "ensemble", "unseen_auroc") + 0.02,
             1.0, ["ensemble"]),
        line("(H′) held-out cluster: LA NLL ≤ ensemble NLL + max(0.01, 3% |ensemble|)",
             "cluster_nll", datasets, lambda d: _leq(
                 m(d, "LA", "cluster_nll"), m(d, "ensemble", "cluster_nll")
                 + max(0.01, 0.03 * abs(m(d, "ensemble", "cluster_nll")))), 1.0, ["ensemble"]),
        line("(E′) extrapolation: LA NLL < ensemble's", "extrap_nll", reg,
             lambda d: m(d, "LA", "extrap_nll") < m(d, "ensemble", "extrap_nll"), 1.0,
             ["ensemble"]),
    ]
    return lines


# ----------------------------------------------------------------------------- figures


#: (x metric, y metric, y label) of each panel column, by task.
PANELS = {"classification": (("nll", "shift_conf", f"confidence ×{SHIFT_FACTOR:g}"),
                             ("nll", "unseen_auroc", "unseen-class AUROC")),
          "regression": (("nll", "extrap_nll", "extrapolation NLL"),
                         ("nll", "extrap_cov90", "extrapolation 90% coverage"))}


def figures(agg, datasets, prefix, methods):
    """One figure per task: per set, in-distribution NLL against each shift metric.

    Parameters
    ----------
    agg : dict
        :func:`benchmarks.defaults.aggregate` of the records.
    datasets : sequence of str
    prefix : str
        Files ``{prefix}_classification.png`` / ``{prefix}_regression.png``.
    methods : dict of task → sequence of str

    Returns
    -------
    paths : list of str
        The files written (a task without sets writes none).
    """
    from matplotlib.figure import Figure

    markers = dict(zip(("LA", "MAP", "MLP", "linear", "GP", "HGB", "ensemble"), "o^svDPX"))
    paths = []
    for task, panels in PANELS.items():
        sets = [d for d in datasets if task_of(d) == task
                and any((d, meth) in agg for meth in methods[task])]
        if not sets:
            continue
        fig = Figure(figsize=(4.2 * len(panels), 2.6 * len(sets) + 0.6), layout="constrained")
        axes = fig.subplots(len(sets), len(panels), squeeze=False)
        for row, d in zip(axes, sets):
            for ax, (xm, ym, ylabel) in zip(row, panels):
                for i, meth in enumerate(methods[task]):
                    stat = agg.get((d, meth), {})
                    if xm in stat and ym in stat:
                        (x, xse, _), (yv, yse, _) = stat[xm], stat[ym]
                        ax.errorbar(x, yv, xerr=np.nan_to_num(xse), yerr=np.nan_to_num(yse),
                                    fmt=markers.get(meth, "o"), color=f"C{i}", label=meth)
                if ym == "extrap_cov90":
                    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
                ax.set_title(d, fontsize=9)
                ax.set_xlabel("in-distribution NLL", fontsize=8)
                ax.set_ylabel(ylabel, fontsize=8)
                ax.tick_params(labelsize=7)
        handles = {}
        for ax in axes.ravel():
            for h, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, h)
        fig.legend(handles.values(), handles.keys(), loc="outside upper center",
                   ncol=len(handles), fontsize=8)
        path = f"{prefix}_{task}.png"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths
