"""``python -m benchmarks speed --sections defaults_scale``: the default fits at 10⁴–10⁶ rows.

The default ``LaplaceClassifier()`` against ``MLPClassifier()`` and the default
``LaplaceRegressor()`` against ``MLPRegressor(max_iter=1000)`` on synthetic data of N rows
× 50 float32 features, generated in the timing process by row blocks (no copy of the data
beyond its float32 array): the inputs standard normal, the targets from a fixed random
two-layer tanh teacher (classifier: 3 classes, the argmax of the teacher's logits plus
Gumbel noise; regressor: its output plus N(0, 0.3²) noise). Each timing is a fresh Python
process with the threads a user has, timing ``fit`` alone, then ``predict_proba`` /
``predict(return_std=True)`` of the training rows (the MLP's ``predict_proba`` / ``predict``);
the LA and the MLP alternate run by run, so that the machine's load hits both alike.

Peak memory is the process's peak resident set during ``fit`` (Linux: ``VmHWM`` reset
through ``/proc/self/clear_refs`` after the data are made; elsewhere the process's
lifetime peak), beside the data's size and the resident set before ``fit``.
"""

import json
import os
import statistics
import subprocess
import sys

N_FEATURES, N_CLASSES, BLOCK = 50, 3, 100_000

_CHILD = r"""
import json, os, sys, time, warnings
import numpy as np
from benchmarks.scale_defaults import make_data, peak_rss, reset_peak, rss
task, which, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
params = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
warnings.simplefilter("ignore")
X, y = make_data(task, n)
if which == "LA":
    from sklaplace import LaplaceClassifier, LaplaceRegressor
    est = (LaplaceClassifier if task == "classifier" else LaplaceRegressor)(random_state=0,
                                                                            **params)
else:
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    est = MLPClassifier(random_state=0) if task == "classifier" else MLPRegressor(
        max_iter=1000, random_state=0)
before, cleared = rss(), reset_peak()
t = time.perf_counter()
est.fit(X, y)
fit = time.perf_counter() - t
fit_peak = peak_rss(cleared)
t = time.perf_counter()
if task == "classifier":
    est.predict_proba(X)
elif which == "LA":
    est.predict(X, return_std=True)
else:
    est.predict(X)
print(json.dumps({"fit": fit, "predict": time.perf_counter() - t, "before": before,
                  "fit_peak": fit_peak, "peak": peak_rss(cleared), "data": X.nbytes,
                  "epochs": int(getattr(est, "n_iter_", 0)), "cleared": cleared}))
"""


def make_data(task, n, seed=0):
    """(X float32 (n, 50), y) of the teacher (module docstring), made by row blocks; the
    teacher is the same for every ``seed`` (which draws the rows)."""
    import numpy as np

    teacher = np.random.default_rng(12345)
    W1 = teacher.normal(size=(N_FEATURES, 32)) / np.sqrt(N_FEATURES)
    W2 = teacher.normal(size=(32, N_CLASSES if task == "classifier" else 1)) * 1.5
    rng = np.random.default_rng(seed)
    X = np.empty((n, N_FEATURES), dtype=np.float32)
    y = np.empty(n, dtype=np.int64 if task == "classifier" else np.float32)
    for start in range(0, n, BLOCK):
        rows = slice(start, min(start + BLOCK, n))
        X[rows] = rng.standard_normal((rows.stop - start, N_FEATURES), dtype=np.float32)
        out = np.tanh(X[rows] @ W1) @ W2
        if task == "classifier":
            y[rows] = np.argmax(out + rng.gumbel(size=out.shape), axis=1)
        else:
            y[rows] = out[:, 0] + 0.3 * rng.standard_normal(len(out))
    return X, y


def rss():
    """The resident set now (bytes; Linux), else None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def reset_peak():
    """Reset the peak resident set (Linux ``clear_refs``); whether it was reset."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss(cleared):
    """The peak resident set (bytes) since :func:`reset_peak`, or the lifetime peak."""
    if cleared:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    import resource

    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _run(task, which, n, params=None):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    extra = [json.dumps(params)] if params and which == "LA" else []
    out = subprocess.run([sys.executable, "-c", _CHILD, task, which, str(n), *extra], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def _gib(b):
    return f"{b / 2**30:.2f}"


def section_defaults_scale(out, rows=(10_000, 100_000), repeats=1, tasks=None, params=None):
    """Append the table of the default fits against scikit-learn's MLP at each N of ``rows``
    (``params``: the LA's parameters other than its defaults, the MLP then not run)."""
    tasks = ("classifier", "regressor") if tasks is None else tasks
    title = "Default fits" if not params else f"Fits with {json.dumps(params)}"
    out += [f"## {title} at 10⁴–10⁶ rows against scikit-learn's MLP "
            "(fresh processes, default threads)", "",
            "| estimator | N | LA fit (s) | MLP fit (s) | LA / MLP | LA epochs | MLP epochs "
            "| LA predict (s) | MLP predict (s) | data (GiB) | LA fit peak (GiB) "
            "| MLP fit peak (GiB) | load (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for n in rows:
        for task in tasks:
            runs = {"LA": [], "MLP": []}
            load = []
            for _ in range(repeats):
                for which in ("LA",) if params else ("LA", "MLP"):
                    load.append(os.getloadavg()[0])
                    runs[which].append(_run(task, which, n, params))
            missing = {"fit": float("nan"), "predict": float("nan"), "fit_peak": float("nan"),
                       "epochs": float("nan")}
            cell = {w: {k: statistics.median(r[k] for r in runs[w]) if runs[w] else missing[k]
                        for k in missing} for w in runs}
            la, mlp = cell["LA"], cell["MLP"]
            out.append(
                f"| {task} | {n:,} | {la['fit']:.1f} | {mlp['fit']:.1f} | "
                f"{la['fit'] / mlp['fit']:.2f} | {la['epochs']:.0f} | {mlp['epochs']:.0f} | "
                f"{la['predict']:.2f} | {mlp['predict']:.2f} | "
                f"{_gib(runs['LA'][0]['data'])} | {_gib(la['fit_peak'])} | "
                f"{_gib(mlp['fit_peak'])} | {min(load):.1f}–{max(load):.1f} |")
            print(out[-1], flush=True)
    out.append("")
    out.append(f"Median of {repeats} run(s) per cell, LA and MLP alternating. LA epochs: the "
               "final training's (the classifier's held-out pass trains on 80 % of the rows "
               "before it). Peak: the fit's peak resident set, the process's own (imports, "
               "data and fit).\n")
