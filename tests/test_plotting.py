"""Display objects render under Agg and keep their plotted artists."""

import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from sklaplace.metrics import (  # noqa: E402
    ood_scores,
    regression_calibration_curve,
    reliability_curve,
)
from sklaplace.plotting import (  # noqa: E402
    OODHistogramDisplay,
    RegressionCalibrationDisplay,
    ReliabilityDisplay,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


class _ClassDist:
    def __init__(self, X):
        logits = np.column_stack([X[:, 0], -X[:, 0], 0 * X[:, 0]])
        self._p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)

    def proba(self):
        return self._p

    def entropy(self):
        return -(self._p * np.log(self._p)).sum(1)


class FakeClassifier(BaseEstimator):
    def fit(self, X, y=None):
        self.classes_ = np.array(["a", "b", "c"])
        return self

    def predict_proba(self, X):
        return _ClassDist(np.asarray(X, dtype=float)).proba()

    def predict_dist(self, X):
        return _ClassDist(np.asarray(X, dtype=float))


class FakeRegressor(BaseEstimator):
    def fit(self, X, y=None):
        return self

    def predict(self, X, return_std=False):
        X = np.asarray(X, dtype=float)
        mean, std = X[:, 0], 0.5 + np.abs(X[:, 1])
        return (mean, std) if return_std else mean


RNG = np.random.default_rng(0)
X = RNG.normal(size=(60, 2))
Y_LABELS = np.array(["a", "b", "c"])[RNG.integers(0, 3, size=60)]


def test_reliability_display_from_predictions():
    y_idx = np.searchsorted(["a", "b", "c"], Y_LABELS)
    proba = FakeClassifier().fit(X).predict_proba(X)
    disp = ReliabilityDisplay.from_predictions(y_idx, proba, n_bins=5, name="LA")
    conf, acc, counts = reliability_curve(y_idx, proba, n_bins=5)
    assert isinstance(disp, ReliabilityDisplay)
    assert isinstance(disp.line_, matplotlib.lines.Line2D)
    assert_allclose(disp.line_.get_xdata(), conf)
    assert_allclose(disp.line_.get_ydata(), acc)
    assert_allclose(disp.counts, counts)
    assert disp.ax_.figure is disp.figure_
    labels = disp.ax_.get_legend_handles_labels()[1]
    assert labels == ["Perfectly calibrated", "LA"]
    disp.figure_.canvas.draw()


def test_reliability_display_from_estimator_and_pipeline():
    clf = FakeClassifier().fit(X)
    disp = ReliabilityDisplay.from_estimator(clf, X, Y_LABELS, n_bins=4, strategy="quantile")
    expected = reliability_curve(np.searchsorted(clf.classes_, Y_LABELS), clf.predict_proba(X),
                                 n_bins=4, strategy="quantile")
    assert_allclose(disp.confidence, expected[0])
    assert_allclose(disp.accuracy, expected[1])
    assert disp.estimator_name == "FakeClassifier"

    pipe = Pipeline([("neg", FunctionTransformer(lambda Z: -Z)), ("la", FakeClassifier())]).fit(X)
    fig, ax = plt.subplots()
    disp2 = ReliabilityDisplay.from_estimator(pipe, X, Y_LABELS, ax=ax, color="red")
    assert disp2.ax_ is ax and disp2.estimator_name == "FakeClassifier"
    assert disp2.line_.get_color() == "red"
    # second curve on the same axes: the reference line is drawn once
    disp.plot(ax=ax, name="other")
    assert ax.get_legend_handles_labels()[1].count("Perfectly calibrated") == 1

    with pytest.raises(ValueError, match="not in the estimator's classes_"):
        ReliabilityDisplay.from_estimator(clf, X[:2], ["a", "z"])


def test_reliability_display_plot_directly():
    disp = ReliabilityDisplay([0.3, 0.7], [0.2, 0.9], [5, 5]).plot(ref_line=False)
    assert disp.ax_.get_legend() is None
    assert len(disp.ax_.lines) == 1


def test_regression_calibration_display():
    y = X[:, 0] + RNG.normal(size=60) * (0.5 + np.abs(X[:, 1]))
    reg = FakeRegressor().fit(X)
    disp = RegressionCalibrationDisplay.from_estimator(reg, X, y, n_levels=8)
    mean, std = reg.predict(X, return_std=True)
    expected, observed = regression_calibration_curve(y, mean, std, n_levels=8)
    assert_allclose(disp.line_.get_xdata(), expected)
    assert_allclose(disp.line_.get_ydata(), observed)
    assert disp.estimator_name == "FakeRegressor"
    assert disp.ax_.figure is disp.figure_

    pipe = Pipeline([("id", FunctionTransformer()), ("la", FakeRegressor())]).fit(X)
    disp_p = RegressionCalibrationDisplay.from_estimator(pipe, X, y, n_levels=8)
    assert_allclose(disp_p.observed, observed)

    disp2 = RegressionCalibrationDisplay.from_predictions(y, mean, std, name="LA", ax=disp.ax_)
    assert disp2.ax_ is disp.ax_
    labels = disp.ax_.get_legend_handles_labels()[1]
    assert labels == ["Perfectly calibrated", "FakeRegressor", "LA"]
    disp.figure_.canvas.draw()


def test_ood_histogram_display():
    scores_in, scores_out = RNG.normal(size=40), RNG.normal(2, 1, size=25)
    disp = OODHistogramDisplay.from_scores(scores_in, scores_out, kind="entropy", bins=10)
    assert len(disp.bars_) == 2
    assert all(isinstance(b, matplotlib.container.BarContainer) for b in disp.bars_)
    assert disp.ax_.get_xlabel() == "OOD score: predictive entropy (nats)"
    assert disp.ax_.get_legend_handles_labels()[1] == ["in-distribution", "out-of-distribution"]
    disp.figure_.canvas.draw()

    counts = OODHistogramDisplay.from_scores([0.0, 0.1, 0.9], [1.0], bins=2, density=False)
    # shared edges [0, .5, 1]: in-distribution 2 | 1, OOD 0 | 1
    heights = [[p.get_height() for p in b.patches] for b in counts.bars_]
    assert heights == [[2, 1], [0, 1]]
    assert counts.ax_.get_ylabel() == "Count"


def test_ood_histogram_from_estimator():
    clf = FakeClassifier().fit(X)
    X_out = 5 * RNG.normal(size=(20, 2))
    disp = OODHistogramDisplay.from_estimator(clf, X, X_out, kind="entropy")
    assert_allclose(disp.scores_in, ood_scores(clf, X, kind="entropy"))
    assert_allclose(disp.scores_out, ood_scores(clf, X_out, kind="entropy"))
    assert disp.ax_.get_title() == "FakeClassifier"
    with pytest.raises(ValueError, match="kind must be one of"):
        OODHistogramDisplay.from_estimator(clf, X, X_out, kind="energy")


def test_missing_matplotlib_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="requires matplotlib; pip install matplotlib"):
        ReliabilityDisplay([0.5], [0.5], [1]).plot()
    with pytest.raises(ImportError, match="requires matplotlib"):
        OODHistogramDisplay.from_scores([0.0], [1.0])


def test_matplotlib_not_imported_at_module_level():
    # Static check (a subprocess import would pull in torch and cost seconds): only
    # function bodies may import matplotlib.
    import ast

    import sklaplace.metrics
    import sklaplace.plotting

    for module in (sklaplace.metrics, sklaplace.plotting):
        tree = ast.parse(open(module.__file__).read())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top for a in n.names] + [
            n.module for n in top if isinstance(n, ast.ImportFrom) and n.module
        ]
        assert not any(name.startswith("matplotlib") for name in names), module.__name__
