"""model_averaging=True: the "auto" candidates' predictives mixed by stacking weights."""

import pickle
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.base import clone
from sklearn.datasets import make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.utils._param_validation import InvalidParameterError

from sklaplace import LaplaceClassifier, LaplaceRegressor, io
from sklaplace.estimators._validation import partial_fit_available
from sklaplace.estimators._averaging import NEGLIGIBLE, evidence_weights, stacking_weights
from sklaplace.distributions import NormalPrediction
from sklaplace.distributions._mixture import (CategoricalMixturePrediction,
                                              NormalMixturePrediction)

FAST = dict(hidden_layer_sizes=[(), (8,)], max_epochs=40, lr=0.03, random_state=0)


def quiet_fit(est, X, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kwargs)


def moons(seed=1, n=120):
    return make_moons(n, noise=0.3, random_state=seed)


def curve(seed=0, n=120):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, (n, 1))
    return X, 0.5 * X[:, 0] + 0.3 * np.sin(2 * X[:, 0]) + 0.2 * rng.randn(n)


def xor_rows(n=300, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, ((X[:, 0] * X[:, 1]) > 0).astype(int)


@pytest.fixture(scope="module")
def mixed_classifier():
    """Two candidates of comparable held-out NLL: both keep weight."""
    X, y = moons()
    return quiet_fit(LaplaceClassifier(model_averaging=True, **FAST), X, y), X, y


@pytest.fixture(scope="module")
def regressor():
    X, y = curve(seed=2)  # (8,) and (8, 8) of comparable held-out NLL: both keep weight
    est = quiet_fit(LaplaceRegressor(model_averaging=True, hidden_layer_sizes=[(), (8,), (8, 8)],
                                     max_epochs=40, lr=0.03, random_state=0), X, y)
    return est, X, y


# ------------------------------------------------------------------ the weights
@pytest.mark.parametrize("seed", range(4))
def test_stacking_weights_are_the_optimum_on_the_simplex(seed):
    rng = np.random.RandomState(seed)
    log_lik = rng.normal(size=(50, 3)) * 2 - 1
    v = rng.uniform(0.5, 2, size=50)
    w = stacking_weights(log_lik, v)
    assert w.shape == (3,) and np.all(w >= 0) and np.isclose(w.sum(), 1.0, atol=1e-15)
    # KKT of max Σ v_i log Σ_k w_k p_ik on the simplex (v normalized): the gradient is 1
    # on the support and at most 1 off it
    p = np.exp(log_lik)
    grad = (v / v.sum() / (p @ w)) @ p
    assert np.allclose(grad[w > 0], 1.0, atol=1e-5)
    assert np.all(grad[w == 0] <= 1.0 + 1e-5)
    # and no point of a fine grid on the simplex is better
    grid = np.array([(a, b, 1 - a - b) for a in np.linspace(0, 1, 41)
                     for b in np.linspace(0, 1, 41) if a + b <= 1 + 1e-12])
    grid = np.clip(grid, 0, None)
    objective = (v * np.log(p @ grid.T).T).sum(1)
    assert v @ np.log(p @ w) >= objective.max() - 1e-9


def test_a_candidate_that_explains_every_row_gets_all_the_weight():
    rng = np.random.RandomState(0)
    log_lik = rng.normal(size=(40, 3))
    log_lik[:, 1] += 5.0
    assert np.array_equal(stacking_weights(log_lik), [0.0, 1.0, 0.0])
    assert np.array_equal(stacking_weights(log_lik[:, :1]), [1.0])


def test_negligible_weights_are_dropped_and_evidence_weights_are_model_probabilities():
    w = evidence_weights([0.0, np.log(3.0), -20.0])
    assert np.allclose(w, [0.25, 0.75, 0.0]) and w[2] == 0.0
    assert NEGLIGIBLE * 3 > np.exp(-20.0) * 4


# ------------------------------------------------------------------ the classifier
def test_classifier_predicts_the_weighted_mixture_of_its_candidates(mixed_classifier):
    est, X, y = mixed_classifier
    w = est.model_weights_
    assert w.shape == (2,) and np.all(w > 0.05) and np.isclose(w.sum(), 1.0)
    assert [e.hidden_layer_sizes_ for e in est.estimators_] == [(), (8,)]
    assert all(not e.model_averaging and e.hidden_layer_sizes == e.hidden_layer_sizes_
               for e in est.estimators_)
    by_hand = sum(wk * e.predict_proba(X) for wk, e in zip(w, est.estimators_))
    assert np.allclose(est.predict_proba(X), by_hand, rtol=0, atol=1e-15)
    dist = est.predict_dist(X)
    assert isinstance(dist, CategoricalMixturePrediction)
    assert np.allclose(dist.proba(), by_hand, rtol=0, atol=1e-15)
    assert np.array_equal(est.predict(X), est.classes_[by_hand.argmax(1)])
    assert np.allclose(dist[3:5].proba(), by_hand[3:5])
    # the mixture's mutual information counts the candidates' disagreement
    expected = sum(wk * (c.entropy() - c.mutual_information())
                   for wk, c in zip(w, dist.components))
    mi = dist.mutual_information()
    assert np.all(mi >= 0) and np.allclose(mi, np.maximum(dist.entropy() - expected, 0))
    # the fit's own attributes are those of the candidate of largest weight
    top = est.estimators_[int(np.argmax(w))]
    assert est.net_ is top.net_ and est.laplace_ is top.laplace_
    assert est.hidden_layer_sizes_ == top.hidden_layer_sizes_


def test_weights_come_from_the_held_out_predictions_of_the_selection(mixed_classifier):
    est, X, y = mixed_classifier
    plain = quiet_fit(LaplaceClassifier(**FAST), X, y)
    for key in ("held_out_nll", "log_evidence", "rank"):
        assert np.array_equal(est.model_selection_results_[key],
                              plain.model_selection_results_[key])
    assert not hasattr(plain, "model_weights_") and not hasattr(plain, "estimators_")


def test_a_clearly_right_candidate_takes_the_weight_and_its_predictions():
    X, y = xor_rows()
    est = quiet_fit(LaplaceClassifier(model_averaging=True, **FAST), X, y)
    plain = quiet_fit(LaplaceClassifier(**FAST), X, y)
    assert np.array_equal(est.model_weights_, [0.0, 1.0])  # the linear model cannot fit XOR
    assert len(est.estimators_) == 1 and plain.hidden_layer_sizes_ == (8,)
    assert np.array_equal(est.predict_proba(X), plain.predict_proba(X))


# ------------------------------------------------------------------ the regressor
def test_regressor_predicts_the_mixture_of_the_candidates_gaussians(regressor):
    est, X, y = regressor
    w = est.model_weights_
    kept = w[w > 0]
    assert np.all(w >= 0) and np.isclose(w.sum(), 1.0) and len(est.estimators_) == len(kept)
    assert len(kept) >= 2 and kept.min() > 0.05
    dist = est.predict_dist(X)
    assert isinstance(dist, NormalMixturePrediction)
    means, stds = zip(*(e.predict(X, return_std=True) for e in est.estimators_))
    means, stds = np.array(means), np.array(stds)
    mean = kept @ means
    var = kept @ (stds**2 + means**2) - mean**2
    assert np.allclose(est.predict(X), mean, rtol=1e-12, atol=1e-12)
    m, s = est.predict(X, return_std=True)
    assert np.allclose(m, mean, rtol=1e-12) and np.allclose(s, np.sqrt(var), rtol=1e-10)
    assert np.all(s >= np.sqrt(kept @ stds**2) * (1 - 1e-12))  # the law of total variance
    dens = kept @ stats.norm.pdf(y, means, stds)
    assert np.allclose(dist.logpdf(y), np.log(dens), rtol=1e-12)
    assert np.allclose(est.score(X, y), 1 - ((y - mean)**2).sum() / ((y - y.mean())**2).sum())


def test_the_mixture_has_the_gradients_scikit_optimize_asks_for(regressor):
    """∇ of the mixture's mean and total std against central differences of predict."""
    est, X, _ = regressor
    rows = X[:5] + 0.05
    mean, std, mean_grad, std_grad = est.predict(rows, return_std=True, return_mean_grad=True,
                                                 return_std_grad=True)
    m, s = est.predict(rows, return_std=True)
    assert np.array_equal(mean, m) and np.array_equal(std, s)
    h, fd_mean, fd_std = 1e-6, [], []
    for j in range(X.shape[1]):
        e = np.zeros(X.shape[1])
        e[j] = h
        (mp, sp), (mm, sm) = est.predict(rows + e, return_std=True), est.predict(rows - e,
                                                                               return_std=True)
        fd_mean.append((mp - mm) / (2 * h))
        fd_std.append((sp - sm) / (2 * h))
    fd_mean, fd_std = np.stack(fd_mean, -1), np.stack(fd_std, -1)
    assert mean_grad.shape == std_grad.shape == rows.shape
    np.testing.assert_allclose(mean_grad, fd_mean, rtol=1e-6, atol=1e-6 * np.abs(fd_mean).max())
    np.testing.assert_allclose(std_grad, fd_std, rtol=1e-6, atol=1e-6 * np.abs(fd_std).max())
    one = est.predict(rows[:1], return_std=True, return_mean_grad=True, return_std_grad=True)
    assert [a.shape for a in one] == [(1,), (1,), (X.shape[1],), (X.shape[1],)]
    np.testing.assert_allclose(one[3], std_grad[0], rtol=1e-12)


def test_the_mixture_has_a_joint_predictive_over_rows(regressor):
    """return_cov: Σ_k w_k (C_k + μ_k μ_kᵀ) − μ μᵀ; sample_y: draws of that mixture, whose
    moments and one row's distribution function match it (Monte Carlo)."""
    est, X, _ = regressor
    rows = X[::8][:6]
    w = est.model_weights_[est.model_weights_ > 0]
    mean, cov = est.predict(rows, return_cov=True)
    parts = [e.predict(rows, return_cov=True) for e in est.estimators_]
    by_hand = sum(wk * (c + np.outer(m, m)) for wk, (m, c) in zip(w, parts))
    np.testing.assert_allclose(mean, est.predict(rows), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cov, by_hand - np.outer(mean, mean), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), est.predict(rows, return_std=True)[1],
                               rtol=1e-8)
    draws = est.sample_y(rows, n_samples=40_000, random_state=0)
    assert draws.shape == (6, 40_000)
    scale = np.sqrt(np.diag(cov))
    np.testing.assert_allclose(draws.mean(1), mean, atol=0.03 * scale.max())
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * scale.max() ** 2)
    dist = est.predict_dist(rows[:1])
    for q in (0.1, 0.5, 0.9):
        x = dist.ppf(q)[0]
        assert abs((draws[0] <= x).mean() - q) < 0.01
    np.testing.assert_array_equal(draws, est.sample_y(rows, n_samples=40_000, random_state=0))


def test_function_draws_of_the_mixture(regressor, mixed_classifier):
    """sample_functions: each draw from one candidate's posterior, drawn by its weight; the
    draws' mean and variance are the mixture's (Monte Carlo)."""
    est, X, _ = regressor
    rows = X[::8][:5]
    w = est.model_weights_[est.model_weights_ > 0]
    assert all(np.array_equal(e.laplace_.targets.std, est.laplace_.targets.std)
               for e in est.estimators_)
    draws = est.sample_functions(rows, n_samples=40_000, random_state=0)
    assert draws.shape == (40_000, 5, 1)
    means = np.array([e.predict(rows) for e in est.estimators_])
    epistemic = np.array([e.predict_dist(rows).epistemic_var for e in est.estimators_])
    mean = w @ means
    var = w @ (epistemic + means**2) - mean**2
    scale = np.sqrt(var).max()
    np.testing.assert_allclose(draws[..., 0].mean(0), mean, atol=0.03 * scale)
    np.testing.assert_allclose(draws[..., 0].var(0), var, rtol=0.05, atol=1e-4 * scale**2)
    np.testing.assert_array_equal(draws, est.sample_functions(rows, n_samples=40_000,
                                                              random_state=0))
    clf, Xc, _ = mixed_classifier
    proba = clf.sample_proba(Xc[:4], n_samples=4_000, random_state=0)
    assert proba.shape == (4_000, 4, 2) and np.allclose(proba.sum(-1), 1.0)
    wc = clf.model_weights_[clf.model_weights_ > 0]
    by_parts = sum(wk * e.sample_proba(Xc[:4], n_samples=4_000, random_state=1).mean(0)
                   for wk, e in zip(wc, clf.estimators_))
    np.testing.assert_allclose(proba.mean(0), by_parts, atol=0.03)


def test_a_multi_output_regressor_mixes_each_output():
    X, y = curve(seed=2, n=80)
    Y = np.column_stack([y, np.cos(X[:, 0])])
    est = quiet_fit(LaplaceRegressor(model_averaging=True, **FAST), X, Y)
    kept = est.model_weights_[est.model_weights_ > 0]
    mean, std = est.predict(X, return_std=True)
    means, stds = zip(*(e.predict(X, return_std=True) for e in est.estimators_))
    assert mean.shape == std.shape == Y.shape
    assert np.allclose(mean, np.tensordot(kept, np.array(means), 1), rtol=1e-12, atol=1e-12)
    assert np.all(std >= np.sqrt(np.tensordot(kept, np.array(stds) ** 2, 1)) * (1 - 1e-12))
    assert est.predict_dist(X).logpdf(Y).shape == Y.shape


def test_a_mixture_of_gaussians_quantiles_draws_and_one_component():
    rng = np.random.RandomState(0)
    mu, ev, av = rng.normal(size=(6, 3)), rng.uniform(0.1, 1, (6, 3)), rng.uniform(0.1, 1, (6, 3))
    dist = NormalMixturePrediction(mu, ev, av, [0.2, 0.5, 0.3])
    q = np.linspace(0.05, 0.95, 6)
    assert np.allclose(dist.cdf(dist.ppf(q)), q, atol=1e-12)
    low, high = dist.interval(0.9)
    assert np.allclose(dist.cdf(high) - dist.cdf(low), 0.9, atol=1e-12)
    draws = dist.sample(200_000, random_state=0)
    assert draws.shape == (200_000, 6)
    assert np.allclose(draws.mean(0), dist.mean, atol=0.01)
    assert np.allclose(draws.var(0), dist.var, rtol=0.02)
    assert np.allclose(dist.epistemic_var + dist.aleatoric_var, dist.var)
    assert len(dist[1:3]) == 2 and np.allclose(dist[1:3].mean, dist.mean[1:3])
    one = NormalMixturePrediction(mu[:, :1], ev[:, :1], av[:, :1], [1.0])
    normal = NormalPrediction(mu[:, 0], ev[:, 0], av[:, 0])
    y = rng.normal(size=6)
    assert np.allclose(one.logpdf(y), normal.logpdf(y), rtol=1e-13)
    assert np.allclose(one.interval(0.8), normal.interval(0.8), atol=1e-12)
    assert np.allclose(one.std, normal.std) and np.allclose(one.mean, normal.mean)
    with pytest.raises(ValueError, match="weights"):
        NormalMixturePrediction(mu, ev, av, [0.5, 0.6, 0.1])


# ------------------------------------------------------------------ the rules
@pytest.mark.parametrize("Estimator", [LaplaceClassifier, LaplaceRegressor])
def test_model_averaging_needs_several_candidate_architectures(Estimator):
    X, y = moons(n=40)
    with pytest.raises(ValueError, match="model_averaging"):
        Estimator(model_averaging=True, hidden_layer_sizes=(5,)).fit(X, y)
    with pytest.raises(InvalidParameterError, match="model_averaging"):
        Estimator(model_averaging="yes").fit(X, y)
    assert not hasattr(Estimator(model_averaging=True), "partial_fit")  # one architecture
    with pytest.raises(AttributeError, match="model_averaging=True"):
        partial_fit_available(Estimator(model_averaging=True))


def test_model_averaging_refuses_a_user_net_heteroscedastic_noise_and_multilabel_y():
    from skorch import NeuralNetRegressor
    from sklaplace.nets import MLP

    X, y = curve(n=40)
    net = NeuralNetRegressor(MLP, module__n_in=1, module__n_out=1, max_epochs=2)
    with pytest.raises(ValueError, match="model_averaging"):
        LaplaceRegressor(net, model_averaging=True).fit(X, y)
    with pytest.raises(ValueError, match="model_averaging"):
        LaplaceRegressor(model_averaging=True, noise="heteroscedastic").fit(X, y)
    Y = np.column_stack([y > 0, y > 0.5]).astype(int)
    with pytest.raises(ValueError, match="model_averaging"):
        LaplaceClassifier(model_averaging=True, **FAST).fit(X, Y)


def test_single_model_readouts_of_an_averaged_fit_are_refused(mixed_classifier, regressor):
    est, X, _ = mixed_classifier
    reg, Xr, _ = regressor
    calls = [lambda: est.posterior_, lambda: est.log_evidence(), lambda: est._with_prior(1.0),
             lambda: reg.log_evidence()]
    for call in calls:
        with pytest.raises(ValueError, match="model_averaging"):
            call()


def test_few_held_out_rows_average_by_the_evidence():
    X, y = moons(n=30)  # 6 held out: the evidence scores the candidates
    est = quiet_fit(LaplaceClassifier(model_averaging=True, **FAST), X, y)
    assert est.model_selection_results_["criterion"][0] == "log_evidence"
    assert np.allclose(est.model_weights_,
                       evidence_weights(est.model_selection_results_["log_evidence"]))


# ------------------------------------------------------------------ persistence, clone
def test_io_and_pickle_round_trips_predict_the_same(mixed_classifier, regressor, tmp_path):
    for est, X in (mixed_classifier[:2], regressor[:2]):
        loaded = io.load(io.save(est, tmp_path / "m.skl"))
        assert np.array_equal(loaded.model_weights_, est.model_weights_)
        assert loaded.net_ is loaded.estimators_[int(np.argmax(loaded.model_weights_[
            loaded.model_weights_ > 0]))].net_
        again = pickle.loads(pickle.dumps(est))
        for copy in (loaded, again):
            if isinstance(est, LaplaceClassifier):
                assert np.array_equal(copy.predict_proba(X), est.predict_proba(X))
            else:
                a, b = copy.predict_dist(X), est.predict_dist(X)
                assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)


def test_clone_and_grid_search_over_model_averaging():
    X, y = moons(n=80)
    est = LaplaceClassifier(model_averaging=True, **FAST)
    assert clone(est).get_params()["model_averaging"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search = GridSearchCV(LaplaceClassifier(**FAST), {"model_averaging": [False, True]},
                              cv=2, scoring="neg_log_loss").fit(X, y)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    refit = search.best_estimator_
    assert refit.model_averaging == hasattr(refit, "model_weights_")
    # a refit without averaging drops the averaged attributes
    again = quiet_fit(clone(est), X, y)
    quiet_fit(again.set_params(model_averaging=False), X, y)
    assert not hasattr(again, "model_weights_") and not hasattr(again, "estimators_")


def test_mixture_refuses_targets_that_would_broadcast_past_its_shape():
    from sklaplace.distributions import NormalMixturePrediction

    dist = NormalMixturePrediction(np.zeros((5, 2)), np.ones((5, 2)), np.ones((5, 2)),
                                   np.array([0.5, 0.5]))
    assert dist.logpdf(np.zeros(5)).shape == (5,)
    for method in (dist.logpdf, dist.cdf):
        with pytest.raises(ValueError, match=r"y of shape \(5, 1\) does not broadcast"):
            method(np.zeros((5, 1)))
    with pytest.raises(ValueError, match=r"q of shape \(3,\) does not broadcast"):
        dist.ppf(np.full(3, 0.5))
