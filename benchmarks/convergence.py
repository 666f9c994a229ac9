"""MAP training of the default estimators: epochs run, time and test NLL per configuration.

Each configuration (``name=value`` estimator parameters, e.g. ``tol=None`` for the old fixed
200 epochs, ``solver=lbfgs``) fits the default ``LaplaceClassifier`` / ``LaplaceRegressor``
on breast cancer, wine, digits, iris and diabetes (scikit-learn's bundled copies; 25 % of
the rows held out, features standardized, ``random_state=0``) with one torch thread, and
prints the epochs the final training ran, its time (skorch's per-epoch ``dur``), the whole
fit's time, the test NLL and the warnings of the fit.

    python -m benchmarks convergence tol=None "" solver=lbfgs --sets wine
"""

import time
import warnings

import numpy as np

HELP = "epochs, time and test NLL of MAP training (tol, solver) on five small sets"

SETS = ("breast_cancer", "wine", "digits", "iris", "diabetes")


def add_arguments(parser):
    parser.add_argument("configs", nargs="*", default=["tol=None", "", "solver=lbfgs"],
                        help="one argument per configuration: comma-separated name=value "
                             "estimator parameters ('' = the defaults)")
    parser.add_argument("--sets", nargs="*", default=list(SETS), choices=SETS)


def parse_config(text):
    """'tol=None,solver=lbfgs' → {'tol': None, 'solver': 'lbfgs'} (ints and floats parsed)."""
    params = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=", 1)
        for kind in (int, float):
            try:
                params[name] = kind(value)
                break
            except ValueError:
                continue
        else:
            params[name] = None if value == "None" else value
    return params


def run(name, params):
    import torch
    from scipy.stats import norm
    from sklearn import datasets
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from sklaplace import LaplaceClassifier, LaplaceRegressor

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    regression = name == "diabetes"
    est = (LaplaceRegressor if regression else LaplaceClassifier)(random_state=0, **params)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            est.fit(X_train, y_train)
            seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    if regression:
        mean, std = est.predict(X_test, return_std=True)
        nll = -norm.logpdf(y_test, mean, std).mean()
    else:
        nll = log_loss(y_test, est.predict_proba(X_test), labels=est.classes_)
    train = float(np.sum(est.net_.history[:, "dur"]))
    names = sorted({type(w.message).__name__ for w in caught})
    return est.n_iter_, train, seconds, nll, names


def main(args):
    for config in args.configs:
        params = parse_config(config)
        print(f"== {params or 'defaults'}")
        print(f"{'set':14s} {'epochs':>6s} {'train s':>8s} {'fit s':>7s} {'test NLL':>9s}  warnings")
        for name in args.sets:
            epochs, train, seconds, nll, names = run(name, params)
            print(f"{name:14s} {epochs:6d} {train:8.2f} {seconds:7.2f} {nll:9.4f}  "
                  f"{', '.join(names) or '-'}", flush=True)
