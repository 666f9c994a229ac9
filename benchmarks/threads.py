"""The ``threads`` section of ``python -m benchmarks speed`` (no thread storms).

Times two workloads with torch's default intra-op threads (all cores; the policy
switched off with ``SKLAPLACE_NUM_THREADS=<cores>``) and with sklaplace's thread
policy (see ``sklaplace/estimators/_threads.py``), on the machine as it is ("idle") and beside
one CPU-bound neighbour process (``python -c "while True: pass"``, killed after):

- the default fit on breast cancer (426 training rows, the 30-50-1 MLP),
  ``LaplaceClassifier(hyperparameter_tuning=None)``: small work per operation;
- ``predict_proba`` of an all-weights diagonal LA of a 2×256 ReLU MLP (P ≈ 84k, 10
  classes) on ``n_rows`` rows: large work per operation.

The two settings run interleaved (``timed``), so that load changes hit both alike.
"""

import contextlib
import os
import subprocess
import sys

import numpy as np
import torch

from .speed import load_data, timed

SETTINGS = ("torch default threads", "policy")


@contextlib.contextmanager
def _neighbour(busy):
    """One CPU-bound process beside the timings while ``busy``."""
    if not busy:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def _with_setting(setting, fn):
    def run():
        cores = str(os.cpu_count() or 1)
        saved = os.environ.get("SKLAPLACE_NUM_THREADS")
        if setting == "policy":
            os.environ.pop("SKLAPLACE_NUM_THREADS", None)
        else:
            os.environ["SKLAPLACE_NUM_THREADS"] = cores
        try:
            return fn()
        finally:
            if saved is None:
                os.environ.pop("SKLAPLACE_NUM_THREADS", None)
            else:
                os.environ["SKLAPLACE_NUM_THREADS"] = saved
    return run


def _workloads(n_rows, hidden, epochs, n_train):
    from sklaplace import LaplaceClassifier

    Xtr, _, ytr, _ = load_data("classification")
    Xtr, ytr = Xtr[:n_train], ytr[:n_train]
    rng = np.random.default_rng(0)
    Xb = rng.standard_normal((n_rows, 64)).astype(np.float32)
    yb = np.argmax(Xb[:, :10] + 0.5 * rng.standard_normal((n_rows, 10)), axis=1)
    big = LaplaceClassifier(hidden_layer_sizes=hidden, max_epochs=1, subset_of_weights="all",
                            hessian_structure="diag", hyperparameter_tuning=None,
                            random_state=0).fit(Xb, yb)
    n_weights = big.n_params_
    return {
        f"default fit, breast cancer ({len(Xtr)} rows, {epochs} epochs)":
            lambda: LaplaceClassifier(hyperparameter_tuning=None, max_epochs=epochs,
                                      random_state=0).fit(Xtr, ytr),
        f"predict_proba, all-weights diag, P = {n_weights}, {n_rows} rows":
            lambda: big.predict_proba(Xb),
    }


def section_threads(repeats, out, n_rows=4000, hidden=(256, 256), epochs=200, n_train=None,
                    conditions=("idle", "beside one CPU-bound process")):
    """Append the table; return {(workload, condition): default-threads / policy time}."""
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # torch's default, whatever --threads says
    try:
        workloads = _workloads(n_rows, hidden, epochs, n_train)
        for fn in workloads.values():  # warm-up: the first call pays one-off costs (~5 s)
            fn()
        results = {}
        for condition in conditions:
            with _neighbour(condition != "idle"):
                for name, fn in workloads.items():
                    res = timed({s: _with_setting(s, fn) for s in SETTINGS}, repeats)
                    results[name, condition] = {s: res[s][0] for s in SETTINGS}
    finally:
        torch.set_num_threads(saved_threads)
    out += ["## Threads: torch's default intra-op threads against sklaplace's policy", "",
            f"{os.cpu_count()} cores; medians of {repeats} runs; load average at the end "
            f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} (other processes included).",
            "", "| workload | condition | default threads | policy | default / policy |",
            "|---|---|---|---|---|"]
    ratios = {}
    for (name, condition), t in results.items():
        ratios[name, condition] = t[SETTINGS[0]] / t[SETTINGS[1]]
        out.append(f"| {name} | {condition} | {t[SETTINGS[0]]:.3g} s | {t[SETTINGS[1]]:.3g} s "
                   f"| {ratios[name, condition]:.2f} |")
    if len(conditions) > 1:
        out += ["", "Busy / idle time: " + "; ".join(
            f"{name}, {s}: {results[name, conditions[1]][s] / results[name, conditions[0]][s]:.2f}"
            for name in {n for n, _ in results} for s in SETTINGS)]
    out.append("")
    return ratios
