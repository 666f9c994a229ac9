"""Speed benchmark: sklaplace against laplace-torch and against the MAP baseline.

Sections of the report (all timings are medians over ``--repeats`` runs, the
two libraries interleaved run by run so that machine load hits both alike):

1. ``laplace-torch``: on the same pretrained 2×50 tanh MLP (a skorch net fitted
   once and passed to sklaplace as ``FrozenEstimator``, and to laplace-torch as
   a float64 copy of its module) and the same data — breast cancer
   (classification, two softmax logits) and diabetes (regression) — the time of
   LA fit + evidence tuning of a scalar prior precision + the GLM predictive on
   the test set, for last-layer kron / full and all-weights kron / diag / full.
   laplace-torch runs ``optimize_prior_precision(method="marglik",
   prior_structure="scalar")`` with its default 100 Adam steps. sklaplace's
   time includes its decompositions. The tuned log evidences of both are
   reported per row: it is the same work only where they agree. Regression:
   sklaplace also tunes σ (its default); laplace-torch then gets σ fixed at
   sklaplace's optimum and tunes δ only (the joint optimum is the δ-optimum at
   that σ, so the evidences agree when both reach the optimum).
2. MAP baseline: ``fit`` of the default estimator against the MAP training of
   its own net alone, ``predict_proba`` against a MAP forward pass
   (``module(X)`` under ``no_grad``), for last layer + kron and for "auto".
3. Scaling: LA fit time (frozen net) against N (data tiled ×1, ×2, ×4, ×8 with
   small jitter) and against the width of the 2-layer MLP.
4. Evidence tuning alone (all weights + full, 2×50 tanh MLP, breast cancer),
   after the decomposition, in sklaplace and laplace-torch.
5. ``predict_proba`` with ``link_approx="bridge"`` against ``"mc"`` with 1000
   samples.
6. ``scale`` (not in the default sections): fit and predict of both libraries at
   N = ``--scale-rows`` on ``--device`` (default: cuda if present, else cpu); see
   :mod:`benchmarks.scale`.
7. ``backends`` (not in the default sections): our curvature pass for nn.Linear
   nets against BackPACK's on the same net and data.
8. ``threads`` (not in the default sections): torch's default threads against
   sklaplace's thread policy, idle and beside a CPU-bound process; see
   :mod:`benchmarks.threads`.
9. ``sklearn`` (not in the default sections): the default ``LaplaceClassifier`` /
   ``LaplaceRegressor`` fit against ``MLPClassifier`` / ``MLPRegressor(max_iter=1000)`` in
   fresh processes with the threads a user has, idle and beside a CPU-bound process; see
   :mod:`benchmarks.vs_sklearn`.
10. ``defaults_scale`` (not in the default sections): the default estimators against
    scikit-learn's MLP at ``--defaults-scale-rows`` rows (time, epochs, peak memory); see
    :mod:`benchmarks.scale_defaults`.
11. ``dask`` (not in the default sections): fit and predict on dask collections on 1 and 2
    ``LocalCluster`` workers beside the same fit in memory at ``--dask-rows`` rows; see
    :mod:`benchmarks.dask_scale`. ``dask_defaults``: the default classifier (architecture
    and δ chosen on held-out rows) in memory and on dask partitions at ``--dask-rows``.

Peak memory is the growth of the process's peak resident set size during a
run (``VmHWM`` reset through ``/proc/self/clear_refs``; Linux only, else
``tracemalloc``, which misses torch's allocations).

laplace-torch is optional (``pip install sklaplace[bench]``; it imports only
with torchvision uninstalled beside a CPU torch); without it its columns are
skipped with a message.
"""

import argparse
import copy
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

#: laplace-torch's phase times (fit, tune) of the last run per (kind, subset, structure)
LT_PHASES = {}

HELP = "time sklaplace against laplace-torch and against MAP training / forward passes"

CONFIGS = [("last_layer", "kron"), ("last_layer", "full"), ("all", "kron"), ("all", "diag"),
           ("all", "full")]


# ---------------------------------------------------------------- measurement
def _read_hwm():
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(fn):
    """(seconds, peak extra bytes, result) of one call of ``fn``."""
    if _reset_hwm() and _read_hwm() is not None:
        base = _rss()
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        return elapsed, max(0, _read_hwm() - base), out
    import tracemalloc

    tracemalloc.start()
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return elapsed, peak, out


def timed(fns, repeats):
    """Run the callables of ``fns`` (dict) interleaved ``repeats`` times.

    The order alternates between rounds (forward, then reversed), so that what a call
    leaves behind (caches, allocator state, CPU frequency) does not favour one side.
    Returns {name: (median seconds, max peak bytes, last result)}.
    """
    times = {k: [] for k in fns}
    peaks = {k: 0 for k in fns}
    last = {}
    for round_ in range(repeats):
        for name, fn in list(fns.items())[::1 if round_ % 2 == 0 else -1]:
            t, m, out = measure(fn)
            times[name].append(t)
            peaks[name] = max(peaks[name], m)
            last[name] = out
    return {k: (statistics.median(times[k]), peaks[k], last[k]) for k in fns}


def settle_allocator():
    """Raise glibc's mmap threshold before timing short calls, for both sides alike.

    glibc serves buffers above a dynamic threshold (128 KiB at start) with fresh
    ``mmap`` pages, so a process that has never freed a large buffer page-faults
    every MB-sized tensor of every call (≈2.5 µs per page on this VM: more than the
    arithmetic).  Freeing one 16 MiB buffer raises the threshold, as any earlier
    large computation in a real process does.
    """
    torch.empty(2**22, dtype=torch.float32).fill_(0)


def timed_steady(fns, rounds, calls):
    """Per-call median seconds of short callables, each timed in its own steady state.

    ``rounds`` rounds, interleaved; in each, ``calls`` back-to-back calls of one
    callable, of which the second half is timed.  Returns {name: median seconds}.
    """
    settle_allocator()
    per_round = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            per_round[name].append(statistics.median(times[calls // 2:]))
    return {k: statistics.median(v) for k, v in per_round.items()}


def _mb(n_bytes):
    return f"{n_bytes / 2**20:.0f}"


def _fmt(t):
    return f"{t * 1e3:.1f}" if t < 10 else f"{t:.1f} s"


def machine_description():
    model = platform.processor() or "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"CPU: {model}; {os.cpu_count()} cores, no GPU; torch {torch.__version__}, "
            f"{torch.get_num_threads()} torch thread(s); load average (1/5/15 min) {load}")


# ---------------------------------------------------------------- data and nets
def load_data(kind, seed=0):
    from sklearn.datasets import load_breast_cancer, load_diabetes
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if kind == "classification":
        X, y = load_breast_cancer(return_X_y=True)
    else:
        X, y = load_diabetes(return_X_y=True)
        y = (y - y.mean()) / y.std()
    X = StandardScaler().fit_transform(X)
    strat = y if kind == "classification" else None
    return train_test_split(X, y, test_size=0.2, random_state=seed, stratify=strat)


def pretrained_net(kind, X, y, hidden=(50, 50), epochs=200, seed=0):
    """A skorch 2×50 tanh MLP trained once (float32), two logits or one output."""
    from skorch import NeuralNetClassifier, NeuralNetRegressor

    from sklaplace._laplace.nets import MLP

    torch.manual_seed(seed)
    common = dict(module=MLP, module__n_features=X.shape[1], module__hidden_layer_sizes=hidden,
                  optimizer=torch.optim.Adam, lr=1e-2, max_epochs=epochs, batch_size=128,
                  train_split=None, verbose=0)
    if kind == "classification":
        net = NeuralNetClassifier(criterion=torch.nn.CrossEntropyLoss, module__n_outputs=2,
                                  **common)
        return net.fit(X.astype(np.float32), y.astype(np.int64))
    net = NeuralNetRegressor(criterion=torch.nn.MSELoss, module__n_outputs=1, **common)
    return net.fit(X.astype(np.float32), y.reshape(-1, 1).astype(np.float32))


def laplace_available():
    try:
        import laplace  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure means "skip"
        return f"{type(error).__name__}: {error}"
    return None


# ---------------------------------------------------------------- the two libraries
def run_sklaplace(kind, net, Xtr, ytr, Xte, subset, structure):
    from sklearn.frozen import FrozenEstimator

    from sklaplace import LaplaceClassifier, LaplaceRegressor

    params = dict(net=FrozenEstimator(net), subset_of_weights=subset,
                  hessian_structure=structure, prior_structure="scalar",
                  hyperparameter_tuning="evidence", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "classification":
            est = LaplaceClassifier(**params).fit(Xtr, ytr)
            pred = est.predict_proba(Xte)
        else:
            est = LaplaceRegressor(**params).fit(Xtr, ytr)
            pred = est.predict(Xte, return_std=True)
    return est, pred


def run_laplace_torch(kind, net, Xtr, ytr, Xte, subset, structure, sigma=1.0):
    from laplace import Laplace

    model = copy.deepcopy(net.module_).to(torch.float64).eval()
    X = torch.tensor(Xtr, dtype=torch.float64)
    if kind == "classification":
        y = torch.tensor(ytr, dtype=torch.long)
        likelihood = "classification"
    else:
        y = torch.tensor(ytr, dtype=torch.float64).reshape(-1, 1)
        likelihood = "regression"
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y),
                                         batch_size=len(X))
    phases = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        la = Laplace(model, likelihood, subset_of_weights=subset, hessian_structure=structure,
                     sigma_noise=sigma)
        la.fit(loader)
        phases["fit"] = time.perf_counter() - start
        la.optimize_prior_precision(method="marglik", prior_structure="scalar")
        phases["tune"] = time.perf_counter() - start - phases["fit"]
        Xt = torch.tensor(Xte, dtype=torch.float64)
        if kind == "classification":
            pred = la(Xt, pred_type="glm", link_approx="probit")
        else:
            pred = la(Xt, pred_type="glm")
    LT_PHASES[(kind, subset, structure)] = phases
    return la, pred


def section_laplace_torch(repeats, missing, out):
    out.append("## 1. sklaplace vs laplace-torch (LA fit + scalar evidence tuning + GLM predictive)\n")
    if missing:
        out.append(f"laplace-torch is not importable ({missing}); its columns are skipped. "
                   "Install it with `pip install sklaplace[bench]` and uninstall torchvision.\n")
    out.append("| data | subset | structure | sklaplace ms | laplace-torch ms | ratio | "
               "sklaplace peak MB | laplace-torch peak MB | log Z sklaplace | log Z laplace-torch "
               "| δ sklaplace | δ laplace-torch |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for kind, name in (("classification", "breast cancer"), ("regression", "diabetes")):
        Xtr, Xte, ytr, yte = load_data(kind)
        net = pretrained_net(kind, Xtr, ytr)
        for subset, structure in CONFIGS:
            est, _ = run_sklaplace(kind, net, Xtr, ytr, Xte, subset, structure)  # warm-up
            sigma = getattr(est, "sigma_noise_", 1.0)
            fns = {"sk": lambda: run_sklaplace(kind, net, Xtr, ytr, Xte, subset, structure)}
            slow = (subset, structure) == ("all", "full")
            if not missing:
                lt = lambda: run_laplace_torch(kind, net, Xtr, ytr, Xte, subset,  # noqa: E731
                                               structure, float(sigma))
                if slow:  # minutes per run: one run, no warm-up
                    res = timed(fns, repeats)
                    res.update(timed({"lt": lt}, 1))
                else:
                    lt()
                    fns["lt"] = lt
                    res = timed(fns, repeats)
            else:
                res = timed(fns, repeats)
            t_sk, m_sk, (est, _) = res["sk"]
            row = [name, subset, structure, _fmt(t_sk)]
            if missing:
                row += ["–", "–", _mb(m_sk), "–", f"{est.log_evidence_:.2f}", "–",
                        f"{est.prior_precision_:.3g}", "–"]
            else:
                t_lt, m_lt, (la, _) = res["lt"]
                logz = float(la.log_marginal_likelihood())
                ratios[(name, subset, structure)] = t_sk / t_lt
                row += [_fmt(t_lt), f"{t_sk / t_lt:.3f}", _mb(m_sk), _mb(m_lt),
                        f"{est.log_evidence_:.2f}", f"{logz:.2f}",
                        f"{est.prior_precision_:.3g}", f"{float(la.prior_precision):.3g}"]
            out.append("| " + " | ".join(row) + " |")
            print(out[-1], flush=True)
    out.append("")
    out.append(f"Medians over {repeats} interleaved runs after a warm-up run; laplace-torch "
               "all weights + full: one run (minutes each). Peak MB: growth of the peak "
               "resident set during the run (0 = within memory already held).\n")
    return ratios


# ---------------------------------------------------------------- MAP baseline
def section_map_baseline(repeats, out):
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    from sklaplace import LaplaceClassifier
    from sklaplace._laplace import nets

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    out.append("## 2. Against the MAP baseline (default MLP 1×50 tanh, 200 epochs, "
               f"breast cancer N={len(X)})\n")
    out.append("| configuration | LA fit ms | MAP training ms | fit ratio | predict_proba ms | "
               "MAP forward ms | predict ratio | predict_proba ×16 rows ms | forward ×16 ms | "
               "ratio ×16 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")

    def map_training():
        net = nets.default_net(X.shape[1], 1, (50,), 200, 1e-2, 128)
        return nets.train_map(net, X, y.astype(np.float32), likelihood="bernoulli",
                              temperature=1.0, sigma_noise=np.asarray(1.0), prior_precision=1.0,
                              seed=0)

    results = {}
    for label, params in (("last layer + kron", dict(subset_of_weights="last_layer",
                                                     hessian_structure="kron")),
                          ('"auto"', {})):
        def fit(params=params):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return LaplaceClassifier(random_state=0, **params).fit(X, y)

        fit()
        res = timed({"fit": fit, "map": map_training}, repeats)
        est = res["fit"][2]
        module = est.net_.module_

        def forward():
            with torch.no_grad():
                return module(torch.as_tensor(X, dtype=torch.float32))

        pres = timed_steady({"proba": lambda: est.predict_proba(X), "forward": forward},
                            4 * repeats, 40)
        X16 = np.tile(X, (16, 1))

        def forward16():
            with torch.no_grad():
                return module(torch.as_tensor(X16, dtype=torch.float32))

        pres16 = timed_steady({"proba": lambda: est.predict_proba(X16), "forward": forward16},
                              4 * repeats, 20)
        t_fit, t_map = res["fit"][0], res["map"][0]
        t_pred, t_fwd = pres["proba"], pres["forward"]
        t_pred16, t_fwd16 = pres16["proba"], pres16["forward"]
        label = f"{label} ({est.subset_of_weights_} + {est.hessian_structure_}, P={est.n_params_})"
        results[label] = (t_fit / t_map, t_pred / t_fwd)
        out.append(f"| {label} | {_fmt(t_fit)} | {_fmt(t_map)} | {t_fit / t_map:.3f} | "
                   f"{t_pred * 1e3:.3f} | {t_fwd * 1e3:.3f} | {t_pred / t_fwd:.2f} | "
                   f"{t_pred16 * 1e3:.2f} | {t_fwd16 * 1e3:.2f} | {t_pred16 / t_fwd16:.2f} |")
        print(out[-1], flush=True)
    out.append("\nLA fit = the whole `LaplaceClassifier.fit` (MAP training included); MAP "
               "training = `nets.train_map` of the same default net alone. predict_proba on "
               f"all {len(X)} rows (and on the data tiled ×16, {16 * len(X)} rows) against "
               "`module(X)` under `no_grad` (its float32 cast of X included), each timed in "
               "steady state (`timed_steady`: back-to-back calls, interleaved rounds, medians) "
               "after `settle_allocator`.\n")
    return results


# ---------------------------------------------------------------- scaling
def section_scaling(repeats, out):
    from sklearn.datasets import load_breast_cancer
    from sklearn.frozen import FrozenEstimator
    from sklearn.preprocessing import StandardScaler

    from sklaplace import LaplaceClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    net = pretrained_net("classification", X, y)
    rng = np.random.RandomState(0)
    configs = [("last_layer", "kron"), ("last_layer", "full"), ("all", "kron"), ("all", "diag"),
               ("all", "full")]

    def la_fit(Xn, yn, subset, structure, net=net):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return LaplaceClassifier(FrozenEstimator(net), subset_of_weights=subset,
                                     hessian_structure=structure).fit(Xn, yn)

    out.append("## 3. Scaling of the LA fit (frozen 2×50 tanh net, breast cancer, LA fit + "
               "scalar evidence tuning)\n")
    out.append("### With N (data tiled ×k with jitter N(0, 0.01²))\n")
    out.append("| subset | structure | " + " | ".join(f"×{k} (N={k * len(X)}) ms" for k in
                                                      (1, 2, 4, 8)) + " | ×8 / ×1 | peak MB ×1 → ×8 |")
    out.append("|---|---|---|---|---|---|---|---|")
    tiled = {k: (np.tile(X, (k, 1)) + 0.01 * rng.randn(k * len(X), X.shape[1]) * (k > 1),
                 np.tile(y, k)) for k in (1, 2, 4, 8)}
    growth = {}
    for subset, structure in configs:
        times, peaks = [], []
        for k in (1, 2, 4, 8):
            Xn, yn = tiled[k]
            la_fit(Xn, yn, subset, structure)
            t, peak, _ = timed({"f": lambda: la_fit(Xn, yn, subset, structure)}, repeats)["f"]
            times.append(t)
            peaks.append(peak)
        growth[(subset, structure)] = times[-1] / times[0]
        out.append(f"| {subset} | {structure} | " + " | ".join(_fmt(t) for t in times) +
                   f" | {times[-1] / times[0]:.1f} | {_mb(peaks[0])} → {_mb(peaks[-1])} |")
        print(out[-1], flush=True)
    out.append("\n### With width (2 hidden layers of width H, N=569)\n")
    widths = (25, 50, 100, 200)
    out.append("| subset | structure | " + " | ".join(f"H={h} ms" for h in widths) + " |")
    out.append("|---|---|---|---|---|---|")
    wnets = {h: pretrained_net("classification", X, y, hidden=(h, h), epochs=50) for h in widths}
    for subset, structure in configs:
        cells = []
        for h in widths:
            n_all = 30 * h + h + h * h + h + 2 * h + 2
            if structure == "full" and subset == "all" and n_all > 6000:
                cells.append(f"– (P={n_all})")
                continue
            la_fit(X, y, subset, structure, wnets[h])
            t = timed({"f": lambda: la_fit(X, y, subset, structure, wnets[h])}, repeats)["f"][0]
            cells.append(_fmt(t))
        out.append(f"| {subset} | {structure} | " + " | ".join(cells) + " |")
        print(out[-1], flush=True)
    out.append("")
    return growth


# ---------------------------------------------------------------- evidence alone
def section_evidence_alone(repeats, missing, out):
    from sklaplace._laplace.evidence import maximize_evidence

    Xtr, Xte, ytr, _ = load_data("classification")
    net = pretrained_net("classification", Xtr, ytr)
    est, _ = run_sklaplace("classification", net, Xtr, ytr, Xte, "all", "full")
    evidence = est.laplace_.evidence

    def tune_sk():
        return maximize_evidence(evidence, [0.0], lambda v: v[0])

    res = timed({"sk": tune_sk}, repeats)
    t_sk = res["sk"][0]
    key = ("classification", "all", "full")
    if not missing and key not in LT_PHASES:
        run_laplace_torch("classification", net, Xtr, ytr, Xte, "all", "full")
    if not missing:
        res["lt"] = (LT_PHASES[key]["tune"], 0, None)
    out.append("## 4. Evidence tuning alone (all weights + full, 2×50 tanh MLP, breast cancer, "
               f"P={est.n_params_}, N={len(Xtr)})\n")
    out.append("| sklaplace ms | laplace-torch ms | speed-up |")
    out.append("|---|---|---|")
    if missing:
        out.append(f"| {t_sk * 1e3:.2f} | – | – |")
        speedup = None
    else:
        t_lt = res["lt"][0]
        speedup = t_lt / t_sk
        out.append(f"| {t_sk * 1e3:.2f} | {_fmt(t_lt)} | {speedup:.0f}× |")
    out.append("\nsklaplace: bounded L-BFGS-B on log δ over the eigenvalues computed in fit "
               "(O(r) per step), median over repeats; laplace-torch: 100 Adam steps, each a "
               "log-determinant of its P × P posterior precision, timed inside the section-1 "
               "run (one run).\n")
    print(out[-2], flush=True)
    return speedup


# ---------------------------------------------------------------- bridge vs MC
def section_bridge(repeats, out):
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler

    from sklaplace import LaplaceClassifier

    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = LaplaceClassifier(max_epochs=50, subset_of_weights="last_layer",
                                hessian_structure="full", random_state=0).fit(X, y)
    bridge = est.set_params(link_approx="bridge").predict_dist(X)
    mc = dataclasses.replace(bridge, link="mc", n_samples=1000)

    def pp(link, n):
        est.set_params(link_approx=link, n_samples=n)
        return est.predict_proba(X)

    res = timed({"bridge": lambda: pp("bridge", 100), "mc": lambda: pp("mc", 1000),
                 "bridge_link": bridge.proba, "mc_link": mc.proba}, repeats)
    out.append(f"## 5. Laplace bridge vs MC (1000 samples): digits, N={len(X)}, C=10, "
               "last layer + full\n")
    out.append("| what | bridge ms | mc (1000) ms | speed-up |")
    out.append("|---|---|---|---|")
    for what, a, b in (("predict_proba", "bridge", "mc"), ("link only (proba of the logit "
                                                           "Gaussian)", "bridge_link", "mc_link")):
        ta, tb = res[a][0], res[b][0]
        out.append(f"| {what} | {ta * 1e3:.2f} | {tb * 1e3:.1f} | {tb / ta:.0f}× |")
    out.append("\npredict_proba includes the GLM moments (shared by both links); \"link only\" "
               "times `predict_dist(X).proba()` on a precomputed logit Gaussian.\n")
    print("\n".join(out[-4:]), flush=True)
    return res["mc_link"][0] / res["bridge_link"][0]


# ---------------------------------------------------------------- curvature backends
def section_backends(repeats, out, n_large=20_000):
    """Our own KFLR / diagonal pass for nets of nn.Linear layers
    against BackPACK's (``DiagGGNExact``, ``KFLR``) on the same net, data and likelihood,
    GGN, all weights: the curvature alone (no decomposition), and the largest relative
    difference of the results (they compute the same quantity)."""
    from sklearn.datasets import load_breast_cancer, load_diabetes
    from sklearn.preprocessing import StandardScaler

    from sklaplace._laplace import likelihoods
    from sklaplace._laplace._backpack import backpack_diag, backpack_kron
    from sklaplace._laplace.layer_factors import kron_blocks_of_rows, linear_diag
    from sklaplace._laplace.subsets import AllWeights

    rng = np.random.RandomState(0)
    cases = []
    for kind, loader in (("classification", load_breast_cancer), ("regression", load_diabetes)):
        X, y = loader(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        if kind == "regression":
            y = (y - y.mean()) / y.std()
        net = pretrained_net(kind, X, y)
        name = "breast cancer" if kind == "classification" else "diabetes"
        cases.append((name, kind, net, X, y))
        k = -(-n_large // len(X))
        Xl = (np.tile(X, (k, 1)) + 0.01 * rng.randn(k * len(X), X.shape[1]))[:n_large]
        cases.append((f"{name} tiled, N={n_large}", kind, net, Xl, np.tile(y, k)[:n_large]))

    out.append("## 7. Curvature backends: our nn.Linear pass against BackPACK (GGN, all "
               "weights, 2×50 tanh, curvature alone)\n")
    out.append("| data | structure | ours ms | BackPACK ms | BackPACK / ours | peak MB ours / "
               "BackPACK | max rel. diff |")
    out.append("|---|---|---|---|---|---|---|")
    ratios = {}
    for name, kind, net, X, y in cases:
        module = copy.deepcopy(net.module_).double().eval()
        subset = AllWeights(module)
        Xt = torch.as_tensor(X, dtype=torch.float64)
        if kind == "classification":
            lik, yt = likelihoods.get("categorical"), torch.as_tensor(y)
        else:
            lik, yt = likelihoods.get("gaussian"), torch.as_tensor(y, dtype=torch.float64)[:, None]
        n_out = 2 if kind == "classification" else 1
        scale = torch.ones(n_out, dtype=torch.float64)
        fns = {
            "diag": {"ours": lambda: linear_diag(subset, lik, Xt, yt, scale, "ggn"),
                     "backpack": lambda: backpack_diag(subset, lik, Xt, yt, scale)},
            "kron": {"ours": lambda: kron_blocks_of_rows(subset, subset.linear_layers(), lik, Xt,
                                                         yt, scale, "ggn"),
                     "backpack": lambda: backpack_kron(subset, lik, Xt, yt, scale)},
        }
        for structure, pair in fns.items():
            res = timed(pair, repeats)
            ours, theirs = res["ours"], res["backpack"]
            if structure == "diag":
                diff = float(((ours[2] - theirs[2]).abs() / ours[2].abs().max()).max())
            else:
                mine = [f for _, factors in ours[2] for f in factors]
                other = [f for _, factors in theirs[2] for f in factors]
                diff = max(float((a - b).abs().max() / a.abs().max())
                           for a, b in zip(mine, other))
            ratios[(name, structure)] = theirs[0] / ours[0]
            out.append(f"| {name} | {structure} | {_fmt(ours[0])} | {_fmt(theirs[0])} | "
                       f"{theirs[0] / ours[0]:.2f} | {_mb(ours[1])} / {_mb(theirs[1])} | "
                       f"{diff:.1e} |")
            print(out[-1], flush=True)
    out.append("")
    return ratios


# ---------------------------------------------------------------- CLI
def add_arguments(parser):
    parser.add_argument("--repeats", type=int, default=5, help="runs per timing (median)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both libraries (default 1: less noise on a "
                             "shared machine)")
    parser.add_argument("--sections", nargs="+", default=["laplace", "map", "scaling",
                                                          "evidence", "bridge"],
                        choices=["laplace", "map", "scaling", "evidence", "bridge", "scale",
                                 "backends", "threads", "sklearn", "defaults_scale",
                                 "dask", "dask_defaults"])
    parser.add_argument("--scale-rows", type=int, nargs="+", default=[100_000],
                        help="scale section: training rows (one table per value)")
    parser.add_argument("--device", default=None,
                        help="scale section: torch device (default: cuda if available, else cpu)")
    parser.add_argument("--scale-configs", type=int, nargs="+", default=None,
                        help="scale section: indices into scale.CONFIGS (default: all)")
    parser.add_argument("--no-peer", action="store_true",
                        help="scale section: skip laplace-torch")
    parser.add_argument("--sklearn-sets", nargs="+", default=None,
                        help="sklearn section: data sets (default: the five bundled with "
                             "scikit-learn; 'all': every scoreboard set)")
    parser.add_argument("--sklearn-params", type=json.loads, default=None, metavar="JSON",
                        help="sklearn section: the LA's parameters as JSON (default: none)")
    parser.add_argument("--sklearn-no-busy", action="store_true",
                        help="sklearn section: time idle only (no run beside a CPU-bound "
                             "process)")
    parser.add_argument("--defaults-scale-rows", type=int, nargs="+",
                        default=[10_000, 100_000],
                        help="defaults_scale section: training rows (one row per value)")
    parser.add_argument("--defaults-scale-tasks", nargs="+", default=None,
                        choices=["classifier", "regressor"],
                        help="defaults_scale section: estimators (default: both)")
    parser.add_argument("--dask-rows", type=int, nargs="+", default=[10_000],
                        help="dask section: training rows (one row per value)")
    parser.add_argument("--dask-epochs", type=int, default=20,
                        help="dask section: L-BFGS epochs of every fit")
    parser.add_argument("--defaults-scale-params", default=None,
                        help="defaults_scale section: the LA's parameters as JSON (e.g. "
                             "'{\"max_epochs\": 2}' for a memory check of the LA's stages); "
                             "the MLP runs (and its columns) are then skipped")
    parser.add_argument("--out", default=None, help="write the markdown report here")


def _scale_sections(args, missing, out):
    from .scale import CONFIGS, section_scale

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    configs = None if args.scale_configs is None else [CONFIGS[i] for i in args.scale_configs]
    for n_rows in args.scale_rows:
        section_scale(out, n_rows, device, configs, peer=not (missing or args.no_peer))


def _threads_section(repeats, out):
    from .threads import section_threads

    section_threads(repeats, out)


def _sklearn_section(repeats, out, sets=None, busy=True, params=None):
    from .defaults import DATASETS
    from .vs_sklearn import SETS, section_sklearn

    section_sklearn(repeats, out, SETS if not sets else DATASETS if sets == ["all"] else sets,
                    busy=busy, params=params)


def _defaults_scale_section(args, out):
    from .scale_defaults import section_defaults_scale

    params = None if args.defaults_scale_params is None else json.loads(
        args.defaults_scale_params)
    section_defaults_scale(out, args.defaults_scale_rows, args.repeats,
                           args.defaults_scale_tasks, params)


def _dask_section(args, out):
    from .dask_scale import section_dask

    section_dask(out, args.dask_rows, args.dask_epochs)


def _dask_defaults_section(args, out):
    from .dask_scale import section_dask_defaults

    section_dask_defaults(out, args.dask_rows)


def main(args):
    torch.set_num_threads(args.threads)
    missing = laplace_available()
    if missing:
        print(f"laplace-torch not importable ({missing}): its columns are skipped.",
              file=sys.stderr)
    out = ["# sklaplace speed benchmark\n",
           f"Command: `python -m benchmarks speed {' '.join(sys.argv[2:])}`".rstrip(),
           "", f"Machine: {machine_description()}", ""]
    sections = {
        "laplace": lambda: section_laplace_torch(args.repeats, missing, out),
        "map": lambda: section_map_baseline(args.repeats, out),
        "scaling": lambda: section_scaling(args.repeats, out),
        "evidence": lambda: section_evidence_alone(args.repeats, missing, out),
        "bridge": lambda: section_bridge(args.repeats, out),
        "scale": lambda: _scale_sections(args, missing, out),
        "backends": lambda: section_backends(args.repeats, out),
        "threads": lambda: _threads_section(args.repeats, out),
        "sklearn": lambda: _sklearn_section(args.repeats, out, args.sklearn_sets,
                                            busy=not args.sklearn_no_busy,
                                            params=args.sklearn_params),
        "defaults_scale": lambda: _defaults_scale_section(args, out),
        "dask": lambda: _dask_section(args, out),
        "dask_defaults": lambda: _dask_defaults_section(args, out),
    }
    failed = False
    for name in args.sections:
        try:
            sections[name]()
        except Exception as error:  # noqa: BLE001 - report, keep the other sections
            failed = True
            out.append(f"\nSection {name!r} failed: {type(error).__name__}: {error}\n")
            print(out[-1], file=sys.stderr, flush=True)
        if args.out:  # written after every section: a long run leaves partial results
            with open(args.out, "w") as fh:
                fh.write("\n".join(out) + "\n")
    out.append(f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    text = "\n".join(out) + "\n"
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    add_arguments(p)
    main(p.parse_args())
