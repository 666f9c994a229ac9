"""MAP vs Laplace on breast cancer: accuracy, NLL and ECE on a held-out split.

Run: python examples/demo_breast_cancer.py [--plot reliability.png]

The same network is trained once to the MAP; the Laplace approximation is then
fitted post hoc on the frozen net (all weights, full GGN, evidence-tuned prior)
and its probit predictive is compared with the MAP's plain softmax.
"""

import argparse

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.frozen import FrozenEstimator
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklaplace import LaplaceClassifier
from sklaplace.metrics import expected_calibration_error


def map_proba(clf, X):
    """Plain MAP predictive of the fitted net (sigmoid of its single logit)."""
    with torch.no_grad():
        f = clf.net_.module_(torch.as_tensor(X, dtype=torch.float32)).numpy()[:, 0]
    p = 1 / (1 + np.exp(-f))
    return np.column_stack([1 - p, p])


def main(plot=None):
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0,
                                                        stratify=y)
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

    la = LaplaceClassifier(hidden_layer_sizes=(50,), max_epochs=200, prior_precision=1e-2,
                           random_state=0).fit(X_train, y_train)
    rows = {"MAP": map_proba(la, X_test), "LA (probit)": la.predict_proba(X_test)}
    bridge = LaplaceClassifier(FrozenEstimator(la.net_), link_approx="bridge",
                               prior_precision=1e-2).fit(X_train, y_train)
    rows["LA (bridge)"] = bridge.predict_proba(X_test)

    print(f"breast cancer: {len(X_train)} train / {len(X_test)} test rows")
    print(f"LA: {la.subset_of_weights_} weights, {la.hessian_structure_} structure, "
          f"{la.n_params_} parameters, tuned prior precision {la.prior_precision_:.3g}, "
          f"log evidence {la.log_evidence_:.1f}")
    print(f"{'method':<14}{'accuracy':>10}{'NLL':>10}{'ECE':>10}")
    for name, proba in rows.items():
        acc = accuracy_score(y_test, proba.argmax(1))
        nll = log_loss(y_test, proba)
        ece = expected_calibration_error(y_test, proba, n_bins=10)
        print(f"{name:<14}{acc:>10.3f}{nll:>10.3f}{ece:>10.3f}")

    if plot:
        import matplotlib

        matplotlib.use("Agg")
        from sklaplace.plotting import ReliabilityDisplay

        display = ReliabilityDisplay.from_predictions(y_test, rows["MAP"], n_bins=10, name="MAP")
        ReliabilityDisplay.from_predictions(y_test, rows["LA (probit)"], n_bins=10,
                                            name="LA (probit)", ax=display.ax_)
        display.figure_.savefig(plot, dpi=120, bbox_inches="tight")
        print(f"reliability diagram written to {plot}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", metavar="PNG", help="write a reliability diagram here")
    main(parser.parse_args().plot)
