"""The architecture choice's frontier: ``python -m benchmarks selection``.

Fits the Laplace classifier / regressor under several variants of the architecture
choice on the scoreboard's sets and splits (:mod:`benchmarks.defaults`: a pandas
frame through one-hot + scaling in a Pipeline, random 75/25 splits) and reports, per
set and variant, the test NLL of the LA and of its MAP, the chosen architecture and
the fit time as a ratio to ``MLPClassifier`` / ``MLPRegressor`` fitted in the same
run on the same split. ``MLP`` and ``linear`` (``LogisticRegression`` /
``BayesianRidge``) are the baselines' NLL.

Variants (``--variants``): ``()``, ``(50,)``, ``(50,50)``: one architecture with
the default tuning (the classifier's "cv" trains on the fit rows, then continues on
all rows with the held-out δ); ``(50,)-tol=None``: 200 epochs in both trainings, no
convergence stop; ``(50,)-evidence``: one training on all rows, δ by the evidence;
``auto``: the default (the chosen candidate trained on, warm, on all rows with its
held-out δ); ``auto-lbfgs``: every candidate trained by L-BFGS; ``auto-averaged``: ``model_averaging=True`` (the
candidates' mixture, a regressor's scored by its density; its MAP column is the
largest weight's net, its sizes those of the candidates kept).

Example::

    python -m benchmarks selection --datasets iris attrition --splits 3 --max-rows 1000
"""

import time
import warnings

import numpy as np
from sklearn.base import clone

from sklaplace import LaplaceClassifier, LaplaceRegressor
from .defaults import (DATASETS, load_dataset, make_estimators, make_pipeline, map_predict,
                       name_seed, predict, score, split_indices, subsample, task_of)

HELP = "the architecture choice's variants: test NLL, chosen sizes, fit time against the MLP"

#: variant → the estimator's parameters
VARIANTS = {
    "()": {"hidden_layer_sizes": ()},
    "(50,)": {"hidden_layer_sizes": (50,)},
    "(50,50)": {"hidden_layer_sizes": (50, 50)},
    "(50,)-tol=None": {"hidden_layer_sizes": (50,), "tol": None},
    "(50,)-evidence": {"hidden_layer_sizes": (50,), "hyperparameter_tuning": "evidence"},
    "auto": {},
    "auto-lbfgs": {"solver": "lbfgs"},
    "auto-averaged": {"model_averaging": True},
}


def run(datasets, variants, n_splits, max_rows, log=print):
    """Records: one per (set, split, method) with ``nll``, ``map_nll``, ``seconds``,
    ``sizes``."""
    records = []
    for name in datasets:
        task, seed = task_of(name), name_seed(name)
        X, y = subsample(*load_dataset(name), max_rows, seed)
        for k, (train, test) in enumerate(split_indices(y, task, n_splits, seed)):
            Xtr, ytr, Xte, yte = X.iloc[train], y[train], X.iloc[test], y[test]
            base = make_estimators(task, seed + k, methods=("MLP", "linear"))
            for method, est in base.items():
                pipe = make_pipeline(clone(est))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    pipe.fit(Xtr, ytr)
                    seconds = time.perf_counter() - t0
                nll = score(task, yte, predict(task, pipe, Xte),
                            getattr(pipe, "classes_", None))["nll"]
                records.append(dict(dataset=name, split=k, method=method, nll=nll,
                                    seconds=seconds))
            cls = LaplaceClassifier if task == "classification" else LaplaceRegressor
            for variant in variants:
                pipe = make_pipeline(cls(random_state=seed + k, **VARIANTS[variant]))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    t0 = time.perf_counter()
                    pipe.fit(Xtr, ytr)
                    seconds = time.perf_counter() - t0
                classes = getattr(pipe, "classes_", None)
                records.append(dict(
                    dataset=name, split=k, method=variant, seconds=seconds,
                    nll=score(task, yte, predict(task, pipe, Xte), classes)["nll"],
                    map_nll=score(task, yte, map_predict(task, pipe, Xte), classes)["nll"],
                    sizes=_sizes(pipe[-1])))
            log(f"{name} split {k}: " + "  ".join(
                f"{r['method']}={r['nll']:.3f} ({r['seconds']:.1f} s"
                + (f"; {r['sizes']})" if "sizes" in r else ")") for r in records
                if r["dataset"] == name and r["split"] == k), flush=True)
    return records


def _sizes(est):
    """The chosen architecture, or the averaged ones with their weights."""
    if not hasattr(est, "estimators_"):
        return str(est.hidden_layer_sizes_)
    weights = est.model_weights_[est.model_weights_ > 0]
    return "+".join(f"{e.hidden_layer_sizes_}×{w:.2f}" for e, w in zip(est.estimators_, weights))


def table(records, datasets, variants):
    """Markdown: per set, each variant's LA / MAP NLL, its fit time / MLP's, the sizes."""
    lines = ["| data set | MLP | linear | " + " | ".join(variants) + " |",
             "|---" * (len(variants) + 3) + "|"]
    for d in datasets:
        rows = [r for r in records if r["dataset"] == d]
        if not rows:
            continue

        def mean(method, key):
            v = [r[key] for r in rows if r["method"] == method and key in r]
            return float(np.mean(v)) if v else np.nan

        mlp_time = {r["split"]: r["seconds"] for r in rows if r["method"] == "MLP"}
        cells = []
        for v in variants:
            mine = [r for r in rows if r["method"] == v]
            ratio = np.mean([r["seconds"] / mlp_time[r["split"]] for r in mine])
            sizes = sorted({r["sizes"] for r in mine})
            cells.append(f"{mean(v, 'nll'):.3f} / {mean(v, 'map_nll'):.3f} "
                         f"({ratio:.1f}×; {' '.join(sizes)})")
        lines.append(f"| {d} | {mean('MLP', 'nll'):.3f} | {mean('linear', 'nll'):.3f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_arguments(parser):
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=["iris"])
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS),
                        default=list(VARIANTS))
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--max-rows", type=int, default=1000)
    parser.add_argument("--out", metavar="FILE.md")
    return parser


def main(args):
    records = run(args.datasets, args.variants, args.splits, args.max_rows)
    text = ("Cells: LA test NLL / its MAP's (fit time / MLP's in the same run; chosen "
            "hidden_layer_sizes_), means over splits.\n\n"
            + table(records, args.datasets, args.variants) + "\n")
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return records
