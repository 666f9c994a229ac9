"""
Online evidence tuning against a grid of retrained networks
===========================================================

Online evidence tuning (Immer et al. 2021, Alg. 1) against a grid of retrained MAPs.

Run it as ``python examples/plot_online_vs_grid.py``.

For diabetes (regression) and breast cancer (classification), 20 log-spaced
prior precisions δ each retrain the MAP (``hyperparameter_tuning=None``) and
give a log evidence; E* is the best.  One online run tunes δ (and σ) during
training and keeps the state of its best update (as laplace-torch's
``marglik_training`` does).  The online run should reach E* within 1 % and a
test NLL no worse than the evidence-selected grid model's + 0.02 nats.  For
regression the online run starts from σ = std(y_train), and the grid uses the
noise σ that the online run found (a 1-D grid over δ); both are given in units of the
standardized target (``normalize_y=True``).

The numbers and figures below are those of the run that built this page.
"""

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.metrics import gaussian_nll

GRID = np.logspace(-2, 3, 20)


def split(X, y, stratify):
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, random_state=0, stratify=y if stratify else None)
    scaler = StandardScaler().fit(X_train)
    return scaler.transform(X_train), scaler.transform(X_test), y_train, y_test


def test_nll(est, X, y):
    if isinstance(est, LaplaceClassifier):
        return log_loss(y, est.predict_proba(X))
    mean, std = est.predict(X, return_std=True)
    return gaussian_nll(y, mean, std)


def compare(name, make, X, y, classification, ax):
    X_train, X_test, y_train, y_test = split(X, y, classification)
    # sigma_noise is in units of the standardized target (normalize_y=True, the default):
    # start at σ = std(y_train), and give the grid the online σ in those units.
    start = {} if classification else {"sigma_noise": 1.0}
    online = make(hyperparameter_tuning="online", **start).fit(X_train, y_train)
    extra = {} if classification else {"sigma_noise": online.sigma_noise_ / np.std(y_train)}
    grid = [make(hyperparameter_tuning=None, prior_precision=d, **extra).fit(X_train, y_train)
            for d in GRID]
    evidences = np.array([g.log_evidence_ for g in grid])
    best = grid[int(evidences.argmax())]
    e_star, e_online = evidences.max(), online.log_evidence_
    nll_best, nll_online = test_nll(best, X_test, y_test), test_nll(online, X_test, y_test)
    print(f"\n{name}: grid of {len(GRID)} δ in [{GRID[0]:g}, {GRID[-1]:g}]")
    print(f"  grid best  δ = {best.prior_precision_:.4g}: log evidence E* = {e_star:.2f}, "
          f"test NLL {nll_best:.4f}")
    best_epoch = max(online.evidence_history_, key=lambda h: h["log_evidence"])["epoch"]
    print(f"  online     δ = {np.round(online.prior_precision_, 4)}: log evidence {e_online:.2f}, "
          f"test NLL {nll_online:.4f} (state of epoch {best_epoch})")
    ok_e = e_online >= e_star - 0.01 * abs(e_star)
    ok_nll = nll_online <= nll_best + 0.02
    print(f"  online ≥ E* − 1%|E*|: {ok_e};  online NLL ≤ grid NLL + 0.02: {ok_nll}")
    ax.plot(GRID, evidences, marker=".", label="grid: a network retrained per δ")
    ax.plot(np.mean(online.prior_precision_), e_online, "r*", markersize=14,
            label="one online run")
    ax.set_xscale("log")
    ax.set_xlabel("prior precision δ")
    ax.set_ylabel("log evidence")
    ax.set_title(name)
    ax.legend(fontsize=8)
    return ok_e and ok_nll


def main():
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    X, y = load_diabetes(return_X_y=True)
    reg_ok = compare("diabetes (regression)",
                     lambda **kw: LaplaceRegressor(random_state=0, **kw),
                     X, y, classification=False, ax=axes[0])
    X, y = load_breast_cancer(return_X_y=True)
    clf_ok = compare("breast cancer (classification)",
                     lambda **kw: LaplaceClassifier(random_state=0, **kw),
                     X, y, classification=True, ax=axes[1])
    print("\nall criteria met:", reg_ok and clf_ok)
    fig.tight_layout()


if __name__ == "__main__":
    main()

    import matplotlib.pyplot as plt

    plt.show()
