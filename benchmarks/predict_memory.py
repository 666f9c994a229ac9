"""Peak memory and time of ``predict_proba`` on many rows and classes.

Synthetic data (20 features, ``--classes`` classes, 2,000 training rows), the default
tanh MLP (one hidden layer of 50) trained ``--epochs`` epochs without tuning; then
``predict_proba`` of ``--rows`` rows for each weight subset × structure × link. Each
measurement runs in a fresh process that loads the pickled estimator, warms up on 10
rows, and reads the peak resident set size (``VmHWM``, reset through
``/proc/self/clear_refs``) around one call: torch's CPU allocator is invisible to
tracemalloc, the peak RSS is not. Linux only.
"""

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time

import numpy as np

HELP = "peak memory and time of predict_proba on many rows × classes (fresh processes)"

CONFIGS = [("all", "kron"), ("all", "diag"), ("last_layer", "full")]
LINKS = ["probit", "bridge", "mc"]


def _data(n_rows, n_features, n_classes, seed):
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=2.0, size=(n_classes, n_features))
    y = rng.randint(n_classes, size=n_rows)
    return centers[y] + rng.normal(size=(n_rows, n_features)), y


def _fit(path, subset, structure, args):
    from sklaplace import LaplaceClassifier

    X, y = _data(2000, 20, args.classes, 0)
    est = LaplaceClassifier(subset_of_weights=subset, hessian_structure=structure,
                            hyperparameter_tuning=None, max_epochs=args.epochs, random_state=0)
    est.fit(X, y)
    with open(path, "wb") as fh:
        pickle.dump(est, fh)


def _measure(path, link, n_rows, n_classes):
    """(seconds, peak extra MB) of one predict_proba call in this (fresh) process."""
    from .speed import _read_hwm, _reset_hwm, _rss

    with open(path, "rb") as fh:
        est = pickle.load(fh)
    est.set_params(link_approx=link)
    X, _ = _data(n_rows, 20, n_classes, 1)
    est.predict_proba(X[:10])  # lazy imports, first-call set-up
    if not _reset_hwm():
        raise OSError("cannot reset VmHWM (/proc/self/clear_refs): Linux only")
    base = _rss()
    start = time.perf_counter()
    proba = est.predict_proba(X)
    seconds = time.perf_counter() - start
    peak = (_read_hwm() - base) / 2**20
    assert proba.shape == (n_rows, n_classes)
    return seconds, peak


def add_arguments(parser):
    parser.add_argument("--rows", type=int, default=20_000, help="rows predicted")
    parser.add_argument("--classes", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=5, help="MAP training epochs")
    parser.add_argument("--links", nargs="+", default=LINKS, choices=LINKS)
    parser.add_argument("--configs", type=int, nargs="+", default=None,
                        help="indices into CONFIGS (default: all)")


def main(args):
    configs = CONFIGS if args.configs is None else [CONFIGS[i] for i in args.configs]
    print(f"predict_proba of {args.rows} rows × {args.classes} classes; peak RSS above the "
          "RSS before the call (fresh process per cell)\n")
    print("| weights | structure | link | seconds | peak MB |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for subset, structure in configs:
            path = os.path.join(tmp, f"{subset}-{structure}.pkl")
            _fit(path, subset, structure, args)
            for link in args.links:
                out = subprocess.run(
                    [sys.executable, "-c",
                     "import sys; from benchmarks.predict_memory import _measure; "
                     f"print(*_measure({path!r}, {link!r}, {args.rows}, {args.classes}))"],
                    capture_output=True, text=True, check=True)
                seconds, peak = map(float, out.stdout.split()[-2:])
                print(f"| {subset} | {structure} | {link} | {seconds:.2f} | {peak:.0f} |",
                      flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    main(parser.parse_args())
