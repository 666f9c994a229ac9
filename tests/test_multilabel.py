"""Multilabel classification: an indicator y, one Bernoulli logit and one sigmoid per label.

The exact reference is a net without hidden layer: L independent Bayesian logistic
regressions, whose MAP (Newton), Laplace posterior, evidence and probit predictive are
written out here in float64 numpy.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch
from scipy.special import expit
from skorch import NeuralNet
from sklearn.datasets import make_multilabel_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from sklaplace import LaplaceClassifier
from sklaplace.distributions import MultilabelPrediction
from sklaplace.metrics import expected_calibration_error
from sklaplace.ood import ood_scores

N_LABELS, D = 3, 4


class Linear64(nn.Module):
    def __init__(self, n_features=D, n_outputs=N_LABELS):
        super().__init__()
        self.linear = nn.Linear(n_features, n_outputs, dtype=torch.float64)

    def forward(self, X):
        return self.linear(X)


def _data(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    W = rng.normal(size=(N_LABELS, D))
    Y = (rng.random((n, N_LABELS)) < expit(X @ W.T + 0.3)).astype(int)
    return X, Y


def _map_and_hessians(X, Y, delta):
    """Per label: the MAP θ_l = (w_l, b_l) by Newton and H_l = Σ p(1−p) x̃x̃ᵀ + δI."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    thetas, hessians = [], []
    for label in range(Y.shape[1]):
        theta = np.zeros(Xb.shape[1])
        for _ in range(50):
            p = expit(Xb @ theta)
            gradient = Xb.T @ (p - Y[:, label]) + delta * theta
            H = (Xb * (p * (1 - p))[:, None]).T @ Xb + delta * np.eye(Xb.shape[1])
            theta = theta - np.linalg.solve(H, gradient)
        p = expit(Xb @ theta)
        thetas.append(theta)
        hessians.append((Xb * (p * (1 - p))[:, None]).T @ Xb + delta * np.eye(Xb.shape[1]))
    return np.array(thetas), hessians


def _log_evidence(X, Y, thetas, hessians, delta):
    """Σ_l log p(y_l | θ_l) − δ/2 ‖θ‖² + P/2 log δ − ½ log det H (the Laplace evidence)."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    total = 0.0
    for label, (theta, H) in enumerate(zip(thetas, hessians)):
        f = Xb @ theta
        y = Y[:, label]
        total += (y * f - np.logaddexp(0, f)).sum() - 0.5 * delta * theta @ theta
        total += 0.5 * len(theta) * np.log(delta) - 0.5 * np.linalg.slogdet(H)[1]
    return total


def _frozen(thetas):
    net = NeuralNet(Linear64, criterion=nn.BCEWithLogitsLoss).initialize()
    with torch.no_grad():
        net.module_.linear.weight.copy_(torch.as_tensor(thetas[:, :D]))
        net.module_.linear.bias.copy_(torch.as_tensor(thetas[:, D]))
    return FrozenEstimator(net)


def _library_order():
    """Indices of the reference's per-label blocks (w_l, b_l) in the net's parameter order
    (weight (L, D) row-major, then bias (L,))."""
    order = []
    for label in range(N_LABELS):
        order += [label * D + j for j in range(D)] + [N_LABELS * D + label]
    return np.array(order)


@pytest.mark.parametrize("subset, structure", [("all", "full"), ("all", "lowrank"),
                                               ("last_layer", "full")])
def test_linear_model_is_independent_bayesian_logistic_regressions(subset, structure):
    X, Y = _data()
    delta = 1.3
    thetas, hessians = _map_and_hessians(X, Y, delta)
    clf = LaplaceClassifier(_frozen(thetas), subset_of_weights=subset,
                            hessian_structure=structure, lowrank_rank=N_LABELS * (D + 1),
                            prior_precision=delta, hyperparameter_tuning=None,
                            extrapolation_variance=0.0).fit(X, Y)
    order = _library_order()
    covariance = np.zeros((len(order), len(order)))
    for label, H in enumerate(hessians):  # block-diagonal: the labels share no weight
        block = order[label * (D + 1):(label + 1) * (D + 1)]
        covariance[np.ix_(block, block)] = np.linalg.inv(H)
    np.testing.assert_allclose(clf.posterior_.covariance_matrix(), covariance, rtol=1e-8,
                               atol=1e-12)
    np.testing.assert_allclose(clf.log_evidence_,
                               _log_evidence(X, Y, thetas, hessians, delta), rtol=1e-9)

    X_test = np.random.default_rng(1).normal(size=(7, D)) * 2
    Xb = np.hstack([X_test, np.ones((7, 1))])
    mean = Xb @ thetas.T
    var = np.stack([np.einsum("ni,ij,nj->n", Xb, np.linalg.inv(H), Xb) for H in hessians], 1)
    proba = expit(mean / np.sqrt(1 + np.pi * var / 8))
    np.testing.assert_allclose(clf.predict_proba(X_test), proba, rtol=1e-9)
    dist = clf.predict_dist(X_test)
    assert isinstance(dist, MultilabelPrediction)
    np.testing.assert_allclose(dist.logit_mean, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dist.logit_var, var, rtol=1e-9)
    # the labels share no weight here: no covariance across them
    np.testing.assert_allclose(dist.logit_cov - np.apply_along_axis(np.diag, 1, var), 0,
                               atol=1e-12)
    np.testing.assert_allclose(clf.decision_function(X_test), mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(X_test), (proba > 0.5).astype(int))


def test_diag_structure_is_the_diagonal_of_the_exact_precision():
    X, Y = _data()
    delta = 0.8
    thetas, hessians = _map_and_hessians(X, Y, delta)
    clf = LaplaceClassifier(_frozen(thetas), subset_of_weights="all", hessian_structure="diag",
                            prior_precision=delta, hyperparameter_tuning=None,
                            extrapolation_variance=0.0).fit(X, Y)
    exact = np.zeros(N_LABELS * (D + 1))
    exact[_library_order()] = np.concatenate([np.diag(H) for H in hessians])
    np.testing.assert_allclose(np.diag(clf.posterior_.precision_matrix()), exact, rtol=1e-9)


def test_evidence_tuning_maximizes_the_summed_evidence():
    X, Y = _data()
    thetas, _ = _map_and_hessians(X, Y, 1.0)
    clf = LaplaceClassifier(_frozen(thetas), subset_of_weights="all", hessian_structure="full",
                            hyperparameter_tuning="evidence").fit(X, Y)
    Xb = np.hstack([X, np.ones((len(X), 1))])
    grid = np.logspace(-2, 2, 401)

    def evidence_at(delta):  # the Laplace evidence at the fixed θ*, summed over labels
        hessians = []
        for theta in thetas:
            p = expit(Xb @ theta)
            hessians.append((Xb * (p * (1 - p))[:, None]).T @ Xb + delta * np.eye(D + 1))
        return _log_evidence(X, Y, thetas, hessians, delta)

    values = np.array([evidence_at(d) for d in grid])
    assert clf.prior_precision_ == pytest.approx(grid[np.argmax(values)], rel=0.03)
    assert clf.log_evidence_ >= values.max() - 1e-8
    assert clf.log_evidence_ == pytest.approx(evidence_at(clf.prior_precision_), rel=1e-10)


def _fit_default(**params):
    X, Y = make_multilabel_classification(n_samples=120, n_features=5, n_classes=N_LABELS,
                                          random_state=0)
    X = StandardScaler().fit_transform(X)
    settings = dict(hidden_layer_sizes=(8,), max_epochs=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LaplaceClassifier(**{**settings, **params}).fit(X, Y), X, Y


@pytest.mark.parametrize("params", [
    dict(), dict(subset_of_weights="all", hessian_structure="kron"),
    dict(subset_of_weights="all", hessian_structure="diag", curvature="ef"),
    dict(subset_of_weights="all", hessian_structure="lowrank", lowrank_rank=5),
    dict(subset_of_weights="last_layer", hessian_structure="kron"),
    dict(subset_of_weights="subnetwork", subnetwork=20, hyperparameter_tuning="evidence"),
    dict(hyperparameter_tuning="online", max_epochs=6, online_frequency=3),
    dict(pred_type="nn", n_samples=30), dict(pred_type="gp", gp_subset_size=40),
    dict(link_approx="mc", n_samples=50),
])
def test_every_structure_and_subset_fits_and_predicts_per_label(params):
    clf, X, Y = _fit_default(**params)
    proba = clf.predict_proba(X)
    assert proba.shape == Y.shape and np.all((proba > 0) & (proba < 1))
    np.testing.assert_array_equal(clf.classes_, np.arange(N_LABELS))
    predicted = clf.predict(X)
    assert predicted.shape == Y.shape and set(np.unique(predicted)) <= {0, 1}
    np.testing.assert_array_equal(predicted, (proba > 0.5).astype(int))
    assert clf.decision_function(X).shape == Y.shape
    dist = clf.predict_dist(X)
    np.testing.assert_allclose(dist.proba(), proba, rtol=1e-10)
    assert dist.entropy().shape == dist.mutual_information().shape == (len(X),)
    assert clf.sample_functions(X[:4], n_samples=2).shape == (2, 4, N_LABELS)
    assert clf.__sklearn_tags__().classifier_tags.multi_label


def test_mc_link_and_nn_converge_to_the_per_label_expected_sigmoid():
    """The probit, Monte Carlo of each label's marginal, and the many-draw average agree."""
    rng = np.random.default_rng(0)
    mean, std = rng.normal(size=(5, 3)), rng.uniform(0.1, 3, size=(5, 3))
    cov = np.apply_along_axis(np.diag, 1, std**2)
    mc = MultilabelPrediction(mean, cov, link="mc", n_samples=200_000).proba()
    draws = mean + std * rng.standard_normal((400_000, 5, 3))
    np.testing.assert_allclose(mc, expit(draws).mean(0), atol=3e-3)
    probit = MultilabelPrediction(mean, cov).proba()
    np.testing.assert_allclose(probit, mc, atol=0.02)  # the probit's own error, ≤ 0.02


def test_extrapolation_variance_adds_to_each_labels_logit_variance():
    base, X, _ = _fit_default(extrapolation_variance=0.0, hyperparameter_tuning="evidence")
    wide, _, _ = _fit_default(extrapolation_variance=2.0, hyperparameter_tuning="evidence")
    far = 4 * X[:3] + 6
    added = wide.predict_dist(far).logit_cov - base.predict_dist(far).logit_cov
    diagonal = np.diagonal(added, axis1=1, axis2=2)
    assert np.all(diagonal > 0)
    np.testing.assert_allclose(diagonal, diagonal[:, :1].repeat(N_LABELS, 1), rtol=1e-9)
    np.testing.assert_allclose(added - np.apply_along_axis(np.diag, 1, diagonal), 0, atol=1e-9)
    np.testing.assert_allclose(wide.predict_dist(X).logit_cov, base.predict_dist(X).logit_cov,
                               rtol=1e-9, atol=1e-12)  # nothing inside the training range


def test_user_net_with_bce_criterion_and_its_checks():
    X, Y = _data()
    net = NeuralNet(Linear64, criterion=nn.BCEWithLogitsLoss, max_epochs=20, lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LaplaceClassifier(net, random_state=0).fit(X, Y)
    assert clf.predict_proba(X).shape == Y.shape
    wrong_width = NeuralNet(Linear64, module__n_outputs=2, criterion=nn.BCEWithLogitsLoss)
    with pytest.raises(ValueError, match="outputs 2 values per row but the multilabel "
                                         "likelihood with 3 labels needs 3"):
        LaplaceClassifier(wrong_width).fit(X, Y)
    softmax_net = NeuralNet(Linear64, criterion=nn.CrossEntropyLoss)
    with pytest.raises(ValueError, match="CrossEntropyLoss models one class per row"):
        LaplaceClassifier(softmax_net).fit(X, Y)


def test_single_label_concepts_are_refused_with_clear_errors():
    X, Y = _data(n=40)
    with pytest.raises(ValueError, match="link_approx='bridge'.*no multilabel meaning"):
        LaplaceClassifier(link_approx="bridge", max_epochs=2).fit(X, Y)
    with pytest.raises(ValueError, match="class_weight.*sample_weight"):
        LaplaceClassifier(class_weight="balanced", max_epochs=2).fit(X, Y)
    with pytest.raises(ValueError, match="partial_fit takes one class label per row"):
        LaplaceClassifier(max_epochs=2).partial_fit(X, Y, classes=[0, 1])
    with pytest.raises(ValueError, match="indicator matrix of 0 and 1"):
        LaplaceClassifier(max_epochs=2).fit(X, 2 * Y)
    clf, X, Y = _fit_default()
    with pytest.raises(ValueError, match="partial_fit takes one class label per row"):
        clf.partial_fit(X, Y[:, 0])
    with pytest.raises(ValueError, match="dirichlet"):
        clf.predict_dist(X).dirichlet()
    with pytest.raises(ValueError, match="dirichlet"):
        ood_scores(clf, X, kind="dirichlet_precision")
    with pytest.raises(ValueError, match="scored label by label"):
        expected_calibration_error(Y, clf.predict_proba(X))


MULTILABEL_CHECKS = {"check_classifiers_multilabel_representation_invariance",
                     "check_classifiers_multilabel_output_format_predict",
                     "check_classifiers_multilabel_output_format_predict_proba",
                     "check_classifiers_multilabel_output_format_decision_function"}


@pytest.mark.parametrize("params, accepts", [
    (dict(), True), (dict(link_approx="mc"), True),
    (dict(hessian_structure="full", link_approx="bridge"), False),
    (dict(class_weight="balanced"), False), (dict(class_weight={0: 1.0, 1: 2.0}), False),
    (dict(model_averaging=True, hidden_layer_sizes=[(), (5,)]), False),
    (dict(net=NeuralNet(Linear64, criterion=nn.BCEWithLogitsLoss, max_epochs=2)), True),
    (dict(net=NeuralNet(Linear64, criterion=nn.CrossEntropyLoss, max_epochs=2)), False),
], ids=["default", "mc", "full-bridge", "balanced", "class-dict", "averaging", "bce-net",
        "softmax-net"])
def test_the_multi_label_tag_says_what_the_instance_fits(params, accepts):
    """The tag is True exactly where an indicator y fits, so scikit-learn's multilabel checks
    run where they can pass and are left out where fit refuses them."""
    from sklearn.utils.estimator_checks import estimator_checks_generator

    clf = LaplaceClassifier(**{"hidden_layer_sizes": (5,), "max_epochs": 2, **params})
    assert clf.__sklearn_tags__().classifier_tags.multi_label is accepts
    names = {getattr(check, "func", check).__name__
             for _, check in estimator_checks_generator(clf)}
    assert names & MULTILABEL_CHECKS == (MULTILABEL_CHECKS if accepts else set())
    X, Y = _data(n=30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if accepts:
            assert clf.fit(X, Y).predict_proba(X).shape == Y.shape
        else:
            with pytest.raises(ValueError):
                clf.fit(X, Y)


def test_ood_scores_read_the_labels_one_by_one():
    clf, X, _ = _fit_default()
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(ood_scores(clf, X, kind="max_proba"),
                               1 - np.maximum(proba, 1 - proba).mean(1))
    entropy = -(proba * np.log(proba) + (1 - proba) * np.log(1 - proba)).sum(1)
    np.testing.assert_allclose(ood_scores(clf, X, kind="entropy"), entropy, rtol=1e-10)
    assert np.all(ood_scores(clf, X, kind="mutual_information") >= 0)


def test_pickle_pipeline_and_grid_search():
    clf, X, Y = _fit_default(hyperparameter_tuning="evidence")
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict_proba(X), clf.predict_proba(X))
    np.testing.assert_array_equal(again.classes_, clf.classes_)
    pipe = make_pipeline(StandardScaler(), LaplaceClassifier(
        hidden_layer_sizes=(8,), max_epochs=10, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert pipe.fit(X, Y).predict_proba(X).shape == Y.shape
        search = GridSearchCV(
            LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=10, random_state=0,
                              hyperparameter_tuning=None),
            {"prior_precision": [0.1, 10.0]}, cv=2).fit(X, Y)  # subset accuracy
    assert search.best_estimator_.predict_proba(X).shape == Y.shape
    assert 0 <= pipe.score(X, Y) <= 1  # subset accuracy, as for MLPClassifier


def test_the_multilabel_benchmark_tasks_and_scores():
    from benchmarks import multilabel
    from benchmarks.__main__ import build_parser

    args = build_parser().parse_args(["multilabel", "--tasks", "digits_properties"])
    assert args.tasks == ["digits_properties"] and args.splits == 3
    X, Y = multilabel.load_task("digits_properties")
    assert X.shape == (1797, 64) and Y.shape == (1797, 4) and set(np.unique(Y)) == {0, 1}
    Y_small = np.array([[1, 0], [0, 1]])
    proba = np.array([[0.9, 0.2], [0.3, 0.6]])
    expected = -np.mean(np.log([0.9, 0.8, 0.7, 0.6]))
    assert multilabel.per_label_nll(Y_small, proba) == pytest.approx(expected)
    assert multilabel.confidence(proba) == pytest.approx(np.mean([0.9, 0.8, 0.7, 0.6]))
    split = {"LA": dict(nll=0.45, acc=0.8, conf3=0.6, time=6.0, sizes=(50,), prior=10.0,
                        n_fits=3),
             "MAP": dict(nll=0.46, acc=0.8, conf3=0.9, time=np.nan),
             "MLP": dict(nll=0.47, acc=0.8, conf3=0.95, time=2.0)}
    text = multilabel.report({"synthetic_5": [split, split]})
    assert "- synthetic_5: (50,) at 10.0 (3), 0.450 / 0.470, 3.0×; (50,) at 10.0" in text
    assert "NLL LA ≤ MLP: 1/1 (synthetic_5)" in text


def test_evidence_curve_scores_held_out_rows_per_label():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sklaplace.plotting import EvidenceCurveDisplay

    clf, X, Y = _fit_default(hyperparameter_tuning="evidence")
    values = [0.1, 10.0]
    display = EvidenceCurveDisplay.from_estimator(clf, X[:40], Y[:40], prior_precisions=values)
    for value, nll in zip(values, display.validation_nll):
        proba = clf._with_prior(value).predict_proba(X[:40])
        expected = -(Y[:40] * np.log(proba) + (1 - Y[:40]) * np.log(1 - proba)).sum(1).mean()
        assert nll == pytest.approx(expected, rel=1e-10)
    plt.close("all")


def test_integer_sample_weights_equal_duplicated_rows():
    """Full-batch L-BFGS in float64: the weighted fit is the fit of the duplicated rows (MAP,
    curvature and evidence tuning), as for the single-label classifier."""
    X, Y = make_multilabel_classification(n_samples=60, n_features=4, n_classes=3,
                                          random_state=0)
    X = StandardScaler().fit_transform(X)
    weight = np.random.default_rng(0).integers(0, 3, len(X))
    params = dict(hidden_layer_sizes=(5,), solver="lbfgs", max_epochs=50,
                  hyperparameter_tuning="evidence", random_state=0)
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            weighted = LaplaceClassifier(**params).fit(X, Y, sample_weight=weight)
            repeated = LaplaceClassifier(**params).fit(np.repeat(X, weight, 0),
                                                       np.repeat(Y, weight, 0))
    finally:
        torch.set_default_dtype(dtype)
    np.testing.assert_allclose(weighted.predict_proba(X), repeated.predict_proba(X),
                               rtol=1e-9, atol=1e-12)
    assert weighted.prior_precision_ == pytest.approx(repeated.prior_precision_, rel=1e-9)


def _noise_labels(n=120, seed=0):
    """Labels independent of the features: a hidden layer can only overfit them."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, D)), (rng.random((n, N_LABELS)) < 0.5).astype(int)


def test_a_candidate_that_overfits_is_trained_again_under_a_stronger_prior():
    """Multilabel y: a candidate that does not improve on the held-out NLL while that NLL
    asks for a posterior broader than its training prior is trained once more at
    DECAY_STEP × the prior precision; the search ends there, and the chosen fit's refit on
    all rows trains under the prior of its row."""
    from sklaplace.estimators._selection import DECAY_STEP

    X, Y = _noise_labels()
    est = LaplaceClassifier(hidden_layer_sizes=[(), (16,), (16, 16)], max_epochs=60, lr=0.05,
                            prior_precision=0.5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, Y)
    r = est.model_selection_results_
    assert r["hidden_layer_sizes"] == [(), (16,), (16,), (16, 16)]
    assert r["training_prior_precision"] == [0.5, 0.5, 0.5 * DECAY_STEP, 0.5]
    nll = r["held_out_nll"]
    assert not nll[1] < nll[0]  # (16,) under the given prior did not improve …
    assert np.isnan(nll[3]) and r["fit_time"][3] == 0  # … and (16, 16) was not fitted
    best = int(np.argmin(nll[:3]))
    assert list(r["rank"]).index(1) == best
    trained_under = est.net_.criterion_.prior_precision
    assert float(trained_under) == r["training_prior_precision"][best]
    assert est.hidden_layer_sizes_ == r["hidden_layer_sizes"][best]


def test_the_retry_rule_reads_the_held_out_choice_against_the_training_prior():
    from types import SimpleNamespace

    from sklaplace.estimators._selection import overfits

    def fit(delta, tuning="cv"):
        return SimpleNamespace(tuning=tuning, hyper=SimpleNamespace(prior_precision=delta))

    worse = [((), 15, 0.50), ((8,), 60, 0.55)]
    better = [((), 15, 0.50), ((8,), 60, 0.45)]
    assert overfits(worse, fit(0.1), 1.0) and overfits(worse, fit(1.0), 1.0)
    assert not overfits(worse, fit(3.0), 1.0)  # the posterior narrower than the prior
    assert not overfits(better, fit(0.1), 1.0)  # it improved: the search goes on
    assert not overfits(worse[:1], fit(0.1), 1.0)  # the first candidate
    assert not overfits(worse, fit(0.1, "evidence"), 1.0)
    assert not overfits(worse, fit(0.1), np.ones(4))  # a prior per tensor


def test_one_class_per_row_is_never_trained_again():
    X, Y = _noise_labels()
    est = LaplaceClassifier(hidden_layer_sizes=[(), (16,)], max_epochs=60, lr=0.05,
                            random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, Y[:, 0])
    assert est.model_selection_results_["training_prior_precision"] == [1.0, 1.0]


def test_the_multilabel_levers_benchmark_reads_the_fits_predictive():
    from benchmarks import multilabel_levers
    from benchmarks.__main__ import build_parser

    from sklaplace import LaplaceClassifier

    args = build_parser().parse_args(["multilabel_levers", "--tasks", "satellite_groups",
                                      "--refit-lr", "0.1"])
    assert args.tasks == ["satellite_groups"] and args.refit_lr == 0.1 and args.splits == 3
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    Y = (X[:, :2] + 0.5 * rng.normal(size=(60, 2)) > 0).astype(int)
    clf = LaplaceClassifier(hidden_layer_sizes=(), solver="lbfgs",
                            hyperparameter_tuning="evidence", extrapolation_variance=0.0,
                            random_state=0).fit(X, Y)
    # the benchmark's probit of the GLM moments is the fit's own predictive
    np.testing.assert_allclose(multilabel_levers._probit(clf.laplace_, X),
                               clf.predict_proba(X), rtol=1e-10, atol=1e-12)
    nll = multilabel_levers._nll(np.array([[1, 0]]), np.array([[0.8, 0.4]]))
    np.testing.assert_allclose(nll, -np.log([[0.8, 0.6]]))
    row = dict(sizes=(50,), candidates=[(), (50,)], held_out=np.array([0.5, 0.3]),
               delta=10.0, LA=np.array([0.1, 0.2]), MAP=np.array([0.2, 0.2]),
               MLP=np.array([0.1, 0.1]), best=0.14, best_delta=3.16)
    text = multilabel_levers.report({"satellite_groups": [row]})
    assert "| satellite_groups | 0.1500 | nan | 0.1400 | nan | nan | 0.2000 | 0.1000 |" in text
    # the capture of the refit is undone when its block ends
    from sklaplace.estimators import _base

    original = _base.BaseLaplace._refit
    with multilabel_levers._capture(1.0) as seen:
        assert _base.BaseLaplace._refit is not original and seen == {}
    assert _base.BaseLaplace._refit is original
    assert "→ (50,) at δ 10; per label LA [0.1, 0.2]" in text
