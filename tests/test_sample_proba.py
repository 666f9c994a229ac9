"""``LaplaceClassifier.sample_proba``: class-probability draws from the posterior
predictive, joint over rows, whose moments are those of the GLM predictive's logit
Gaussian through the softmax."""

import numpy as np
import pytest
from scipy.special import softmax

from sklaplace import LaplaceClassifier

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

S = 4000


def _fit(n_classes, **params):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(90, 2))
    y = (X[:, 0] > 0).astype(int) + (n_classes == 3) * (X[:, 1] > 0.5)
    common = dict(hidden_layer_sizes=(8,), max_epochs=20, random_state=0)
    return LaplaceClassifier(**common, **params).fit(X, y), X


ROWS = np.array([[0.1, -0.2], [2.5, 2.5], [-3.0, 1.0], [0.0, 4.0]])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_draws_have_the_moments_of_the_logit_gaussian(n_classes):
    clf, _ = _fit(n_classes)
    draws = clf.sample_proba(ROWS, n_samples=S, random_state=0)
    assert draws.shape == (S, 4, n_classes) and draws.dtype == np.float64
    np.testing.assert_allclose(draws.sum(-1), 1.0, rtol=1e-12)
    # reference: the logit Gaussian of predict_dist, sampled independently per row
    dist = clf.predict_dist(ROWS)
    rng = np.random.RandomState(1)
    ref = np.stack([softmax(rng.multivariate_normal(m, c, size=S), axis=-1)
                    for m, c in zip(dist.logit_mean, dist.logit_cov)], axis=1)
    se = np.sqrt(draws.var(0) / S + ref.var(0) / S)
    assert np.all(np.abs(draws.mean(0) - ref.mean(0)) <= 4 * se + 1e-12)
    # the spread of the draws too (the posterior's, not only its mean)
    assert np.all(np.abs(draws.std(0) - ref.std(0)) <= 0.1 * ref.std(0) + 1e-3)
    # and the estimator's own Monte Carlo link
    mc = clf.set_params(link_approx="mc", n_samples=S).predict_proba(ROWS)
    assert np.all(np.abs(draws.mean(0) - mc) <= 4 * np.sqrt(2) * np.sqrt(draws.var(0) / S) + 1e-12)


def test_reproducible_and_joint_over_rows():
    clf, _ = _fit(3)
    a = clf.sample_proba(ROWS, n_samples=20, random_state=3)
    np.testing.assert_array_equal(a, clf.sample_proba(ROWS, n_samples=20, random_state=3))
    assert not np.allclose(a, clf.sample_proba(ROWS, n_samples=20, random_state=4))
    # one function per draw: a repeated row gets the same probabilities within a draw
    twice = clf.sample_proba(np.vstack([ROWS[:1], ROWS[:1]]), n_samples=20, random_state=3)
    np.testing.assert_allclose(twice[:, 0], twice[:, 1], rtol=1e-12)
    assert twice[:, 0, 0].std() > 1e-4
    # the draws are the softmax of sample_functions' logits under the same seed
    logits = clf.sample_functions(ROWS, 20, 3)
    np.testing.assert_allclose(a, softmax(logits, axis=-1), rtol=1e-12)


def test_binary_single_logit_columns_in_classes_order():
    clf, _ = _fit(2)
    logits = clf.sample_functions(ROWS, 5, 0)
    assert logits.shape[-1] == 1
    draws = clf.sample_proba(ROWS, n_samples=5, random_state=0)
    np.testing.assert_allclose(draws[..., 1], 1 / (1 + np.exp(-logits[..., 0])), rtol=1e-12)


def test_refuses_a_bad_n_samples():
    clf, _ = _fit(2)
    with pytest.raises(ValueError, match="n_samples"):
        clf.sample_proba(ROWS, n_samples=0)


def test_scikit_activeml_bald_calls_it():
    skactiveml = pytest.importorskip("skactiveml")
    from skactiveml.classifier import SklearnClassifier
    from skactiveml.pool import BatchBALD, GreedyBALD

    _, X = _fit(2)
    y = np.full(len(X), np.nan)
    y[:20] = (X[:20, 0] > 0).astype(int)
    clf = SklearnClassifier(LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=20,
                                              random_state=0), classes=[0, 1], random_state=0)
    for Strategy in (GreedyBALD, BatchBALD):
        qs = Strategy(sample_predictions_method_name="sample_proba",
                      sample_predictions_dict={"n_samples": 50, "random_state": 0},
                      random_state=0)
        idx, utilities = qs.query(X, y, ensemble=clf, batch_size=2, return_utilities=True)
        assert len(set(idx.tolist())) == 2 and all(np.isnan(y[i]) for i in idx)
        assert np.all(np.isnan(utilities[0, :20])) and np.all(utilities[0, 20:] >= -1e-12)
    assert skactiveml.__version__


def test_multilabel_draws_one_sigmoid_per_label():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(60, 2))
    Y = np.column_stack([X[:, 0] > 0, X[:, 1] > 0, X.sum(1) > 1]).astype(int)
    clf = LaplaceClassifier(hidden_layer_sizes=(8,), max_epochs=20, random_state=0).fit(X, Y)
    draws = clf.sample_proba(ROWS, n_samples=7, random_state=2)
    assert draws.shape == (7, 4, 3)
    logits = clf.sample_functions(ROWS, 7, 2)
    np.testing.assert_allclose(draws, 1 / (1 + np.exp(-logits)), rtol=1e-12)
