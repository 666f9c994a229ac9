"""Tests of sklaplace.metrics against hand-computed cases, published definitions and sklearn.

Fake estimators and distribution objects stand in for the Laplace estimators.
"""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import integrate, stats
from sklearn.base import BaseEstimator
from sklearn.calibration import calibration_curve
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    average_precision_score,
    brier_score_loss,
    log_loss,
    roc_auc_score,
)
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from sklaplace.metrics import (
    crps_gaussian,
    evidence_scorer,
    expected_calibration_error,
    gaussian_nll,
    interval_coverage,
    maximum_calibration_error,
    multiclass_brier_score,
    negative_log_likelihood,
    ood_detection_metrics,
    ood_scores,
    regression_calibration_curve,
    regression_calibration_error,
    reliability_curve,
    sharpness,
)

# Five samples, three classes. Top-label confidence / predicted class / correct:
#   s0 .40 / 0 / y=0 yes     s1 .45 / 1 / y=2 no     s2 .90 / 0 / y=0 yes
#   s3 .70 / 1 / y=1 yes     s4 .60 / 2 / y=0 no
Y3 = np.array([0, 2, 0, 1, 0])
P3 = np.array(
    [
        [0.40, 0.30, 0.30],
        [0.20, 0.45, 0.35],
        [0.90, 0.05, 0.05],
        [0.10, 0.70, 0.20],
        [0.20, 0.20, 0.60],
    ]
)


# ------------------------------------------------------------------ classification


def test_ece_mce_uniform_hand_computed():
    # Guo et al. (2017): bins ((b-1)/B, b/B], ECE = sum_b n_b/n |acc_b - conf_b|.
    # B = 2: bin (0, .5] = {s0, s1}: conf (.40+.45)/2 = .425, acc 1/2 -> |.5-.425| = .075
    #        bin (.5, 1] = {s2, s3, s4}: conf 2.2/3, acc 2/3 -> |.2/3| = .0667
    # ECE = 2/5 * .075 + 3/5 * .2/3 = .03 + .04 = .07;  MCE = max(.075, .0667) = .075
    assert_allclose(expected_calibration_error(Y3, P3, n_bins=2), 0.07)
    assert_allclose(maximum_calibration_error(Y3, P3, n_bins=2), 0.075)
    conf, acc, counts = reliability_curve(Y3, P3, n_bins=2)
    assert_allclose(conf, [0.425, 2.2 / 3])
    assert_allclose(acc, [0.5, 2 / 3])
    assert_allclose(counts, [2, 3])


def test_ece_mce_quantile_hand_computed():
    # Equal-mass bins: edges = quantiles of the confidences at 0, .5, 1 = [.40, .60, .90],
    # right-closed: bin 1 = {.40, .45, .60} = {s0, s1, s4}, bin 2 = {.70, .90} = {s3, s2}.
    # bin 1: conf 1.45/3, acc 1/3 -> |.15| ;  bin 2: conf .8, acc 1 -> |.2|
    # ECE = 3/5 * .15 + 2/5 * .2 = .09 + .08 = .17;  MCE = .2
    assert_allclose(expected_calibration_error(Y3, P3, n_bins=2, strategy="quantile"), 0.17)
    assert_allclose(maximum_calibration_error(Y3, P3, n_bins=2, strategy="quantile"), 0.2)
    _, _, counts = reliability_curve(Y3, P3, n_bins=2, strategy="quantile")
    assert_allclose(counts, [3, 2])


def test_bins_are_right_closed():
    # conf .5 falls in (0, .5] with two bins; .7 in (.6, .7] with ten bins, even though
    # .7 * 10 = 7.000000000000001 in floating point.
    p = np.array([[0.5, 0.25, 0.25], [0.7, 0.2, 0.1], [0.65, 0.2, 0.15], [0.75, 0.2, 0.05]])
    y = np.zeros(4, dtype=int)
    _, _, counts = reliability_curve(y, p, n_bins=2)
    assert_allclose(counts, [1, 3])
    conf, _, counts = reliability_curve(y, p, n_bins=10)
    assert_allclose(counts, [1, 2, 1])  # {.5}, {.65, .7}, {.75}
    assert_allclose(conf, [0.5, 0.675, 0.75])


def test_binary_probability_vector():
    # p1 = [.2, .6, .9, .4], y = [0, 1, 0, 0]: confidences [.8, .6, .9, .6], predictions
    # [0, 1, 1, 0], correct [1, 1, 0, 1]. Two bins: all in (.5, 1]: conf 2.9/4 = .725,
    # acc .75 -> ECE = .025.
    y = np.array([0, 1, 0, 0])
    p1 = np.array([0.2, 0.6, 0.9, 0.4])
    assert_allclose(expected_calibration_error(y, p1, n_bins=2), 0.025)
    p2 = np.column_stack([1 - p1, p1])
    assert_allclose(expected_calibration_error(y, p2, n_bins=7),
                    expected_calibration_error(y, p1, n_bins=7))


def test_reliability_curve_matches_sklearn_calibration_curve_when_top_label_is_class_1():
    # With P(class 1) > .5 everywhere, top-label confidence = p1 and correct = (y == 1), so
    # the curve is sklearn's calibration_curve (same right-closed uniform bins).
    rng = np.random.default_rng(0)
    p1 = rng.uniform(0.51, 1.0, size=200)
    y = (rng.uniform(size=200) < p1 ** 2).astype(int)
    conf, acc, _ = reliability_curve(y, p1, n_bins=10)
    prob_true, prob_pred = calibration_curve(y, p1, n_bins=10)
    assert_allclose(conf, prob_pred)
    assert_allclose(acc, prob_true)


def test_ece_zero_for_calibrated_bins():
    # All 8 confidences are .75 (one bin) and 6 of 8 predictions are right: ECE = MCE = 0.
    p = np.array([[0.75, 0.25]] * 4 + [[0.25, 0.75]] * 4)
    y = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    assert expected_calibration_error(y, p) == pytest.approx(0.0)
    assert maximum_calibration_error(y, p) == pytest.approx(0.0)


def test_brier_hand_computed_and_sklearn():
    # Rows [.7,.2,.1] (y=0): .3^2 + .2^2 + .1^2 = .14 ; [.1,.8,.1] (y=0): .81 + .64 + .01 = 1.46
    # mean = .8  (class 2 never occurs in y_true: labels come from y_prob's columns)
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    assert_allclose(multiclass_brier_score([0, 0], p), 0.8)
    # Binary: twice sklearn's binary Brier score mean((p1 - y)^2).
    rng = np.random.default_rng(1)
    p1 = rng.uniform(size=30)
    y = rng.integers(0, 2, size=30)
    assert_allclose(multiclass_brier_score(y, p1), 2 * brier_score_loss(y, p1))
    assert_allclose(multiclass_brier_score(y, np.column_stack([1 - p1, p1])),
                    2 * brier_score_loss(y, p1))


def test_nll_hand_computed_and_sklearn():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
    assert_allclose(negative_log_likelihood([0, 2], p), -(np.log(0.7) + np.log(0.1)) / 2)
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(40, 4))
    proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = rng.integers(0, 4, size=40)
    assert_allclose(negative_log_likelihood(y, proba), log_loss(y, proba, labels=range(4)))
    p1 = rng.uniform(0.05, 0.95, size=40)
    yb = rng.integers(0, 2, size=40)
    assert_allclose(negative_log_likelihood(yb, p1), log_loss(yb, p1))


@pytest.mark.parametrize(
    "y, p, match",
    [
        ([0, 1], np.full((3, 2), 0.5), "different numbers of samples"),
        # labels that are not column indices must name every column (as in log_loss)
        ([0, 3], np.full((2, 3), 1 / 3), "2 labels .* 3 columns; pass labels="),
        ([-1, 0], np.full((2, 3), 1 / 3), "2 labels .* 3 columns; pass labels="),
        (["a", "b"], np.full((2, 3), 1 / 3), "2 labels .* 3 columns; pass labels="),
        ([0.5, 1], np.full((2, 3), 1 / 3), "2 labels .* 3 columns; pass labels="),
        ([0, 1], np.full((2, 1), 0.5), "y_prob must have shape"),
        ([0, 1], np.full((2, 2, 2), 0.5), "y_prob must have shape"),
        ([0, 1], np.array([[1.2, -0.2], [0.5, 0.5]]), r"\[0, 1\]"),
        ([[0], [1]], np.full((2, 2), 0.5), "y_true must be 1-D"),
    ],
)
@pytest.mark.parametrize(
    "metric",
    [expected_calibration_error, maximum_calibration_error, reliability_curve,
     multiclass_brier_score, negative_log_likelihood],
)
def test_classification_bad_inputs(metric, y, p, match):
    with pytest.raises(ValueError, match=match):
        metric(y, p)


@pytest.mark.parametrize(
    "metric", [expected_calibration_error, maximum_calibration_error, reliability_curve]
)
def test_bad_binning_arguments(metric):
    for n_bins in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_bins"):
            metric(Y3, P3, n_bins=n_bins)
    with pytest.raises(ValueError, match="strategy"):
        metric(Y3, P3, strategy="kmeans")


# ------------------------------------------------------------------ regression


def test_gaussian_nll():
    # y = mean: 0.5 log(2 pi) + log(std); with std = 1, y - mean = 2: .5 log(2 pi) + 2
    assert_allclose(gaussian_nll([0.0], [0.0], [1.0]), 0.5 * np.log(2 * np.pi))
    assert_allclose(gaussian_nll([2.0, 0.0], [0.0, 0.0], [1.0, 2.0]),
                    0.5 * np.log(2 * np.pi) + (2 + np.log(2)) / 2)
    rng = np.random.default_rng(3)
    y, m, s = rng.normal(size=25), rng.normal(size=25), rng.uniform(0.1, 2, size=25)
    assert_allclose(gaussian_nll(y, m, s), -stats.norm(m, s).logpdf(y).mean())


def test_crps_closed_form_hand_value():
    # At y = mu, sigma = 1: 2 phi(0) - 1/sqrt(pi) = (sqrt(2) - 1) / sqrt(pi)
    assert_allclose(crps_gaussian([0.0], [0.0], [1.0]), (np.sqrt(2) - 1) / np.sqrt(np.pi))
    # Scales with sigma, is translation invariant.
    assert_allclose(crps_gaussian([3.0], [3.0], [2.5]), 2.5 * (np.sqrt(2) - 1) / np.sqrt(np.pi))


@pytest.mark.parametrize("y, mu, sigma", [(0.3, 0.0, 1.0), (-2.0, 1.0, 0.5), (5.0, 4.0, 3.0)])
def test_crps_matches_numerical_integration(y, mu, sigma):
    # Gneiting & Raftery (2007): CRPS(F, y) = int (F(x) - 1[x >= y])^2 dx.
    F = stats.norm(mu, sigma).cdf
    left, _ = integrate.quad(lambda x: F(x) ** 2, -np.inf, y)
    right, _ = integrate.quad(lambda x: (F(x) - 1) ** 2, y, np.inf)
    assert_allclose(crps_gaussian([y], [mu], [sigma]), left + right, rtol=1e-7)


def test_interval_coverage_hand_computed():
    # 95% interval of N(0, 1) = [-1.95996, 1.95996]: y = 0, 1 inside, 3 outside.
    coverage, width = interval_coverage([0.0, 1.0, 3.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    assert coverage == pytest.approx(2 / 3)
    assert width == pytest.approx(2 * 1.959963984540054)


def test_interval_coverage_on_matching_normal_draws():
    rng = np.random.default_rng(4)
    n = 20_000
    mean = rng.normal(size=n)
    std = rng.uniform(0.5, 2.0, size=n)
    y = rng.normal(mean, std)
    for confidence in (0.5, 0.9, 0.95):
        coverage, width = interval_coverage(y, mean, std, confidence=confidence)
        se = np.sqrt(confidence * (1 - confidence) / n)
        assert abs(coverage - confidence) < 4 * se
        assert width == pytest.approx(2 * stats.norm.ppf(0.5 + confidence / 2) * std.mean())


def test_regression_calibration_error_hand_computed():
    # Kuleshov et al. (2018): cal = sum_j (p_j - p̂_j)^2, p̂_j = mean 1[F_t(y_t) <= p_j].
    # n_levels = 2 -> p = [.25, .75]. y = [0, 1, -1, 2] under N(0, 1): F(y) = [.5, .841,
    # .159, .977]. p̂ = [1/4, 2/4] -> cal = 0 + (.75 - .5)^2 = .0625
    y = np.array([0.0, 1.0, -1.0, 2.0])
    expected, observed = regression_calibration_curve(y, np.zeros(4), np.ones(4), n_levels=2)
    assert_allclose(expected, [0.25, 0.75])
    assert_allclose(observed, [0.25, 0.5])
    assert_allclose(regression_calibration_error(y, np.zeros(4), np.ones(4), n_levels=2), 0.0625)


def test_regression_calibration_calibrated_vs_overconfident():
    rng = np.random.default_rng(5)
    y = rng.normal(size=5000)
    m, s = np.zeros_like(y), np.ones_like(y)
    assert regression_calibration_error(y, m, s) < 5e-3  # E ~ sum_j p_j(1-p_j)/n = 3e-4
    expected, observed = regression_calibration_curve(y, m, 0.3 * s)
    # Too-narrow predictive: more mass below low quantiles, less below high ones.
    assert observed[0] > expected[0] + 0.1 and observed[-1] < expected[-1] - 0.1
    assert regression_calibration_error(y, m, 0.3 * s) > 0.1


def test_sharpness():
    # uncertainty-toolbox: sqrt(mean(std^2)); std = [1, 2, 2] -> sqrt(9/3)
    assert sharpness([1.0, 2.0, 2.0]) == pytest.approx(np.sqrt(3))
    with pytest.raises(ValueError, match="std"):
        sharpness([1.0, 0.0])


def test_multioutput_regression():
    rng = np.random.default_rng(6)
    y, m = rng.normal(size=(20, 3)), rng.normal(size=(20, 3))
    s = rng.uniform(0.5, 1.5, size=(20, 3))
    for metric in (gaussian_nll, crps_gaussian):
        raw = metric(y, m, s, multioutput="raw_values")
        assert raw.shape == (3,)
        assert_allclose(raw, [metric(y[:, k], m[:, k], s[:, k]) for k in range(3)])
        assert_allclose(metric(y, m, s), raw.mean())
    # coverage / calibration pool all entries
    pooled = interval_coverage(y.ravel(), m.ravel(), s.ravel())
    assert interval_coverage(y, m, s) == pytest.approx(pooled)
    # scalar std broadcasts
    assert_allclose(gaussian_nll(y, m, 2.0), gaussian_nll(y, m, np.full_like(y, 2.0)))


@pytest.mark.parametrize(
    "metric", [gaussian_nll, crps_gaussian, interval_coverage, regression_calibration_curve,
               regression_calibration_error]
)
def test_regression_bad_inputs(metric):
    y = np.zeros(4)
    with pytest.raises(ValueError, match="mean must have the shape"):
        metric(y, np.zeros(3), np.ones(4))
    with pytest.raises(ValueError, match="std must have the shape"):
        metric(y, np.zeros(4), np.ones(3))
    with pytest.raises(ValueError, match="std must be finite and strictly positive"):
        metric(y, np.zeros(4), np.array([1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="y_true must have shape"):
        metric(np.zeros((2, 2, 2)), np.zeros((2, 2, 2)), np.ones((2, 2, 2)))


def test_regression_bad_options():
    y = np.zeros(4)
    for confidence in (0, 1, 1.5, -0.1, "0.9"):
        with pytest.raises(ValueError, match="confidence"):
            interval_coverage(y, y, y + 1, confidence=confidence)
    with pytest.raises(ValueError, match="n_levels"):
        regression_calibration_error(y, y, y + 1, n_levels=0)
    with pytest.raises(ValueError, match="multioutput"):
        gaussian_nll(y, y, y + 1, multioutput="variance_weighted")


# ------------------------------------------------------------------ OOD


class FakeClassDist:
    """Stands in for the classification predict_dist object."""

    def __init__(self, X):
        self.X = np.asarray(X, dtype=float)
        logits = np.column_stack([self.X[:, 0], -self.X[:, 0], np.zeros(len(self.X))])
        self._p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)

    def proba(self):
        return self._p

    def entropy(self):
        return -(self._p * np.log(self._p)).sum(1)

    def mutual_information(self):
        return self.X[:, 1] ** 2

    def dirichlet(self):
        alpha = np.exp(self.X[:, :3]) + 0.1
        attrs = {"alpha": alpha, "precision": alpha.sum(1),
                 "mean": alpha / alpha.sum(1, keepdims=True)}
        return type("FakeDirichlet", (), attrs)()


class FakeRegDist:
    def __init__(self, X):
        X = np.asarray(X, dtype=float)
        self.mean = X[:, :2]
        self.std = np.abs(X[:, 1:3]) + 0.5
        self.var = self.std**2
        self.epistemic_var = self.var / 2
        self.aleatoric_var = self.var / 2


class FakeLaplaceClassifier(BaseEstimator):
    def fit(self, X, y=None):
        self.classes_ = np.array([0, 1, 2])
        return self

    def predict_dist(self, X):
        return FakeClassDist(X)

    def predict_proba(self, X):
        return FakeClassDist(X).proba()


class FakeLaplaceRegressor(BaseEstimator):
    def __init__(self, n_outputs=2):
        self.n_outputs = n_outputs

    def fit(self, X, y=None):
        return self

    def predict_dist(self, X):
        dist = FakeRegDist(X)
        if self.n_outputs == 1:
            dist.mean, dist.std = dist.mean[:, 0], dist.std[:, 0]
        return dist


X_OOD = np.random.default_rng(7).normal(size=(12, 3))


def test_ood_scores_classification_kinds():
    est = FakeLaplaceClassifier().fit(X_OOD)
    d = FakeClassDist(X_OOD)
    assert_allclose(ood_scores(est, X_OOD), 1 - d.proba().max(1))
    assert_allclose(ood_scores(est, X_OOD, kind="entropy"), d.entropy())
    assert_allclose(ood_scores(est, X_OOD, kind="mutual_information"), X_OOD[:, 1] ** 2)
    assert_allclose(ood_scores(est, X_OOD, kind="dirichlet_precision"),
                    -np.log((np.exp(X_OOD) + 0.1).sum(1)))
    with pytest.raises(ValueError, match="needs a regressor"):
        ood_scores(est, X_OOD, kind="std")


def test_ood_scores_regression_std():
    assert_allclose(ood_scores(FakeLaplaceRegressor(2), X_OOD, kind="std"),
                    (np.abs(X_OOD[:, 1:3]) + 0.5).mean(1))
    assert_allclose(ood_scores(FakeLaplaceRegressor(1), X_OOD, kind="std"),
                    np.abs(X_OOD[:, 1]) + 0.5)
    with pytest.raises(ValueError, match="needs a classifier"):
        ood_scores(FakeLaplaceRegressor(), X_OOD, kind="entropy")


def test_ood_scores_pipeline_transforms_X():
    pipe = Pipeline([("double", FunctionTransformer(lambda X: 2 * X)),
                     ("la", FakeLaplaceClassifier())]).fit(X_OOD)
    assert_allclose(ood_scores(pipe, X_OOD, kind="entropy"), FakeClassDist(2 * X_OOD).entropy())
    single = Pipeline([("la", FakeLaplaceClassifier())]).fit(X_OOD)
    assert_allclose(ood_scores(single, X_OOD, kind="mutual_information"), X_OOD[:, 1] ** 2)


def test_ood_scores_fallback_without_predict_dist():
    rng = np.random.default_rng(8)
    X, y = rng.normal(size=(30, 2)), rng.integers(0, 3, size=30)
    lr = LogisticRegression().fit(X, y)
    p = lr.predict_proba(X)
    assert_allclose(ood_scores(lr, X), 1 - p.max(1))
    assert_allclose(ood_scores(lr, X, kind="entropy"), stats.entropy(p, axis=1))
    with pytest.raises(ValueError, match="predict_dist"):
        ood_scores(lr, X, kind="mutual_information")


def test_ood_scores_unknown_kind_lists_allowed():
    allowed = "max_proba.*entropy.*mutual_information.*dirichlet_precision.*std"
    with pytest.raises(ValueError, match=allowed):
        ood_scores(FakeLaplaceClassifier(), X_OOD, kind="energy")


def test_ood_detection_metrics_match_sklearn():
    rng = np.random.default_rng(9)
    y_ood = np.r_[np.zeros(50, int), np.ones(30, int)]
    scores = rng.normal(size=80) + y_ood
    res = ood_detection_metrics(y_ood, scores)
    assert set(res) == {"auroc", "aupr", "fpr_at_95_tpr"}
    assert res["auroc"] == roc_auc_score(y_ood, scores)
    assert res["aupr"] == average_precision_score(y_ood, scores)


def test_fpr_at_95_tpr_constructed():
    # 20 OOD scores: 100..117 (18) and 5, 4 ; 10 ID scores: 5, 4, ..., -4.
    # Lowering the threshold: at 100 TPR = 18/20 = .90 (FPR 0); at 5 TPR = 19/20 = .95 with
    # one ID score (5) above -> FPR = 1/10. The ROC points (0, .9), (.1, .95), (.2, 1) are
    # collinear, so roc_curve(drop_intermediate=True) would drop (.1, .95) and give .2.
    y_ood = np.r_[np.ones(20, int), np.zeros(10, int)]
    scores = np.r_[np.arange(100, 118), [5, 4], np.arange(5, -5, -1)].astype(float)
    res = ood_detection_metrics(y_ood, scores)
    assert res["fpr_at_95_tpr"] == pytest.approx(0.1)
    # perfectly separated scores
    perfect = ood_detection_metrics([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9])
    assert perfect == {"auroc": 1.0, "aupr": 1.0, "fpr_at_95_tpr": 0.0}


def test_ood_detection_metrics_bad_inputs():
    with pytest.raises(ValueError, match="both 0"):
        ood_detection_metrics([0, 0, 0], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="both 0"):
        ood_detection_metrics([0, 2, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="equal length"):
        ood_detection_metrics([0, 1], [0.1, 0.2, 0.3])


# ------------------------------------------------------------------ evidence scorer


class FakeEvidenceEstimator(BaseEstimator):
    def __init__(self, prior_precision=1.0):
        self.prior_precision = prior_precision

    def fit(self, X, y=None):
        self.log_evidence_ = -((np.log10(self.prior_precision) - 1) ** 2) - len(X)
        return self


def test_evidence_scorer_estimator_pipeline_and_grid_search():
    X, y = np.zeros((12, 2)), np.zeros(12)
    est = FakeEvidenceEstimator(10.0).fit(X)
    assert evidence_scorer(est, X, y) == -12.0
    pipe = Pipeline([("id", FunctionTransformer()), ("la", FakeEvidenceEstimator(10.0))]).fit(X)
    assert evidence_scorer(pipe, X, y) == -12.0
    search = GridSearchCV(FakeEvidenceEstimator(), {"prior_precision": [0.1, 10.0, 1000.0]},
                          scoring=evidence_scorer, cv=2).fit(X, y)
    assert search.best_params_ == {"prior_precision": 10.0}
    with pytest.raises(ValueError, match="log_evidence_"):
        evidence_scorer(FakeEvidenceEstimator(), X, y)


def test_float32_probabilities_do_not_warn_about_their_sums():
    # cast to float64 first, their float32 rounding failed sklearn's sum-to-one check
    import warnings

    from scipy.special import softmax

    from sklaplace.metrics import multiclass_brier_score, negative_log_likelihood

    rng = np.random.default_rng(0)
    proba = softmax(3 * rng.normal(size=(1000, 10)), axis=1)
    y = rng.integers(0, 10, 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nll = negative_log_likelihood(y, proba.astype(np.float32))
        brier = multiclass_brier_score(y, proba.astype(np.float32))
    assert nll == pytest.approx(negative_log_likelihood(y, proba), rel=1e-6)
    assert brier == pytest.approx(multiclass_brier_score(y, proba), rel=1e-6)


@pytest.mark.parametrize("metric", [expected_calibration_error, maximum_calibration_error,
                                    reliability_curve, negative_log_likelihood,
                                    multiclass_brier_score])
def test_rows_that_do_not_sum_to_one_are_refused(metric):
    # the binned metrics returned an ECE of 0.4 for these rows without a word
    with pytest.raises(ValueError, match="y_prob rows must sum to 1.*row 0 sums to 1.8"):
        metric([0, 1], [[0.9, 0.9], [0.2, 0.8]])


def test_float32_probabilities_cast_to_float64_are_accepted():
    # the sum-to-one check refused them (rows sum to 1 within float32's rounding only)
    logits = np.random.RandomState(0).randn(1000, 10).astype(np.float32)
    proba = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    y = proba.argmax(1)
    assert expected_calibration_error(y, proba.astype(np.float64)) == pytest.approx(
        expected_calibration_error(y, proba), abs=1e-6)
