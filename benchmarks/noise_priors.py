"""The prior groups of ``noise="heteroscedastic"``, compared on one fit per split.

``python -m benchmarks.noise_priors --datasets yacht energy ...`` fits
``LaplaceRegressor(noise="heteroscedastic", hidden_layer_sizes=(50,))`` (``FIXED``) with one
δ for all weights (the online updates' value, as the estimator did before it tuned δ per
head) on split 0 of the board
(:func:`benchmarks.defaults.split_indices`) and on both PC 1 extrapolation splits
(:func:`benchmarks.shift.pc1_splits`), then re-tunes δ by the evidence on the same
curvature with other groups, and prints per set and grouping the test NLL in
distribution and beyond the range (mean of both directions) and, beyond the range, the
mean squared error of the mean, the epistemic and the aleatoric variance (units of y):

- one δ; per tensor (``prior_structure="layerwise"``); per tensor × head; per head (η₁'s
  rows of the output layer, the log precision's, the rest); per head with η₁'s δ
  searched relative to e^(−2ḡ) — the estimator's.

``--floor``: instead, the estimator's extrapolation NLL with σ²(x) floored at the
training rows' mean σ²(x), on the rows outside the training range (the per-coordinate
range of :mod:`sklaplace._laplace.outside`) and on every row.

``--decompose``: instead, on both PC 1 extrapolation splits, the default, the
heteroscedastic fit with ``FIXED`` and with its architecture chosen: the extrapolation NLL,
the mean squared error of the mean, the epistemic and the aleatoric variance (units of y;
mean of both directions) and the architectures.

``--timing``: instead, the fit times of the default and of the heteroscedastic fit with
the architecture fixed at ``(50,)`` and chosen (``hidden_layer_sizes="auto"``), one after
the other in one process on split 0's training rows, three times each (seconds, the
medians' ratios to the default's, and the architectures chosen).
"""

import argparse
import time
import warnings

import numpy as np
import torch

from sklaplace import LaplaceRegressor
from sklaplace._laplace import natural
from sklaplace._laplace.evidence import maximize_evidence
from sklaplace._laplace.outside import RangeKernel
from sklaplace._laplace.prior import PriorGroups, subset_prior
from sklaplace.estimators import _fitting

from .defaults import load_dataset, make_pipeline, name_seed, split_indices, subsample
from .shift import pc1_splits

#: The heteroscedastic fit of the groupings and the floor: the architecture fixed at (50,),
#: as the estimator had it when they were measured (docs/benchmarks.md).
FIXED = {"noise": "heteroscedastic", "hidden_layer_sizes": (50,)}
GROUPINGS = (("per tensor", "layerwise", False, False),
             ("per tensor × head", "layerwise", True, False),
             ("per head", "scalar", True, False),
             ("per head, η₁ relative (the estimator's)", "scalar", True, True))


def scores(est, X, y):
    """(NLL, mean squared error, epistemic and aleatoric variance), means over rows."""
    d = est.predict_dist(X)
    v = d.epistemic_var + d.aleatoric_var
    nll = np.mean(0.5 * (np.log(2 * np.pi * v) + (y - d.mean) ** 2 / v))
    return np.array([nll, np.mean((y - d.mean) ** 2), np.mean(d.epistemic_var),
                     np.mean(d.aleatoric_var)])


def regrouped(est, X_train):
    """{grouping: the estimator at that grouping's evidence optimum} of a one-δ fit."""
    f = est.laplace_
    heads = natural.head_index(f.subset.module, f.n_outputs)[f.subset.whole_index]
    rows = torch.as_tensor(X_train, dtype=torch.float64)
    g_bar = float(f.subset.forward(rows)[:, f.n_outputs // 2:].mean())
    out = {"one δ": est}
    for label, structure, by_head, relative in GROUPINGS:
        groups = PriorGroups(structure, f.subset, heads if by_head else None)
        offset = (np.where(groups.head_of_groups(heads) == 1, -2 * g_bar, 0.0)
                  if relative else None)
        start = groups.log_start(subset_prior(f.hyper.prior_precision, f.subset)).numpy()
        log_delta, _ = maximize_evidence(f.evidence, start, groups.expand, log_offset=offset)
        out[label] = est._with_prior(groups.expand(torch.as_tensor(np.exp(log_delta))).numpy())
    return out


def run(name):
    X, y = subsample(*load_dataset(name), 2000, name_seed(name))
    seed = name_seed(name)
    fits = {"in": next(iter(split_indices(y, "regression", 2, seed))), **pc1_splits(X)}
    results = {}
    one_delta = _fitting._heads
    _fitting._heads = lambda *args: (None, None)  # the fit with one δ
    try:
        for key, (train, test) in fits.items():
            pipe = make_pipeline(LaplaceRegressor(random_state=seed, **FIXED))
            pipe.fit(X.iloc[train], y[train])
            X_train, X_test = (pipe[:-1].transform(X.iloc[rows]) for rows in (train, test))
            for label, est in regrouped(pipe[-1], X_train).items():
                results.setdefault(label, {})[key] = scores(est, X_test, y[test])
    finally:
        _fitting._heads = one_delta
    for label, r in results.items():
        out = (r["up"] + r["down"]) / 2
        print(f"| {name} | {label} | {r['in'][0]:.3f} | {out[0]:.3f} | {out[1]:.4g} | "
              f"{out[2]:.4g} | {out[3]:.4g} |", flush=True)


def floor(name):
    X, y = subsample(*load_dataset(name), 2000, name_seed(name))
    rows = []
    for train, test in pc1_splits(X).values():
        pipe = make_pipeline(LaplaceRegressor(random_state=name_seed(name), **FIXED))
        pipe.fit(X.iloc[train], y[train])
        X_train, X_test = (pipe[:-1].transform(X.iloc[r]) for r in (train, test))
        at_train, d = pipe[-1].predict_dist(X_train), pipe[-1].predict_dist(X_test)
        low = np.mean(at_train.aleatoric_var)
        outside = RangeKernel.of(torch.as_tensor(X_train)).excess(
            torch.as_tensor(X_test)).abs().sum(1).numpy() > 0
        row = []
        for noise in (d.aleatoric_var, np.where(outside, np.maximum(d.aleatoric_var, low),
                                                d.aleatoric_var),
                      np.maximum(d.aleatoric_var, low)):
            v = d.epistemic_var + noise
            row.append(np.mean(0.5 * (np.log(2 * np.pi * v) + (y[test] - d.mean) ** 2 / v)))
        rows.append(row + [outside.mean()])
    mean = np.mean(rows, 0)
    print(f"{name}: extrapolation NLL {mean[0]:.3f}, σ² floored outside the range {mean[1]:.3f}, "
          f"everywhere {mean[2]:.3f} (rows outside the range: {mean[3]:.0%})", flush=True)


def decompose(name):
    X, y = subsample(*load_dataset(name), 2000, name_seed(name))
    variants = {"default": {}, "hetero, (50,)": FIXED,
                "hetero, auto": {"noise": "heteroscedastic"}}
    for label, params in variants.items():
        rows, sizes = [], []
        for train, test in pc1_splits(X).values():
            pipe = make_pipeline(LaplaceRegressor(random_state=name_seed(name), **params))
            pipe.fit(X.iloc[train], y[train])
            rows.append(scores(pipe[-1], pipe[:-1].transform(X.iloc[test]), y[test]))
            sizes.append(pipe[-1].hidden_layer_sizes_)
        out = np.mean(rows, 0)
        print(f"| {name} | {label} | {sizes[0]}, {sizes[1]} | {out[0]:.3f} | {out[1]:.4g} | "
              f"{out[2]:.4g} | {out[3]:.4g} |", flush=True)


def timing(name, repeats=3):
    X, y = subsample(*load_dataset(name), 2000, name_seed(name))
    train, _ = next(iter(split_indices(y, "regression", 2, name_seed(name))))
    variants = {"default": {}, "hetero, (50,)": FIXED,
                "hetero, auto": {"noise": "heteroscedastic"}}
    times, chosen = {label: [] for label in variants}, {}
    for _ in range(repeats):
        for label, params in variants.items():
            pipe = make_pipeline(LaplaceRegressor(random_state=name_seed(name), **params))
            start = time.perf_counter()
            pipe.fit(X.iloc[train], y[train])
            times[label].append(time.perf_counter() - start)
            chosen[label] = pipe[-1].hidden_layer_sizes_
    median = {k: float(np.median(v)) for k, v in times.items()}
    print(name, {k: np.round(v, 1).tolist() for k, v in times.items()}, "median ratio:",
          {k: round(v / median["default"], 2) for k, v in median.items()}, "sizes:", chosen,
          flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noise_priors")
    parser.add_argument("--datasets", nargs="+", default=["yacht", "energy"])
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--decompose", action="store_true")
    args = parser.parse_args(argv)
    if args.timing or args.floor or args.decompose:
        if args.decompose:
            print("| data set | fit | sizes (up, down) | extrap NLL | extrap (y − μ)² "
                  "| extrap Var μ | extrap σ²(x) |\n|---|---|---|---|---|---|---|")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in args.datasets:
                (timing if args.timing else floor if args.floor else decompose)(name)
        return
    print("| data set | prior groups | NLL | extrap NLL | extrap (y − μ)² | extrap Var μ "
          "| extrap σ²(x) |\n|---|---|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in args.datasets:
            run(name)


if __name__ == "__main__":
    main()
