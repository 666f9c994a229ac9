"""Multilabel scoreboard: ``python -m benchmarks multilabel``.

The default ``LaplaceClassifier`` on indicator targets (one sigmoid per label), in a
Pipeline after ``StandardScaler``, against

* ``MAP``: the same fit's plug-in predictive, the sigmoid of each logit of its net;
* ``MLP``: ``MLPClassifier`` at its defaults (``max_iter=200``), which fits an
  indicator y with one sigmoid per label as well.

Tasks: two of ``make_multilabel_classification`` (1,000 rows; 20 features and 5
labels with 2 per row on average; 10 features and 8 labels with 3), and two real
tables turned multilabel: ``digits_properties`` (scikit-learn's bundled 8×8 digits,
1,797 rows; the labels say whether the digit is even, at least 5, prime, and drawn
with a closed loop: 0, 4, 6, 8, 9) and ``satellite_groups`` (the UCI Landsat set
under ``../shared/data``, a seeded 2,000 of its 6,435 rows; of its six soil classes
the labels say grey soil — grey, damp grey, very damp grey —, damp — damp grey, very
damp grey —, and vegetation — cotton crop, stubble).

Each task is split into random 75/25 partitions seeded by the task's name and the
split. On the test rows: the mean per-label NLL (the Bernoulli log loss averaged over
rows and labels), the Hamming accuracy (per label), and the mean per-label confidence
max(p, 1 − p) on the test rows' scaled features multiplied by 3 (the
``StandardScaler``'s output ×3, given to the last step; lower = backs off; the MAP
column is the LA's own net on the same rows). Cells are mean ± standard error over
splits; the targets: LA NLL ≤ MLP's, LA confidence ×3 ≤ MAP's − 0.02.

Example::

    python -m benchmarks multilabel --splits 3 --out results/multilabel.md

:mod:`benchmarks.multilabel_levers` reports per split what the default chose, each
label's NLL, and other predictives of the same fit (a δ per label, the test-best δ).
"""

import time
import warnings
import zlib

import numpy as np
from scipy.special import expit
from sklearn.base import clone
from sklearn.datasets import load_digits, make_multilabel_classification
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

HELP = "multilabel scoreboard: per-label NLL vs MLPClassifier, confidence on rows x3 vs MAP"

TASKS = ("synthetic_5", "synthetic_8", "digits_properties", "satellite_groups")


def load_task(name, data_dir=None):
    """(X, Y) of a task: Y an (n, L) indicator matrix."""
    if name == "synthetic_5":
        return make_multilabel_classification(n_samples=1000, n_features=20, n_classes=5,
                                              n_labels=2, random_state=0)
    if name == "synthetic_8":
        return make_multilabel_classification(n_samples=1000, n_features=10, n_classes=8,
                                              n_labels=3, random_state=1)
    if name == "digits_properties":
        X, digit = load_digits(return_X_y=True)
        Y = np.stack([digit % 2 == 0, digit >= 5, np.isin(digit, (2, 3, 5, 7)),
                      np.isin(digit, (0, 4, 6, 8, 9))], 1)
        return X.astype(float), Y.astype(int)
    if name == "satellite_groups":
        from .data import load_uci_classification

        X, soil = load_uci_classification("satellite", data_dir=data_dir)
        rows = np.random.default_rng(0).choice(len(X), 2000, replace=False)
        X, soil = X[rows], np.asarray(soil)[rows]
        grey = ("grey soil", "damp grey soil", "very damp grey soil")
        Y = np.stack([np.isin(soil, grey), np.isin(soil, grey[1:]),
                      np.isin(soil, ("cotton crop", "vegetation stubble"))], 1)
        return X.astype(float), Y.astype(int)
    raise ValueError(f"unknown task {name!r}; one of {TASKS}")


def per_label_nll(Y, proba):
    from sklaplace.metrics import per_label_nll

    return per_label_nll(Y, proba)


def confidence(proba):
    return float(np.maximum(proba, 1 - proba).mean())


def run_split(name, X, Y, split, laplace_params):
    from sklaplace import LaplaceClassifier

    seed = zlib.crc32(f"{name}:{split}".encode()) % 2**31
    X_tr, X_te, Y_tr, Y_te = train_test_split(X, Y, test_size=0.25, random_state=seed)
    rows = {}
    la = make_pipeline(StandardScaler(), LaplaceClassifier(random_state=seed, **laplace_params))
    mlp = make_pipeline(StandardScaler(), MLPClassifier(random_state=seed))
    for label, model in (("LA", la), ("MLP", mlp)):
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X_tr, Y_tr)
        seconds = time.perf_counter() - start
        proba = model.predict_proba(X_te)
        rows[label] = dict(nll=per_label_nll(Y_te, proba),
                           acc=float(((proba > 0.5) == Y_te).mean()), time=seconds)
    scaled = 3 * la[0].transform(X_te)
    clf = la[-1]
    dist = clf.predict_dist(scaled)
    rows["LA"]["conf3"] = confidence(dist.proba())
    map_test = expit(clf.predict_dist(la[0].transform(X_te)).logit_mean)
    rows["MAP"] = dict(nll=per_label_nll(Y_te, map_test),
                       acc=float(((map_test > 0.5) == Y_te).mean()),
                       conf3=confidence(expit(dist.logit_mean)), time=np.nan)
    rows["MLP"]["conf3"] = confidence(mlp[-1].predict_proba(scaled))
    results = getattr(clf, "model_selection_results_", None)
    rows["LA"]["sizes"] = getattr(clf, "hidden_layer_sizes_", None)
    if results is not None:
        chosen = list(results["rank"]).index(1)
        rows["LA"]["prior"] = results["training_prior_precision"][chosen]
        rows["LA"]["n_fits"] = int(np.sum(results["fit_time"] > 0))
    return rows


def _cell(values):
    values = np.asarray(values, dtype=float)
    if np.all(np.isnan(values)):
        return "–"
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{values.mean():.3f} ± {se:.3f}"


def report(results):
    lines = []
    for metric, title in (("nll", "mean per-label NLL (lower is better)"),
                          ("acc", "per-label (Hamming) accuracy"),
                          ("conf3", "mean per-label confidence max(p, 1 − p) on test rows ×3 "
                                    "(lower = backs off)"),
                          ("time", "fit time, s")):
        lines += [f"#### {title}", "", "| task | LA | MAP | MLP |", "|---|---|---|---|"]
        for name, splits in results.items():
            cells = [_cell([s[m][metric] for s in splits]) for m in ("LA", "MAP", "MLP")]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["#### per split: the LA's net (hidden_layer_sizes_, the prior precision it trained "
              "under, candidates fitted), NLL LA / MLP, fit time LA / MLP", ""]
    for name, splits in results.items():
        cells = [f"{s['LA'].get('sizes')} at {s['LA'].get('prior', '–')} "
                 f"({s['LA'].get('n_fits', '–')}), {s['LA']['nll']:.3f} / {s['MLP']['nll']:.3f}, "
                 f"{s['LA']['time'] / s['MLP']['time']:.1f}×" for s in splits]
        lines.append(f"- {name}: " + "; ".join(cells))
    lines.append("")
    nll_ok = [n for n, s in results.items()
              if np.mean([r["LA"]["nll"] for r in s]) <= np.mean([r["MLP"]["nll"] for r in s])]
    conf_ok = [n for n, s in results.items()
               if np.mean([r["LA"]["conf3"] for r in s])
               <= np.mean([r["MAP"]["conf3"] for r in s]) - 0.02]
    lines.append(f"- NLL LA ≤ MLP: {len(nll_ok)}/{len(results)} ({', '.join(nll_ok)})")
    lines.append(f"- confidence ×3 LA ≤ MAP − 0.02: {len(conf_ok)}/{len(results)} "
                 f"({', '.join(conf_ok)})")
    return "\n".join(lines)


def add_arguments(parser):
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--laplace-params", default="{}",
                        help="JSON of LaplaceClassifier parameters")
    parser.add_argument("--out", default=None, help="also write the tables to this file")


def main(args):
    import json

    params = json.loads(args.laplace_params)
    results = {}
    for name in args.tasks:
        X, Y = load_task(name, args.data_dir)
        results[name] = [run_split(name, X, Y, split, params) for split in range(args.splits)]
        print(f"{name}: done", flush=True)
        print(report({name: results[name]}), flush=True)
    text = report(results)
    print(text)
    if args.out:
        from pathlib import Path

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return results
