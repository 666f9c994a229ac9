"""Do two commits predict the same bits? ``python scripts/compare_predictions.py OLD NEW``.

Exports each commit (``git archive`` into a temporary directory; a path to a directory
is taken as it is, e.g. ``.`` for the working tree), then runs one child process per
commit, both at once, each with ``PYTHONPATH`` at its export and one thread
(``OMP_NUM_THREADS=1``), which fits a fixed matrix of small seeded configurations
(:data:`CONFIGS`: both estimators, every ``hessian_structure`` and
``subset_of_weights``, ``hidden_layer_sizes="auto"``, candidate lists and explicit
tuples, every ``hyperparameter_tuning``, ``noise="heteroscedastic"``, multilabel y,
``model_averaging=True``) and saves, per configuration, as ``.npy``:

- classifier: ``predict``, ``predict_proba``, ``log_evidence_``, ``prior_precision_``;
- regressor: ``predict``, ``predict(return_std=True)`` (``mean`` and ``std``),
  ``log_evidence_``, ``prior_precision_``, ``sigma_noise_`` (NaN under
  ``noise="heteroscedastic"``, which has none);
- both: ``n_iter_`` (the MAP training's epochs) and the chosen ``hidden_layer_sizes_``.

The two sets of arrays are then compared bitwise (``np.array_equal``, NaN equal to
NaN); where they differ the maximum absolute difference is printed. The exit status is
0 when every output of every configuration is identical, 1 otherwise.

Options: ``--configs NAME ...`` (a part of the matrix), ``--keep DIR`` (keep the
arrays there), ``--list`` (the configurations). The child part alone:
``python scripts/compare_predictions.py --child OUT_DIR [--configs ...]`` fits with
the ``sklaplace`` that ``PYTHONPATH`` gives.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

N_TRAIN, N_TEST, N_FEATURES = 120, 40, 4
SMALL = {"hidden_layer_sizes": (8,), "max_epochs": 40}
AUTO = {"max_epochs": 40}  # hidden_layer_sizes="auto": (), (50,), (50, 50)

#: name → (estimator, task, parameters); the task: "multiclass", "binary", "multilabel",
#: "regression".
CONFIGS = {
    "clf-default": ("classifier", "multiclass", {**AUTO}),
    "clf-binary-default": ("classifier", "binary", {**AUTO}),
    "clf-all-full-evidence": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "full",
        "hyperparameter_tuning": "evidence"}),
    "clf-all-diag-evidence": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "diag",
        "hyperparameter_tuning": "evidence"}),
    "clf-all-kron-cv": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "kron",
        "hyperparameter_tuning": "cv"}),
    "clf-all-lowrank-evidence": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "lowrank",
        "lowrank_rank": 5, "hyperparameter_tuning": "evidence"}),
    "clf-last-layer-full-cv": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "last_layer", "hessian_structure": "full",
        "hyperparameter_tuning": "cv"}),
    "clf-last-layer-kron-none": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "last_layer", "hessian_structure": "kron",
        "hyperparameter_tuning": None, "prior_precision": 3.0}),
    "clf-subnetwork-full-evidence": ("classifier", "multiclass", {
        **SMALL, "subset_of_weights": "subnetwork", "hessian_structure": "full",
        "subnetwork": 20, "hyperparameter_tuning": "evidence"}),
    "clf-subnetwork-diag-cv": ("classifier", "binary", {
        **SMALL, "subset_of_weights": "subnetwork", "hessian_structure": "diag",
        "subnetwork": 20, "hyperparameter_tuning": "cv"}),
    "clf-online": ("classifier", "multiclass", {**SMALL, "hyperparameter_tuning": "online"}),
    "clf-layerwise-evidence": ("classifier", "multiclass", {
        **SMALL, "prior_structure": "layerwise", "hyperparameter_tuning": "evidence"}),
    "clf-candidates-online": ("classifier", "multiclass", {
        **AUTO, "hidden_layer_sizes": [(), (8,), (8, 8)], "hyperparameter_tuning": "online"}),
    "clf-auto-evidence": ("classifier", "binary", {
        **AUTO, "hyperparameter_tuning": "evidence"}),
    "clf-averaging": ("classifier", "multiclass", {
        **AUTO, "hidden_layer_sizes": [(), (8,)], "model_averaging": True}),
    "clf-multilabel": ("classifier", "multilabel", {**AUTO}),
    "clf-multilabel-explicit": ("classifier", "multilabel", {**SMALL}),
    "reg-default": ("regressor", "regression", {**AUTO}),
    "reg-all-full-evidence": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "full",
        "hyperparameter_tuning": "evidence"}),
    "reg-all-diag-online": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "diag",
        "hyperparameter_tuning": "online"}),
    "reg-all-kron-evidence": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "kron",
        "hyperparameter_tuning": "evidence"}),
    "reg-all-lowrank-none": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "all", "hessian_structure": "lowrank",
        "lowrank_rank": 5, "hyperparameter_tuning": None, "sigma_noise": 0.5}),
    "reg-last-layer-full-cv": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "last_layer", "hessian_structure": "full",
        "hyperparameter_tuning": "cv"}),
    "reg-subnetwork-diag-evidence": ("regressor", "regression", {
        **SMALL, "subset_of_weights": "subnetwork", "hessian_structure": "diag",
        "subnetwork": 20, "hyperparameter_tuning": "evidence"}),
    "reg-online-converged": ("regressor", "regression", {
        **SMALL, "hyperparameter_tuning": "online", "online_frequency": "converged"}),
    "reg-online-doubling": ("regressor", "regression", {
        **SMALL, "hyperparameter_tuning": "online", "online_curvature": "doubling"}),
    "reg-auto-cv": ("regressor", "regression", {**AUTO, "hyperparameter_tuning": "cv"}),
    "reg-lbfgs": ("regressor", "regression", {**SMALL, "solver": "lbfgs"}),
    "reg-heteroscedastic": ("regressor", "regression", {**SMALL, "noise": "heteroscedastic"}),
    "reg-heteroscedastic-auto": ("regressor", "regression", {
        **AUTO, "noise": "heteroscedastic"}),
    "reg-averaging": ("regressor", "regression", {
        **AUTO, "hidden_layer_sizes": [(), (8,)], "model_averaging": True}),
}


def data(task):
    """(X_train, y_train, X_test) of a task: seeded, small."""
    rng = np.random.RandomState(0)
    X = rng.randn(N_TRAIN + N_TEST, N_FEATURES)
    score = X[:, 0] + 0.5 * X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.3 * rng.randn(len(X))
    if task == "binary":
        y = (score > 0.5).astype(int)
    elif task == "multiclass":
        y = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    elif task == "multilabel":
        y = np.c_[score > 0.5, X[:, 3] + 0.3 * rng.randn(len(X)) > 0,
                  X[:, 1] * X[:, 2] > 0].astype(int)
    else:
        y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + (0.1 + 0.2 * np.abs(X[:, 2])) * rng.randn(len(X))
    return X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:]


def fit_one(name):
    """{output: array} of configuration ``name``."""
    from sklaplace import LaplaceClassifier, LaplaceRegressor

    kind, task, params = CONFIGS[name]
    X, y, X_test = data(task)
    cls = LaplaceClassifier if kind == "classifier" else LaplaceRegressor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = cls(random_state=0, **params).fit(X, y)
        out = {"predict": est.predict(X_test)}
        if kind == "classifier":
            out["predict_proba"] = est.predict_proba(X_test)
        else:
            out["mean"], out["std"] = est.predict(X_test, return_std=True)
            out["sigma_noise_"] = getattr(est, "sigma_noise_", np.nan)  # (one σ only)
    out["log_evidence_"] = getattr(est, "log_evidence_", np.nan)
    out["prior_precision_"] = est.prior_precision_
    out["n_iter_"] = getattr(est, "n_iter_", -1)
    out["hidden_layer_sizes_"] = str(getattr(est, "hidden_layer_sizes_", None))
    arrays = {k: np.asarray(v) for k, v in out.items()}
    # what .npy cannot hold without pickle (None, objects) is compared by its repr
    return {k: np.asarray(repr(out[k])) if v.dtype.hasobject else v for k, v in arrays.items()}


def run_child(out_dir, names):
    """Fit ``names`` in order; each configuration's outputs go to ``out_dir/name/*.npy``
    (or its error to ``error.txt``). Returns {name: seconds}."""
    import sklaplace

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sklaplace_path.txt").write_text(str(Path(sklaplace.__file__).resolve()))
    seconds = {}
    for name in names:
        where = out_dir / name
        where.mkdir(exist_ok=True)
        start = time.perf_counter()
        try:
            for key, value in fit_one(name).items():
                np.save(where / f"{key}.npy", value, allow_pickle=False)
        except Exception:  # recorded, compared as an output
            (where / "error.txt").write_text(traceback.format_exc(limit=-3))
        seconds[name] = time.perf_counter() - start
    (out_dir / "seconds.json").write_text(json.dumps(seconds, indent=1))
    return seconds


def _max_abs_diff(a, b):
    try:
        d = np.abs(a.astype(float) - b.astype(float))
        return float(np.nanmax(d)) if d.size else 0.0
    except (TypeError, ValueError):
        return float("nan")


def compare(old_dir, new_dir, names):
    """[(config, output, status, detail)]: status "equal", "differ", "missing", "error"."""
    rows = []
    for name in names:
        a, b = Path(old_dir) / name, Path(new_dir) / name
        errors = [(p / "error.txt").read_text().strip().splitlines()[-1]
                  if (p / "error.txt").exists() else None for p in (a, b)]
        if any(errors):
            same = errors[0] == errors[1]
            rows.append((name, "error", "equal" if same else "differ",
                         f"old: {errors[0]} | new: {errors[1]}"))
            continue
        keys = sorted({p.stem for p in a.glob("*.npy")} | {p.stem for p in b.glob("*.npy")})
        for key in keys:
            fa, fb = a / f"{key}.npy", b / f"{key}.npy"
            if not (fa.exists() and fb.exists()):
                rows.append((name, key, "missing", "old" if not fa.exists() else "new"))
                continue
            x, y = np.load(fa), np.load(fb)
            if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
                rows.append((name, key, "differ", f"shape/dtype {x.shape} {x.dtype} vs "
                             f"{y.shape} {y.dtype}"))
            elif np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
                rows.append((name, key, "equal", ""))
            else:
                rows.append((name, key, "differ", f"max |diff| {_max_abs_diff(x, y):.3g}"))
    return rows


def summary(rows, names):
    bad = [r for r in rows if r[2] != "equal"]
    configs_bad = sorted({r[0] for r in bad})
    lines = [f"{len(names)} configurations, {len(rows)} outputs: "
             f"{len(rows) - len(bad)} identical, {len(bad)} not "
             f"({len(names) - len(configs_bad)} of {len(names)} configurations identical)"]
    for name, key, status, detail in bad:
        lines.append(f"  {name}: {key}: {status} {detail}")
    errors = [r for r in rows if r[1] == "error"]
    for name, _, status, detail in errors:
        if status == "equal":
            lines.append(f"  {name}: the same error in both: {detail}")
    return "\n".join(lines)


def export(commit, root, into):
    """A directory holding ``commit``'s tree (or ``commit`` itself if it is a directory)."""
    if Path(commit).is_dir():
        return Path(commit).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="*", metavar="COMMIT")
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--child", metavar="OUT_DIR")
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for name, (kind, task, params) in CONFIGS.items():
            print(f"{name}: {kind} on {task}, {params}")
        return 0
    if args.child:
        run_child(args.child, args.configs)
        return 0
    if len(args.commits) != 2:
        parser.error("give two commits (OLD NEW), or --child OUT_DIR")
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="compare_predictions_") as tmp:
        tmp = Path(tmp)
        out = Path(args.keep) if args.keep else tmp / "out"
        children, dirs = [], []
        start = time.perf_counter()
        for i, commit in enumerate(args.commits):
            tree = export(commit, root, tmp / f"tree{i}")
            dirs.append(out / f"{i}-{commit.replace('/', '_')}")
            env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
            children.append(subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", str(dirs[-1]),
                 "--configs", *args.configs], env=env, cwd=str(tmp)))
        codes = [c.wait() for c in children]
        if any(codes):
            print(f"a child failed: exit codes {codes}")
            return 2
        for commit, d in zip(args.commits, dirs):
            print(f"{commit}: sklaplace from {(d / 'sklaplace_path.txt').read_text()}, "
                  f"{sum(json.loads((d / 'seconds.json').read_text()).values()):.0f} s of fits")
        rows = compare(dirs[0], dirs[1], args.configs)
        print(summary(rows, args.configs))
        print(f"({time.perf_counter() - start:.0f} s in all)")
        return 0 if all(r[2] == "equal" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
