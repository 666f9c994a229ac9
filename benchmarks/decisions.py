"""Deciding what to try next: ``python -m benchmarks decisions``.

Two sections (``--sections bo al``), both needing the ``decisions`` extra
(scikit-optimize, scikit-activeml).

**Bayesian optimisation** (``bo``): ``skopt.Optimizer(dimensions, base_estimator=...,
n_initial_points=5, random_state=seed)`` with its default acquisition (``gp_hedge``;
``acq_optimizer="auto"``, L-BFGS for the Laplace regressor, which gives the gradients of its
mean and std) minimises each function for ``--evaluations`` evaluations. Every dimension is
``transform="normalize"``: each surrogate sees the unit cube. Functions (``--functions``):
``branin`` (2-D, minimum 0.397887), ``hartmann6`` (6-D, minimum −3.32237) and ``hgb``, a real
tuning task: 1 − the 5-fold CV R² of ``HistGradientBoostingRegressor(learning_rate,
max_leaf_nodes)`` on ``load_diabetes`` (its regret is against the best value any run of the
command found). Methods (``--methods``): ``LA`` (``LaplaceRegressor()``), ``LA-(50,)``
(``hidden_layer_sizes=(50,)``), ``GP`` (scikit-optimize's own), ``random``
(random points throughout, as ``base_estimator="dummy"``) and ``MLPx5`` (five
``MLPRegressor``, their mean and std, ``acq_optimizer="sampling"``). Reported: the simple
regret (best value so far − minimum) after the last evaluation, its median and quartiles over
seeds, and the wall time of ``tell`` + the next ``ask`` (the surrogate's fit and the
acquisition's optimisation) over the last ten evaluations.

**Active learning** (``al``): a pool (70 % of the set, stratified; standardised features)
and a test set (30 %); ``--initial`` random labels, then batches of ``--batch`` until
``--budget`` labels. Tasks (``--tasks``): ``digits``, ``breast_cancer``, ``wine``. Methods
(``--al-methods``), scikit-activeml's strategies over ``SklearnClassifier``:
``LA-entropy`` (``UncertaintySampling(method="entropy")`` over ``LaplaceClassifier()``),
``LA-BatchBALD`` / ``LA-GreedyBALD`` (``sample_predictions_method_name="sample_proba"``),
``LA-random``, ``MLP-entropy`` (``MLPClassifier``), ``MLP-random`` and ``MLPx5-BALD``
(``GreedyBALD`` over five ``MLPClassifier`` as the committee, their mean the prediction).
Reported: test accuracy and NLL after each batch, their areas under the curve (the mean over
the label counts by the trapezoid rule, in the metric's units) and the seconds per step (the
fit on the labelled rows and the query).

Examples::

    python -m benchmarks decisions --sections bo --functions branin hartmann6 --seeds 10
    python -m benchmarks decisions --sections al --tasks digits --budget 100 --json al.json
    python -m benchmarks decisions --load bo.json al.json --out decisions.md
"""

import json
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

HELP = "Bayesian optimisation (scikit-optimize) and active learning (scikit-activeml)"

#: name → (dimensions as (low, high, kind, prior), known minimum or None).
FUNCTIONS = {
    "branin": ([(-5.0, 10.0, "real", "uniform"), (0.0, 15.0, "real", "uniform")], 0.397887),
    "hartmann6": ([(0.0, 1.0, "real", "uniform")] * 6, -3.32237),
    "hgb": ([(0.01, 1.0, "real", "log-uniform"), (2, 64, "integer", "uniform")], None),
}
BO_METHODS = ("LA", "LA-(50,)", "GP", "random", "MLPx5")
AL_METHODS = ("LA-entropy", "LA-BatchBALD", "LA-GreedyBALD", "LA-random", "MLP-entropy",
              "MLP-random", "MLPx5-BALD")
TASKS = ("digits", "breast_cancer", "wine")


# ---------------------------------------------------------------- Bayesian optimisation

class MLPEnsembleRegressor(RegressorMixin, BaseEstimator):
    """Five ``MLPRegressor`` (different seeds) on standardised targets: mean and std."""

    def __init__(self, n_members=5, hidden_layer_sizes=(50,), random_state=None):
        self.n_members = n_members
        self.hidden_layer_sizes = hidden_layer_sizes
        self.random_state = random_state

    def fit(self, X, y):
        from sklearn.neural_network import MLPRegressor

        y = np.asarray(y, dtype=float)
        self.y_mean_, self.y_scale_ = y.mean(), y.std() or 1.0
        seed = np.random.RandomState(self.random_state).randint(2**31 - 1)
        self.members_ = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in range(self.n_members):
                self.members_.append(MLPRegressor(
                    hidden_layer_sizes=self.hidden_layer_sizes, solver="lbfgs", max_iter=500,
                    alpha=1e-3, random_state=seed + k).fit(X, (y - self.y_mean_) / self.y_scale_))
        return self

    def predict(self, X, return_std=False):
        preds = np.stack([m.predict(X) for m in self.members_]) * self.y_scale_ + self.y_mean_
        mean = preds.mean(0)
        return (mean, preds.std(0)) if return_std else mean


def _hgb_objective():
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import KFold, cross_val_score

    X, y = load_diabetes(return_X_y=True)
    folds = KFold(5, shuffle=True, random_state=0)

    def objective(params):
        lr, leaves = params
        est = HistGradientBoostingRegressor(learning_rate=float(lr), max_leaf_nodes=int(leaves),
                                            random_state=0)
        return 1.0 - float(np.mean(cross_val_score(est, X, y, cv=folds, scoring="r2")))

    return objective


def _objective(name):
    from skopt.benchmarks import branin, hart6

    return {"branin": lambda x: float(branin(x)), "hartmann6": lambda x: float(hart6(x)),
            "hgb": None}[name] or _hgb_objective()


def _dimensions(name):
    from skopt.space import Integer, Real

    kinds = {"real": Real, "integer": Integer}
    return [kinds[kind](lo, hi, prior=prior, transform="normalize")
            for lo, hi, kind, prior in FUNCTIONS[name][0]]


def _optimizer(method, dimensions, seed):
    from skopt import Optimizer

    from sklaplace import LaplaceRegressor

    estimator, kwargs = {
        "LA": (LaplaceRegressor(random_state=seed), {}),
        "LA-(50,)": (LaplaceRegressor(hidden_layer_sizes=(50,), random_state=seed), {}),
        "GP": ("GP", {}),
        # (random points throughout: "dummy" fails on scikit-learn ≥ 1.6's tags)
        "random": ("GP", {"n_initial_points": 10**9}),
        "MLPx5": (MLPEnsembleRegressor(random_state=seed), {"acq_optimizer": "sampling"}),
    }[method]
    kwargs = {"n_initial_points": 5, **kwargs}
    return Optimizer(dimensions, base_estimator=estimator, random_state=seed, **kwargs)


def run_bo(functions, methods, n_evaluations, seeds, log=print, checkpoint=None):
    """Records: one per (function, method, seed) with ``points`` and ``values`` (each
    evaluation's) and ``seconds`` (``tell`` of that evaluation + the next ``ask``)."""
    records = []
    for name in functions:
        objective = _objective(name)
        for method in methods:
            for seed in seeds:
                opt = _optimizer(method, _dimensions(name), seed)
                values, seconds, points = [], [], []
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    x = opt.ask()
                    for _ in range(n_evaluations):
                        y = objective(x)
                        points.append([float(v) for v in x])
                        t0 = time.perf_counter()
                        opt.tell(x, y)
                        x = opt.ask()
                        seconds.append(time.perf_counter() - t0)
                        values.append(y)
                records.append(dict(section="bo", function=name, method=method, seed=seed,
                                    values=values, seconds=seconds, points=points))
                best = FUNCTIONS[name][1]
                log(f"{name} {method} seed {seed}: best {min(values):.4f}"
                    + (f" (regret {min(values) - best:.4f})" if best is not None else "")
                    + f", median tell+ask {np.median(seconds[-10:]):.2f} s", flush=True)
                if checkpoint:
                    checkpoint(records)
    return records


def regret_curves(records, function):
    """{method: (n_seeds, n_evaluations) simple regret}; without a known minimum, against
    the best value any run found."""
    rows = [r for r in records if r.get("section") == "bo" and r["function"] == function]
    best = FUNCTIONS[function][1]
    if best is None:
        best = min(min(r["values"]) for r in rows)
    curves = {}
    for r in rows:
        curves.setdefault(r["method"], []).append(np.minimum.accumulate(r["values"]) - best)
    return {m: np.array(c) for m, c in curves.items()}


def bo_tables(records):
    """Markdown: median regret (quartiles) after the last evaluation; median tell+ask s."""
    bo = [r for r in records if r.get("section") == "bo"]
    functions = [f for f in FUNCTIONS if any(r["function"] == f for r in bo)]
    methods = [m for m in BO_METHODS if any(r["method"] == m for r in bo)]
    if not functions:
        return ""
    n = min(len(r["values"]) for r in bo)
    lo = max(n - 10, 5)
    head = "| function | " + " | ".join(methods) + " |\n" + "|---" * (len(methods) + 1) + "|"
    regret, timing = [head], [head]
    for f in functions:
        curves = regret_curves(bo, f)
        cells, times = [], []
        for m in methods:
            if m not in curves:
                cells.append("")
                times.append("")
                continue
            q1, med, q3 = np.percentile(curves[m][:, n - 1], [25, 50, 75])
            cells.append(f"{_fmt(med)} ({_fmt(q1)}–{_fmt(q3)})")
            sec = [s for r in bo if r["function"] == f and r["method"] == m
                   for s in r["seconds"][lo:n]]
            times.append(f"{np.median(sec):.2f}")
        seeds = len(next(iter(curves.values())))
        regret.append(f"| {f} ({seeds} seeds) | " + " | ".join(cells) + " |")
        timing.append(f"| {f} | " + " | ".join(times) + " |")
    return (f"Median simple regret after {n} evaluations (quartiles over seeds):\n\n"
            + "\n".join(regret) + f"\n\nMedian seconds of tell + ask over evaluations "
            f"{lo + 1}–{n}:\n\n" + "\n".join(timing) + "\n")


def _fmt(v):
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.1e}"


# ---------------------------------------------------------------- active learning

def _task(name, seed):
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    return train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed)


def _members(method, classes, seed):
    """The SklearnClassifier(s) of a method: one, or five for the MLP committee."""
    from skactiveml.classifier import SklearnClassifier
    from sklearn.neural_network import MLPClassifier

    from sklaplace import LaplaceClassifier

    def wrap(est):
        return SklearnClassifier(est, classes=classes, missing_label=np.nan, random_state=seed)

    if method.startswith("LA-"):
        return [wrap(LaplaceClassifier(random_state=seed))]
    if method.startswith("MLPx5"):
        return [wrap(MLPClassifier(max_iter=500, random_state=seed * 10 + k)) for k in range(5)]
    return [wrap(MLPClassifier(max_iter=500, random_state=seed))]


def _query(method, X, y, members, batch, seed):
    from skactiveml.pool import BatchBALD, GreedyBALD, RandomSampling, UncertaintySampling

    draws = {"n_samples": 100, "random_state": seed}
    if method.endswith("-random"):
        return RandomSampling(missing_label=np.nan, random_state=seed).query(
            X, y, batch_size=batch)
    if method.endswith("-entropy"):
        return UncertaintySampling(method="entropy", missing_label=np.nan,
                                   random_state=seed).query(
            X, y, members[0], fit_clf=False, batch_size=batch)
    if method == "MLPx5-BALD":
        return GreedyBALD(missing_label=np.nan, random_state=seed).query(
            X, y, members, fit_ensemble=False, batch_size=batch)
    Strategy = BatchBALD if method == "LA-BatchBALD" else GreedyBALD
    return Strategy(sample_predictions_method_name="sample_proba",
                    sample_predictions_dict=draws, missing_label=np.nan,
                    random_state=seed).query(X, y, members[0], fit_ensemble=False,
                                             batch_size=batch)


def run_al(tasks, methods, seeds, initial, batch, budget, log=print, checkpoint=None):
    """Records: one per (task, method, seed) with ``labels``, ``accuracy``, ``nll`` (test,
    after each fit) and ``seconds`` (fit + query of each step)."""
    from sklearn.metrics import log_loss

    records = []
    for name in tasks:
        for seed in seeds:
            Xp, Xt, yp, yt = _task(name, seed)
            classes = np.unique(yp)
            start = np.random.RandomState(seed).choice(len(yp), initial, replace=False)
            for method in methods:
                y = np.full(len(yp), np.nan)
                y[start] = yp[start]
                members = _members(method, classes, seed)
                rec = dict(section="al", task=name, method=method, seed=seed, labels=[],
                           accuracy=[], nll=[], seconds=[])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    while True:
                        t0 = time.perf_counter()
                        for m in members:
                            m.fit(Xp, y)
                        fit_s = time.perf_counter() - t0
                        proba = np.mean([m.predict_proba(Xt) for m in members], axis=0)
                        n = int(np.sum(~np.isnan(y)))
                        rec["labels"].append(n)
                        rec["accuracy"].append(float(np.mean(classes[proba.argmax(1)] == yt)))
                        rec["nll"].append(float(log_loss(yt, np.clip(proba, 1e-12, 1),
                                                         labels=classes)))
                        if n >= budget:
                            break
                        t0 = time.perf_counter()
                        idx = _query(method, Xp, y, members, min(batch, budget - n), seed)
                        rec["seconds"].append(fit_s + time.perf_counter() - t0)
                        y[idx] = yp[idx]
                records.append(rec)
                log(f"{name} {method} seed {seed}: accuracy {rec['accuracy'][0]:.3f} → "
                    f"{rec['accuracy'][-1]:.3f}, NLL {rec['nll'][0]:.3f} → {rec['nll'][-1]:.3f}"
                    f", {np.median(rec['seconds']):.2f} s/step", flush=True)
                if checkpoint:
                    checkpoint(records)
    return records


def area(labels, values):
    """The mean of a learning curve over its label range (trapezoid rule)."""
    labels, values = np.asarray(labels, float), np.asarray(values, float)
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(labels))
                 / (labels[-1] - labels[0]))


def al_table(records):
    """Markdown: per task and method, areas under accuracy / NLL and seconds per step."""
    al = [r for r in records if r.get("section") == "al"]
    tasks = [t for t in TASKS if any(r["task"] == t for r in al)]
    if not tasks:
        return ""
    lines = ["| task | method | area under accuracy | area under NLL | final accuracy | "
             "final NLL | s / step |", "|---" * 7 + "|"]
    for t in tasks:
        for m in AL_METHODS:
            rows = [r for r in al if r["task"] == t and r["method"] == m]
            if not rows:
                continue
            acc = [area(r["labels"], r["accuracy"]) for r in rows]
            nll = [area(r["labels"], r["nll"]) for r in rows]
            lines.append(
                f"| {t} ({rows[0]['labels'][0]}→{rows[0]['labels'][-1]} labels, "
                f"{len(rows)} seeds) | {m} | {np.mean(acc):.3f} ± {_se(acc):.3f} | "
                f"{np.mean(nll):.3f} ± {_se(nll):.3f} | "
                f"{np.mean([r['accuracy'][-1] for r in rows]):.3f} | "
                f"{np.mean([r['nll'][-1] for r in rows]):.3f} | "
                f"{np.median([s for r in rows for s in r['seconds']]):.2f} |")
    return ("Means over seeds (± standard error); areas are the mean of the test curve over "
            "the label counts:\n\n" + "\n".join(lines) + "\n")


def _se(v):
    return float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0


# ---------------------------------------------------------------- report

def figures(records, prefix):
    """``PREFIX-bo.png`` (median regret per evaluation, quartile band, log scale) and
    ``PREFIX-al.png`` (mean test accuracy per label count); the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    bo = [r for r in records if r.get("section") == "bo"]
    functions = [f for f in FUNCTIONS if any(r["function"] == f for r in bo)]
    if functions:
        fig, axes = plt.subplots(1, len(functions), figsize=(4 * len(functions), 3.2),
                                 squeeze=False)
        for ax, f in zip(axes[0], functions):
            for m, c in regret_curves(bo, f).items():
                c = np.maximum(c, 1e-6)
                q1, med, q3 = np.percentile(c, [25, 50, 75], axis=0)
                steps = np.arange(1, c.shape[1] + 1)
                ax.plot(steps, med, label=m)
                ax.fill_between(steps, q1, q3, alpha=0.2)
            ax.set(yscale="log", title=f, xlabel="evaluations", ylabel="simple regret")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        paths.append(f"{prefix}-bo.png")
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    al = [r for r in records if r.get("section") == "al"]
    tasks = [t for t in TASKS if any(r["task"] == t for r in al)]
    if tasks:
        fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.2), squeeze=False)
        for ax, t in zip(axes[0], tasks):
            for m in AL_METHODS:
                rows = [r for r in al if r["task"] == t and r["method"] == m]
                if rows:
                    ax.plot(rows[0]["labels"], np.mean([r["accuracy"] for r in rows], 0),
                            label=m)
            ax.set(title=t, xlabel="labels", ylabel="test accuracy")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        paths.append(f"{prefix}-al.png")
        fig.savefig(paths[-1], dpi=80)
        plt.close(fig)
    return paths


def add_arguments(parser):
    parser.add_argument("--sections", nargs="+", choices=("bo", "al"), default=["bo", "al"])
    parser.add_argument("--functions", nargs="+", choices=tuple(FUNCTIONS),
                        default=list(FUNCTIONS))
    parser.add_argument("--methods", nargs="+", choices=BO_METHODS, default=list(BO_METHODS),
                        help="surrogates of the Bayesian optimisation")
    parser.add_argument("--evaluations", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0, 1, ... (both sections)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=["digits", "breast_cancer"])
    parser.add_argument("--al-methods", nargs="+", choices=AL_METHODS, default=list(AL_METHODS))
    parser.add_argument("--initial", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--quick", action="store_true",
                        help="a tiny run (one seed, few steps) that checks the command works")
    parser.add_argument("--json", metavar="FILE", help="save the records (after each run)")
    parser.add_argument("--load", nargs="+", metavar="FILE",
                        help="no runs: the report from saved --json files")
    parser.add_argument("--out", metavar="FILE.md")
    parser.add_argument("--figure", metavar="PREFIX", help="PREFIX-bo.png and PREFIX-al.png")
    return parser


def main(args):
    if args.load:
        records = []
        for path in args.load:
            with open(path) as handle:
                records += json.load(handle)["records"]
    else:
        if args.quick:
            args.functions, args.methods, args.evaluations = ["branin"], ["LA", "random",
                                                                          "MLPx5"], 6
            args.tasks, args.al_methods = ["breast_cancer"], ["LA-entropy", "LA-BatchBALD",
                                                              "MLPx5-BALD"]
            args.seeds, args.budget = 1, args.initial + args.batch
        seeds = list(range(args.seeds))
        done = []

        def checkpoint(new):
            if args.json:
                with open(args.json, "w") as handle:
                    json.dump({"args": {k: v for k, v in vars(args).items()
                                        if not k.startswith("_")},
                               "records": done + new}, handle)

        if "bo" in args.sections:
            done += run_bo(args.functions, args.methods, args.evaluations, seeds,
                           checkpoint=checkpoint)
        if "al" in args.sections:
            done += run_al(args.tasks, args.al_methods, seeds, args.initial, args.batch,
                           args.budget, checkpoint=checkpoint)
        records = done
        checkpoint([])
    text = "\n".join(t for t in (bo_tables(records), al_table(records)) if t)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)
    if args.figure:
        for path in figures(records, args.figure):
            print("wrote", path)
    return records
