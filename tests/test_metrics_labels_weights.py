"""Metrics and Displays take labels (as log_loss) and sample_weight: against
scikit-learn's metrics where both exist, else against the same rows repeated."""

import inspect
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

from sklaplace.metrics import (
    crps_gaussian,
    expected_calibration_error,
    gaussian_nll,
    interval_coverage,
    maximum_calibration_error,
    multiclass_brier_score,
    negative_log_likelihood,
    ood_detection_metrics,
    regression_calibration_curve,
    regression_calibration_error,
    reliability_curve,
    sharpness,
)

RNG = np.random.default_rng(0)
N = 60
PROBA = RNG.dirichlet(np.ones(3), size=N)
INDEX = RNG.integers(0, 3, size=N)
CLASSES = np.array(["bird", "cat", "dog"])  # sorted: the column order
WEIGHT = RNG.integers(0, 4, size=N).astype(float)
WEIGHT[0] = 1.0

CLASSIFICATION = [expected_calibration_error, maximum_calibration_error,
                  multiclass_brier_score, negative_log_likelihood]


@pytest.mark.parametrize("metric", CLASSIFICATION + [reliability_curve])
def test_labels_give_the_value_of_column_indices(metric):
    by_index = metric(INDEX, PROBA)
    for labels in (None, CLASSES, CLASSES[::-1], list(CLASSES[[1, 2, 0]])):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            by_label = metric(CLASSES[INDEX], PROBA, labels=labels)  # sorted, as log_loss
        unsorted = labels is not None and list(labels) != list(CLASSES)
        assert len(caught) == unsorted  # warned, as log_loss warns
        assert all("are not sorted" in str(w.message) for w in caught)
        assert_allclose(np.hstack(by_label) if isinstance(by_label, tuple) else by_label,
                        np.hstack(by_index) if isinstance(by_index, tuple) else by_index,
                        rtol=1e-14)


def test_nll_matches_sklearn_with_labels_and_weights():
    y = CLASSES[INDEX]
    for labels in (None, CLASSES):
        for weight in (None, WEIGHT):
            assert_allclose(
                negative_log_likelihood(y, PROBA, labels=labels, sample_weight=weight),
                log_loss(y, PROBA, labels=labels, sample_weight=weight), rtol=1e-13)


@pytest.mark.skipif("scale_by_half" not in inspect.signature(brier_score_loss).parameters,
                    reason="scikit-learn < 1.7's brier_score_loss is binary only")
def test_brier_matches_sklearn_with_labels_and_weights():
    y = CLASSES[INDEX]
    for labels in (None, CLASSES):
        for weight in (None, WEIGHT):
            assert_allclose(
                multiclass_brier_score(y, PROBA, labels=labels, sample_weight=weight),
                brier_score_loss(y, PROBA, labels=labels, sample_weight=weight,
                                 scale_by_half=False), rtol=1e-13)


def test_labels_name_classes_absent_from_y_true():
    y = np.array(["cat", "cat", "dog"])
    p = PROBA[:3]
    assert_allclose(negative_log_likelihood(y, p, labels=CLASSES),
                    log_loss(y, p, labels=CLASSES), rtol=1e-13)
    with pytest.raises(ValueError, match="2 labels .* 3 columns; pass labels="):
        negative_log_likelihood(y, p)
    with pytest.raises(ValueError, match=r"labels not in labels: \['cow'\]"):
        negative_log_likelihood(["cow", "cat", "dog"], p, labels=CLASSES)
    with pytest.raises(ValueError, match="labels must hold 3 distinct labels"):
        negative_log_likelihood(y, p, labels=["cat", "dog"])
    with pytest.raises(ValueError, match="labels must hold 3 distinct labels"):
        negative_log_likelihood(y, p, labels=["cat", "dog", "cat"])


def test_binary_labels_with_a_probability_vector():
    y = np.array(["no", "yes", "yes", "no", "yes"])
    p1 = np.array([0.2, 0.7, 0.9, 0.4, 0.3])
    assert_allclose(negative_log_likelihood(y, p1), log_loss(y, p1), rtol=1e-13)
    assert_allclose(expected_calibration_error(y, p1, n_bins=3),
                    expected_calibration_error((y == "yes").astype(int), p1, n_bins=3))


@pytest.mark.parametrize("metric", CLASSIFICATION)
def test_integer_weights_equal_repeated_rows(metric):
    repeat = WEIGHT.astype(int)
    weighted = metric(CLASSES[INDEX], PROBA, sample_weight=WEIGHT)
    repeated = metric(np.repeat(CLASSES[INDEX], repeat), np.repeat(PROBA, repeat, axis=0))
    assert_allclose(weighted, repeated, rtol=1e-12)


def test_weighted_bins_against_sklearn_accuracy():
    confidence, accuracy, weight = reliability_curve(INDEX, PROBA, n_bins=4,
                                                     sample_weight=WEIGHT)
    top = PROBA.max(axis=1)
    bins = np.searchsorted([0.25, 0.5, 0.75], top, side="left")
    present = [b for b in range(4) if WEIGHT[bins == b].sum() > 0]
    for k, b in enumerate(present):
        rows = bins == b
        assert_allclose(accuracy[k], accuracy_score(INDEX[rows], PROBA[rows].argmax(axis=1),
                                                    sample_weight=WEIGHT[rows]), rtol=1e-13)
        assert_allclose(confidence[k], np.average(top[rows], weights=WEIGHT[rows]), rtol=1e-13)
        assert_allclose(weight[k], WEIGHT[rows].sum())
    ece = expected_calibration_error(INDEX, PROBA, n_bins=4, sample_weight=WEIGHT)
    assert_allclose(ece, np.sum(weight * np.abs(accuracy - confidence)) / WEIGHT.sum())


def test_weighted_quantile_bins_hold_equal_weight():
    weight = np.r_[np.full(30, 3.0), np.ones(30)]
    _, _, mass = reliability_curve(INDEX, PROBA, n_bins=2, strategy="quantile",
                                   sample_weight=weight)
    assert abs(mass[0] - mass[1]) <= weight.max()


def test_weighted_quantile_hand_computed():
    from sklaplace.metrics._classification import _weighted_quantile

    # cumulative shares 0, 1/4, 1/2, 1: level q takes the first value whose share reaches q,
    # and level 0 the first value of positive weight
    edges = _weighted_quantile(np.array([0.4, 0.1, 0.3, 0.2]), np.linspace(0, 1, 5),
                               np.array([2.0, 0.0, 1.0, 1.0]))
    assert_array_equal(edges, [0.2, 0.2, 0.3, 0.4, 0.4])


@pytest.mark.skipif("weights" not in inspect.signature(np.quantile).parameters,
                    reason="NumPy < 2.0's quantile takes no weights")
def test_weighted_quantile_is_numpys_inverted_cdf():
    from sklaplace.metrics._classification import _weighted_quantile

    values = PROBA.max(axis=1).round(2)  # ties
    levels = np.linspace(0, 1, 11)
    for weight in (WEIGHT, np.r_[0.0, WEIGHT[1:]], np.ones(N)):
        assert_array_equal(_weighted_quantile(values, levels, weight),
                           np.quantile(values, levels, weights=weight, method="inverted_cdf"))


REGRESSION = [
    lambda y, m, s, w: gaussian_nll(y, m, s, sample_weight=w),
    lambda y, m, s, w: gaussian_nll(y, m, s, sample_weight=w, multioutput="raw_values"),
    lambda y, m, s, w: crps_gaussian(y, m, s, sample_weight=w, multioutput="raw_values"),
    lambda y, m, s, w: interval_coverage(y, m, s, confidence=0.6, sample_weight=w),
    lambda y, m, s, w: regression_calibration_curve(y, m, s, n_levels=5, sample_weight=w)[1],
    lambda y, m, s, w: regression_calibration_error(y, m, s, n_levels=5, sample_weight=w),
    lambda y, m, s, w: sharpness(s, sample_weight=w),
]


@pytest.mark.parametrize("metric", REGRESSION)
@pytest.mark.parametrize("n_outputs", [1, 2])
def test_regression_integer_weights_equal_repeated_rows(metric, n_outputs):
    shape = (N,) if n_outputs == 1 else (N, n_outputs)
    y, mean = RNG.normal(size=shape), RNG.normal(size=shape)
    std = RNG.uniform(0.5, 2.0, size=shape)
    repeat = WEIGHT.astype(int)
    weighted = metric(y, mean, std, WEIGHT)
    repeated = metric(*(np.repeat(a, repeat, axis=0) for a in (y, mean, std)), None)
    assert_allclose(weighted, repeated, rtol=1e-12)


def test_ood_detection_metrics_integer_weights_equal_repeated_rows():
    y_ood = np.r_[np.zeros(30, dtype=int), np.ones(30, dtype=int)]
    scores = RNG.normal(size=N) + y_ood
    repeat = WEIGHT.astype(int)
    weighted = ood_detection_metrics(y_ood, scores, sample_weight=WEIGHT)
    repeated = ood_detection_metrics(np.repeat(y_ood, repeat), np.repeat(scores, repeat))
    for key in weighted:
        assert_allclose(weighted[key], repeated[key], rtol=1e-12)


@pytest.mark.parametrize("weight", [np.ones(N - 1), -np.ones(N), np.zeros(N),
                                    np.full(N, np.nan), np.ones((N, 1))])
def test_bad_sample_weight(weight):
    with pytest.raises(ValueError, match="sample_weight"):
        negative_log_likelihood(INDEX, PROBA, sample_weight=weight)
    with pytest.raises(ValueError, match="sample_weight"):
        gaussian_nll(np.zeros(N), np.zeros(N), np.ones(N), sample_weight=weight)


def test_displays_take_labels_and_weights():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sklaplace.plotting import RegressionCalibrationDisplay, ReliabilityDisplay

    disp = ReliabilityDisplay.from_predictions(CLASSES[INDEX], PROBA, labels=CLASSES,
                                               sample_weight=WEIGHT, n_bins=4)
    expected = reliability_curve(INDEX, PROBA, n_bins=4, sample_weight=WEIGHT)
    for ours, theirs in zip((disp.confidence, disp.accuracy, disp.counts), expected):
        assert_allclose(ours, theirs)
    y, mean, std = RNG.normal(size=N), RNG.normal(size=N), np.ones(N)
    reg = RegressionCalibrationDisplay.from_predictions(y, mean, std, n_levels=5,
                                                        sample_weight=WEIGHT)
    assert_allclose(reg.observed, regression_calibration_curve(
        y, mean, std, n_levels=5, sample_weight=WEIGHT)[1])
    plt.close("all")
