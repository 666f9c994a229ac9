"""Does the held-out δ fit the final net? ``python -m benchmarks transfer``.

The default classifier chooses δ by the held-out rows' NLL for the net trained on the
fit rows (80 %), then predicts with the net refit on all rows at that δ. Per set and
split this reports, for each way of making the final net (``--variants``):

- ``δ``: the held-out choice, and ``oracle δ``: the grid value (the held-out grid's,
  quarter decades over 1e-4 … 1e4) of smallest *test* NLL for the final net — a
  diagnostic only, the test rows choose nothing;
- the test NLL at each, at the evidence's own optimum δ for the final net, and of
  the MAP's plug-in predictive;
- the epochs of the final training, the norm of the final weights and the fit time.

Variants: ``warm`` (the default: the refit continues the selection pass's net on all
rows at the held-out δ of one fold), ``pooled`` (δ pooled over up to two more folds
where one holds under 500 rows, :mod:`sklaplace.estimators._crossfit`),
``cold`` (the refit trains afresh from the same initialization on all rows),
``kept`` (no refit: the selection pass's net and LA, trained on 80 % of the rows),
``one-fold`` (δ from the one held-out fold), ``two-extra`` (pooled over at most two
folds beyond the held-out one); each with the default architecture choice, or
with ``--sizes`` one candidate list (``--params``: more estimator parameters).
The splits and the pipeline are the scoreboard's (:mod:`benchmarks.defaults`).

Example::

    python -m benchmarks transfer --datasets attrition breast_cancer --splits 3
"""

import contextlib
import json
import time
import warnings

import numpy as np
import torch
from sklearn.metrics import log_loss

from sklaplace import LaplaceClassifier
from sklaplace._laplace import tuning
from sklaplace.estimators import _crossfit, _selection
from sklaplace._laplace.holdout import LOG10_PRIOR_GRID
from .defaults import CLASSIFICATION, load_dataset, make_pipeline, name_seed, split_indices
from .defaults import subsample

HELP = "the held-out δ against the final net's best δ (test rows as a diagnostic), per refit"

VARIANTS = {"warm": {"REFIT_START": "warm"}, "cold": {"REFIT_START": "cold"},
            "kept": {"REFIT": False},
            "one-fold": {"POOLED_ROWS": 0}, "pooled": {"POOLED_ROWS": 500},
            "two-extra": {"POOLED_ROWS": 500, "MAX_EXTRA_FOLDS": 2}, "one-fold-cold": {"POOLED_ROWS": 0,
                                                              "REFIT_START": "cold"}}


@contextlib.contextmanager
def settings(values):
    """Module constants of the choice (``_selection``'s and ``_crossfit``'s) for the
    duration."""
    modules = {k: (_crossfit if hasattr(_crossfit, k) else _selection) for k in values}
    old = {k: getattr(modules[k], k) for k in values}
    try:
        for k, v in values.items():
            setattr(modules[k], k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(modules[k], k, v)


def _proba_map(clf, Xt):
    with torch.no_grad():
        f = clf.laplace_.subset.forward(torch.as_tensor(np.asarray(Xt), dtype=torch.float64))
    if f.shape[1] == 1:
        p = torch.sigmoid(f[:, 0]).numpy()
        return np.c_[1 - p, p]
    return torch.softmax(f, -1).numpy()


def diagnose(clf, Xt, y):
    """The record of one fitted classifier on the test rows ``(Xt, y)``."""
    def nll(delta):
        return log_loss(y, clf._with_prior(float(delta)).predict_proba(Xt), labels=clf.classes_)

    grid = 10.0 ** LOG10_PRIOR_GRID
    losses = [nll(d) for d in grid]
    best = int(np.argmin(losses))
    fitted = clf.laplace_
    delta_ev = float(tuning.by_evidence(fitted.evidence, fitted.subset, "scalar", 1.0, None,
                                        None).prior_precision)
    return dict(delta=float(clf.prior_precision_),
                nll=log_loss(y, clf.predict_proba(Xt), labels=clf.classes_),
                oracle_delta=float(grid[best]), oracle_nll=float(losses[best]),
                evidence_delta=delta_ev, evidence_nll=nll(delta_ev),
                map_nll=log_loss(y, _proba_map(clf, Xt), labels=clf.classes_),
                epochs=int(clf.n_iter_), weight_norm=float(fitted.subset.theta.norm()),
                sizes=str(clf.hidden_layer_sizes_))


def run(datasets, variants, n_splits, max_rows, sizes=None, params=None, log=print):
    """Records: one per (set, split, variant), the fields of :func:`diagnose`."""
    records = []
    params = {**(params or {}), **({} if sizes is None else {"hidden_layer_sizes": sizes})}
    for name in datasets:
        seed = name_seed(name)
        X, y = subsample(*load_dataset(name), max_rows, seed)
        for k, (train, test) in enumerate(split_indices(y, "classification", n_splits, seed)):
            for variant in variants:
                pipe = make_pipeline(LaplaceClassifier(random_state=seed + k, **params))
                with warnings.catch_warnings(), settings(VARIANTS[variant]):
                    warnings.simplefilter("ignore")
                    start = time.perf_counter()
                    pipe.fit(X.iloc[train], y[train])
                    seconds = time.perf_counter() - start
                    rec = diagnose(pipe[-1], pipe[:-1].transform(X.iloc[test]), y[test])
                records.append(dict(dataset=name, split=k, variant=variant, seconds=seconds,
                                    **rec))
                log(json.dumps(records[-1]))
    return records


def table(records):
    """Markdown, one row per (set, split, variant)."""
    lines = ["| set | split | variant | sizes | δ | NLL | oracle δ | its NLL | evidence δ | its "
             "NLL | MAP NLL | epochs | ‖θ‖ | s |", "|---" * 14 + "|"]
    for r in records:
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['variant']} | {r['sizes']} | "
            f"{r['delta']:.3g} | {r['nll']:.3f} | {r['oracle_delta']:.3g} | "
            f"{r['oracle_nll']:.3f} | {r['evidence_delta']:.3g} | {r['evidence_nll']:.3f} | "
            f"{r['map_nll']:.3f} | {r['epochs']} | {r['weight_norm']:.1f} | "
            f"{r['seconds']:.1f} |")
    return "\n".join(lines)


class _Variant(LaplaceClassifier):
    """The default classifier fitted under a variant's settings (``variant_``)."""

    variant_ = "one-fold"

    def fit(self, X, y, **kwargs):
        with settings(VARIANTS[self.variant_]):
            return super().fit(X, y, **kwargs)


def board(datasets, variant, n_splits, max_rows, log=print):
    """The scoreboard's records (:func:`benchmarks.defaults.run_dataset`, with the columns
    where the data change on the first split) of the default ``LA`` beside ``variant``'s,
    ``MLP`` and ``linear``, fitted in one run."""
    from . import defaults

    def estimators(task, seed):
        base = defaults.make_estimators(task, seed, methods=("LA", "MLP", "linear"))
        other = type("Variant", (_Variant,), {"variant_": variant})
        base[variant] = other(**base["LA"].get_params())
        return base

    records = []
    for name in datasets:
        records += defaults.run_dataset(name, n_splits, max_rows, estimators=estimators,
                                        shift_splits=1, log=log)[0]
    return records


def add_arguments(parser):
    parser.add_argument("--datasets", nargs="+", choices=CLASSIFICATION, default=["attrition"])
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS),
                        default=list(VARIANTS))
    parser.add_argument("--sizes", type=json.loads, default=None, metavar="JSON",
                        help='candidate list, e.g. "[[50]]" (default: the "auto" choice)')
    parser.add_argument("--params", type=json.loads, default={}, metavar="JSON",
                        help='more LaplaceClassifier parameters, e.g. \'{"tol": null}\'')
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--max-rows", type=int, default=2000)
    parser.add_argument("--board", metavar="VARIANT", choices=tuple(VARIANTS),
                        help="instead: the scoreboard's columns (NLL, the columns where the "
                             "data change, fit time) of the default beside this variant, "
                             "MLPClassifier and LogisticRegression, as JSON lines")
    return parser


def main(args):
    if args.board:
        records = board(args.datasets, args.board, args.splits, args.max_rows)
        for r in records:
            print(json.dumps(r, default=str))
        return records
    sizes = None if args.sizes is None else [tuple(c) for c in args.sizes]
    records = run(args.datasets, args.variants, args.splits, args.max_rows, sizes,
                  args.params, log=lambda line: None)
    print(table(records))
    return records
