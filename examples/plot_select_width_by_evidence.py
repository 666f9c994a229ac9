"""
Choosing the hidden width by the evidence
=========================================

Choose the hidden width of an MLP by the Laplace evidence alone (no validation data).

Run it as ``python examples/plot_select_width_by_evidence.py``.

Each candidate is fitted on the training rows only; the log evidence (Laplace
marginal likelihood of the training fit, tuned prior precision) ranks them, and
the held-out NLL is printed beside it to show whether the ranking was right.

The numbers and figures below are those of the run that built this page.
"""

import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier

WIDTHS = (1, 2, 5, 10, 25, 50)


def main():
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0,
                                                        stratify=y)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    print(f"breast cancer, {len(X_train)} training rows; candidates: one tanh hidden layer")
    print(f"{'width':>6}{'params':>8}{'log evidence':>15}{'test NLL':>10}")
    results = []
    for width in WIDTHS:
        clf = LaplaceClassifier(hidden_layer_sizes=(width,), prior_precision=1.0,
                                hyperparameter_tuning="evidence", random_state=0).fit(X_train,
                                                                                      y_train)
        nll = log_loss(y_test, clf.predict_proba(X_test))
        results.append((clf.log_evidence_, nll, width))
        print(f"{width:>6}{clf.n_params_:>8}{clf.log_evidence_:>15.2f}{nll:>10.4f}")
    best = max(results)
    by_nll = min(results, key=lambda r: r[1])
    print(f"selected by evidence: width {best[2]} (test NLL {best[1]:.4f}); "
          f"best test NLL: width {by_nll[2]} ({by_nll[1]:.4f})")
    evidence_rank = np.argsort(np.argsort([-r[0] for r in results]))
    nll_rank = np.argsort(np.argsort([r[1] for r in results]))
    print(f"rank correlation (evidence vs test NLL): {np.corrcoef(evidence_rank, nll_rank)[0, 1]:.2f}")

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(WIDTHS, [r[0] for r in results], marker="o", color="C0")
    ax.set_xscale("log")
    ax.set_xlabel("hidden width")
    ax.set_ylabel("log evidence (training rows)", color="C0")
    ax_nll = ax.twinx()
    ax_nll.plot(WIDTHS, [r[1] for r in results], marker="s", color="C1")
    ax_nll.set_ylabel("test NLL (held-out rows)", color="C1")
    ax.axvline(best[2], color="grey", linestyle=":")
    ax.set_title("Log evidence (training rows only) and test NLL, by width")
    fig.tight_layout()


if __name__ == "__main__":
    main()

    import matplotlib.pyplot as plt

    plt.show()
