"""Continual learning through ``partial_fit`` (Laplace Redux App. C.4, Eq. 16).

Exact references: a net without hidden layer and a Gaussian likelihood is Bayesian
linear regression, where the recursion is exact (task 1 then task 2 = one fit on the
union: MAP, covariance and the evidences, which sum to the union's); at a frozen net
the curvature sums equal one fit on the union for every structure (Kronecker: summed
factors are the union's factors).  Then scikit-learn's incremental contract.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from skorch import NeuralNetClassifier, NeuralNetRegressor
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.continual import TaskPrior, add_curvature
from sklaplace._laplace.curvature import compute_posterior
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.nets import MLP, MAPLoss
from sklaplace._laplace.subsets import AllWeights

DT = torch.float64


class Linear64(nn.Module):
    def __init__(self, n_features=3, n_outputs=1, bias=True):
        super().__init__()
        self.linear = nn.Linear(n_features, n_outputs, bias=bias, dtype=DT)

    def forward(self, X):
        return self.linear(X)


def _lbfgs_net(bias=True):
    """A float64 linear regression net trained to its exact MAP (full-batch L-BFGS)."""
    return NeuralNetRegressor(
        Linear64, module__bias=bias, criterion=nn.MSELoss, optimizer=torch.optim.LBFGS, lr=1,
        optimizer__line_search_fn="strong_wolfe", optimizer__tolerance_grad=1e-12,
        optimizer__tolerance_change=1e-14, max_epochs=10, batch_size=-1, verbose=0)


def _linear_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) + np.array([0.5, 0.0, -0.5])
    y = X @ np.array([1.5, -2.0, 0.5]) + 0.3 + 0.4 * rng.normal(size=n)
    return X, y


def _closed_form(X, y, delta, sigma, bias=True):
    Xb = np.hstack([X, np.ones((len(X), 1))]) if bias else X
    precision = Xb.T @ Xb / sigma**2 + delta * np.eye(Xb.shape[1])
    cov = np.linalg.inv(precision)
    return cov @ Xb.T @ y / sigma**2, cov


def _theta(est):
    return est.laplace_.subset.theta.numpy()


# ------------------------------------------------------------ exact: Bayesian linear regression
@pytest.mark.parametrize("structure, bias", [("full", True), ("kron", False)])
def test_sequential_linear_regression_equals_union(structure, bias):
    """Task 1 then task 2 = one fit on the union (full; Kronecker without bias, where
    G ⊗ A is the exact XᵀX): MAP, covariance, and evidences summing to the union's."""
    X, y = _linear_data()
    X_test = np.random.default_rng(1).normal(size=(7, 3))
    delta, sigma = 2.0, 0.5
    common = dict(hessian_structure=structure, prior_precision=delta, sigma_noise=sigma,
                  hyperparameter_tuning=None, normalize_y=False, random_state=0)
    union = LaplaceRegressor(_lbfgs_net(bias), subset_of_weights="all", **common).fit(X, y)
    seq = LaplaceRegressor(_lbfgs_net(bias), **common)
    seq.partial_fit(X[:25], y[:25])
    first_evidence = seq.log_evidence_
    seq.partial_fit(X[25:], y[25:])
    theta, cov = _closed_form(X, y, delta, sigma, bias)
    Xb = np.hstack([X_test, np.ones((7, 1))]) if bias else X_test
    mean, std = seq.predict(X_test, return_std=True)
    np.testing.assert_allclose(_theta(seq), theta, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(mean, Xb @ theta, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(std, np.sqrt(np.einsum("ni,ij,nj->n", Xb, cov, Xb) + sigma**2),
                               rtol=1e-8)
    np.testing.assert_allclose(seq.laplace_.posterior.marginal_variance().numpy(), np.diag(cov),
                               rtol=1e-8)
    assert first_evidence + seq.log_evidence_ == pytest.approx(union.log_evidence_, rel=1e-7)
    assert seq.n_tasks_ == 2


def test_sequential_linear_regression_with_a_prior_mean_is_not_the_plain_prior():
    """The second task's MAP is pulled towards the first task's, not towards 0: with a
    zero-mean prior it would differ (this fails if the prior mean were dropped)."""
    X, y = _linear_data()
    common = dict(hessian_structure="full", prior_precision=2.0, sigma_noise=0.5,
                  hyperparameter_tuning=None, normalize_y=False, random_state=0)
    seq = LaplaceRegressor(_lbfgs_net(), **common).partial_fit(X[:25], y[:25])
    seq.partial_fit(X[25:], y[25:])
    task2_alone, _ = _closed_form(X[25:], y[25:], 2.0, 0.5)
    theta, _ = _closed_form(X, y, 2.0, 0.5)
    assert np.abs(_theta(seq) - theta).max() < 1e-6
    assert np.abs(_theta(seq) - task2_alone).max() > 1e-2


def test_diagonal_linear_regression_covariance_is_the_union_diagonal():
    """diag: the accumulated diagonal GGN is the sum of the tasks' (the union's for a
    linear model, whose curvature does not depend on θ)."""
    X, y = _linear_data()
    common = dict(hessian_structure="diag", prior_precision=2.0, sigma_noise=0.5,
                  hyperparameter_tuning=None, normalize_y=False, random_state=0)
    union = LaplaceRegressor(_lbfgs_net(), subset_of_weights="all", **common).fit(X, y)
    seq = LaplaceRegressor(_lbfgs_net(), **common).partial_fit(X[:25], y[:25])
    seq.partial_fit(X[25:], y[25:])
    Xb = np.hstack([X, np.ones((60, 1))])
    np.testing.assert_allclose(seq.laplace_.posterior.h.numpy(), (Xb**2).sum(0), rtol=1e-10)
    np.testing.assert_allclose(seq.laplace_.posterior.marginal_variance().numpy(),
                               union.laplace_.posterior.marginal_variance().numpy(), rtol=1e-10)


# ------------------------------------------------------------ exact: curvature sums at a frozen net
def _frozen_classifier(X, y):
    torch.manual_seed(0)
    net = NeuralNetClassifier(MLP, module__n_features=X.shape[1], module__n_outputs=3,
                              module__hidden_layer_sizes=(5,), criterion=nn.CrossEntropyLoss,
                              optimizer=torch.optim.Adam, lr=0.05, max_epochs=20,
                              train_split=None, verbose=0)
    return FrozenEstimator(net.fit(X.astype(np.float32), y.astype(np.int64)))


@pytest.mark.parametrize("structure", ["full", "diag", "kron"])
def test_frozen_net_tasks_sum_to_the_union(structure):
    """At fixed weights, partial_fit over three chunks = fit on all rows, for every
    structure: same posterior (predictive) and the task evidences sum to the union's."""
    rng = np.random.RandomState(0)
    X = rng.randn(45, 4)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    net = _frozen_classifier(X, y)
    common = dict(hessian_structure=structure, prior_precision=0.5,
                  hyperparameter_tuning=None)
    union = LaplaceClassifier(net, subset_of_weights="all", **common).fit(X, y)
    seq = LaplaceClassifier(net, **common)
    evidences = []
    for rows in (slice(0, 10), slice(10, 30), slice(30, 45)):
        seq.partial_fit(X[rows], y[rows], classes=[0, 1, 2])
        evidences.append(seq.log_evidence_)
    X_test = rng.randn(6, 4)
    np.testing.assert_allclose(seq.predict_proba(X_test), union.predict_proba(X_test),
                               rtol=1e-9)
    np.testing.assert_allclose(seq.laplace_.posterior.marginal_variance().numpy(),
                               union.laplace_.posterior.marginal_variance().numpy(), rtol=1e-8)
    assert sum(evidences) == pytest.approx(union.log_evidence_, rel=1e-9)
    assert seq.n_tasks_ == 3 and seq.hessian_structure_ == structure


# ------------------------------------------------------------ the maths, piece by piece
def _posteriors(seed=0):
    """A diag, a full and a Kronecker posterior of one small MLP, with dense curvature."""
    torch.manual_seed(seed)
    module = MLP(3, 2, (4,)).to(DT)
    subset = AllWeights(module)
    X = torch.randn(20, 3, dtype=DT)
    y = torch.randint(0, 2, (20,))
    lik = LIKELIHOODS["categorical"]()
    ones = torch.ones(2, dtype=DT)
    out = {}
    for structure in ("diag", "full", "kron"):
        post = compute_posterior(structure, subset, lik, X, y, ones)
        if structure == "diag":
            dense = torch.diag(post.h)
        elif structure == "full":
            dense = (post.V * post.lam) @ post.V.T
        else:
            dense = torch.zeros(subset.n_params, subset.n_params, dtype=DT)
            for sl, factors, _ in post.blocks:
                mats = [(Q * e) @ Q.T for Q, e in factors]
                block = mats[0] if len(mats) == 1 else torch.kron(mats[0], mats[1])
                dense[sl, sl] = block
        out[structure] = (post, dense)
    return subset, X, y, out


@pytest.mark.parametrize("structure", ["diag", "full", "kron"])
def test_task_prior_penalty_is_the_quadratic_around_the_previous_mean(structure):
    """MAP objective of a later task: ½(θ − θ*)ᵀ(s·H + D)(θ − θ*) / N in MAPLoss, per
    structure against the dense curvature, for a scalar and a per-parameter δ."""
    subset, _, _, posts = _posteriors()
    post, H = posts[structure]
    P = subset.n_params
    gen = torch.Generator().manual_seed(1)
    mean = torch.randn(P, generator=gen, dtype=DT)
    theta = torch.randn(P, generator=gen, dtype=DT)
    s = 0.7
    for delta in (torch.tensor(1.3, dtype=DT), torch.rand(P, generator=gen, dtype=DT) + 0.1):
        prior = TaskPrior(mean, post, s)
        d = theta - mean
        D = torch.diag(delta.expand(P))
        expected = 0.5 * d @ (s * H + D) @ d
        assert float(prior.penalty(theta, delta)) == pytest.approx(float(expected), rel=1e-10)
        # float32 on the fly, as in training
        value32 = prior.penalty(theta.float(), delta)
        assert value32.dtype == torch.float32
        assert float(value32) == pytest.approx(float(expected), rel=1e-4)
        loss = MAPLoss("categorical", n_train=20, prior_precision=delta, prior=prior)
        module = nn.Linear(P, 1, bias=False).to(DT)
        with torch.no_grad():
            module.weight.copy_(theta.reshape(1, P))
        loss.attach(module)
        assert loss.prior_term().item() == pytest.approx(float(expected) / 20, rel=1e-10)
        # its gradient is (s·H + D)(θ − θ*) / N
        module.weight.grad = None
        loss.prior_term().backward()
        np.testing.assert_allclose(module.weight.grad.reshape(-1).numpy(),
                                   ((s * H + D) @ d / 20).numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("structure", ["diag", "full", "kron"])
def test_add_curvature_sums(structure):
    """diag and full: H_1 + H_2 exactly; Kronecker: G_1 + G_2 and (N_1 Ā_1 + N_2 Ā_2)/N."""
    subset, X, y, posts = _posteriors()
    lik = LIKELIHOODS["categorical"]()
    ones = torch.ones(2, dtype=DT)
    first = compute_posterior(structure, subset, lik, X[:8], y[:8], ones)
    second = compute_posterior(structure, subset, lik, X[8:], y[8:], ones)
    summed = add_curvature(first, second, 8, 12)
    union, dense = posts[structure]
    assert type(summed) is type(union)
    delta = torch.tensor(0.3, dtype=DT)
    assert float(summed.log_det(delta, 1.0)) == pytest.approx(
        float(torch.logdet(dense + delta * torch.eye(subset.n_params, dtype=DT))), rel=1e-10)
    if structure == "diag":
        torch.testing.assert_close(summed.h, first.h + second.h, rtol=1e-12, atol=0)


def test_accumulated_diagonal_of_trained_tasks_is_the_sum_of_the_tasks_diagonals():
    """With training between tasks each task's diagonal is at its own MAP; the posterior
    precision after task 2 is h_1(θ*_1) + h_2(θ*_2) + δ, exactly."""
    rng = np.random.RandomState(0)
    X = rng.randn(60, 3)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    est = LaplaceClassifier(hidden_layer_sizes=(4,), max_epochs=15, hessian_structure="diag",
                            random_state=0)
    est.partial_fit(X[:30], y[:30], classes=[0, 1])
    h1 = est.laplace_.posterior.h.clone()
    theta1 = est.laplace_.subset.theta.clone()
    est.partial_fit(X[30:], y[30:])
    device = est.laplace_.subset.theta.device
    h2 = compute_posterior("diag", est.laplace_.subset, LIKELIHOODS["bernoulli"](),
                           torch.as_tensor(X[30:], device=device),
                           torch.as_tensor(y[30:], device=device).to(DT),
                           torch.ones(1, dtype=DT, device=device)).h
    assert not torch.allclose(est.laplace_.subset.theta, theta1)  # the net was trained on task 2
    torch.testing.assert_close(est.laplace_.posterior.h, h1 + h2, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        est.laplace_.posterior.marginal_variance().cpu().numpy(),
        1 / (h1 + h2 + est.prior_precision_).cpu().numpy(), rtol=1e-12)


def test_prior_precision_is_retuned_on_each_task_evidence():
    """δ is the maximum of the task's evidence p(D_t | D_<t) (which log_evidence
    evaluates), and differs between tasks."""
    rng = np.random.RandomState(0)
    X = rng.randn(80, 3)
    y = np.sin(X[:, 0]) + 0.1 * rng.randn(80)
    est = LaplaceRegressor(hidden_layer_sizes=(5,), max_epochs=20, hessian_structure="kron",
                           random_state=0)
    deltas = []
    for rows in (slice(0, 40), slice(40, 80)):
        est.partial_fit(X[rows], y[rows])
        deltas.append(est.prior_precision_)
        best = est.log_evidence_
        assert est.log_evidence() == pytest.approx(best, rel=1e-10)
        for factor in (0.8, 1.25):
            assert est.log_evidence(prior_precision=est.prior_precision_ * factor) < best
        for factor in (0.9, 1.1):
            assert est.log_evidence(sigma_noise=est.sigma_noise_ * factor) < best
    assert deltas[0] != pytest.approx(deltas[1], rel=1e-3)
    assert est.hyperparameter_tuning_ == "evidence"


# ------------------------------------------------------------ scikit-learn's contract
def _blobs(seed=0, n=40):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3)
    y = np.where(X[:, 0] > 0, "b", "a").astype(object)
    y[X[:, 1] > 1] = "c"
    return X, y


SMALL = dict(hidden_layer_sizes=(4,), max_epochs=10, random_state=0)


def test_first_call_fits_like_fit():
    """The first call is fit (with the continual choices made explicit, the same fit)."""
    X, y = _blobs()
    params = dict(subset_of_weights="all", hessian_structure="kron",
                  hyperparameter_tuning="evidence", **SMALL)
    a = LaplaceClassifier(**params).partial_fit(X, y, classes=["a", "b", "c"])
    b = LaplaceClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(a.classes_, b.classes_)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=1e-12)
    assert a.log_evidence_ == pytest.approx(b.log_evidence_, rel=1e-12)
    assert a.n_tasks_ == 1 and not hasattr(b, "n_tasks_")


def test_first_call_defaults_all_weights_and_evidence():
    X, y = _blobs()
    est = LaplaceClassifier(**SMALL).partial_fit(X, y, classes=["a", "b", "c"])
    assert est.subset_of_weights_ == "all"
    assert est.hessian_structure_ == "full"  # tiny net: the full GGN is cheap
    assert est.hyperparameter_tuning_ == "evidence"  # "auto": no held-out data


def test_classes_required_on_first_call_and_checked_later():
    X, y = _blobs()
    est = LaplaceClassifier(**SMALL)
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        est.partial_fit(X, y)
    # classes may include labels the first task does not have
    est.partial_fit(X[y != "c"], y[y != "c"], classes=["a", "b", "c"])
    assert list(est.classes_) == ["a", "b", "c"]
    assert est.predict_proba(X).shape == (len(X), 3)
    with pytest.raises(ValueError, match="not the same as on the first call"):
        est.partial_fit(X, y, classes=["a", "b"])
    est.partial_fit(X, y, classes=["c", "b", "a"])  # same set: fine
    assert est.n_tasks_ == 2


def test_labels_outside_classes_raise():
    X, y = _blobs()
    with pytest.raises(ValueError, match=r"not in classes"):
        LaplaceClassifier(**SMALL).partial_fit(X, y, classes=["a", "b"])
    est = LaplaceClassifier(**SMALL).partial_fit(X, y, classes=["a", "b", "c"])
    y_new = y.copy()
    y_new[0] = "z"
    with pytest.raises(ValueError, match=r"'z'"):
        est.partial_fit(X, y_new)
    assert est.n_tasks_ == 1


def test_n_features_mismatch_raises():
    X, y = _blobs()
    reg = LaplaceRegressor(**SMALL).partial_fit(X, X[:, 0])
    with pytest.raises(ValueError, match="features"):
        reg.partial_fit(X[:, :2], X[:, 0])
    clf = LaplaceClassifier(**SMALL).partial_fit(X, y, classes=["a", "b", "c"])
    with pytest.raises(ValueError, match="features"):
        clf.partial_fit(X[:, :2], y)


def test_partial_fit_after_fit_continues():
    X, y = _blobs(n=60)
    est = LaplaceClassifier(subset_of_weights="all", hessian_structure="diag", **SMALL)
    est.fit(X[:30], y[:30])
    h1, theta1 = est.laplace_.posterior.h.clone(), est.laplace_.subset.theta.clone()
    est.partial_fit(X[30:], y[30:])
    assert est.n_tasks_ == 2
    assert est.hessian_structure_ == "diag" and est.subset_of_weights_ == "all"
    assert (est.laplace_.posterior.h >= h1 - 1e-12).all() and (est.laplace_.posterior.h > h1 + 1e-6).any()
    assert not torch.allclose(est.laplace_.subset.theta, theta1)
    # the MAP was trained from the previous one: after 10 epochs it is still near it
    assert (est.laplace_.subset.theta - theta1).norm() < theta1.norm()
    # fit starts over
    est.fit(X, y)
    assert not hasattr(est, "n_tasks_")


def test_partial_fit_after_fit_of_an_unsupported_posterior_raises():
    X, y = _blobs()
    est = LaplaceClassifier(hessian_structure="full", **SMALL)
    est.set_params(subset_of_weights="last_layer").fit(X, y)
    est.set_params(subset_of_weights="auto")
    with pytest.raises(ValueError, match="partial_fit continues a posterior over all weights"):
        est.partial_fit(X, y)


@pytest.mark.parametrize("params", [
    dict(subset_of_weights="last_layer"), dict(subset_of_weights="subnetwork", subnetwork=3),
    dict(hessian_structure="lowrank"), dict(hyperparameter_tuning="cv"),
    dict(hyperparameter_tuning="online"), dict(pred_type="gp"), dict(refine="vi"),
    dict(refine="laplace", hessian_structure="diag")])
@pytest.mark.parametrize("estimator", [LaplaceRegressor, LaplaceClassifier])
def test_partial_fit_not_available_where_unsupported(params, estimator):
    # refine: its GLM has the prior N(0, δ⁻¹), not the earlier tasks' posterior (a second
    # task refined that way lost what the first taught: iris 0.73 accuracy instead of 0.97)
    est = estimator(**params)
    assert not hasattr(est, "partial_fit")
    with pytest.raises(AttributeError, match="partial_fit"):
        est.partial_fit


def test_vector_sigma_and_balanced_class_weight_refused():
    X, y = _blobs()
    with pytest.raises(ValueError, match="one sigma_noise"):
        LaplaceRegressor(sigma_noise=[1.0, 2.0], **SMALL).partial_fit(X, X[:, :2])
    with pytest.raises(ValueError, match="balanced"):
        LaplaceClassifier(class_weight="balanced", **SMALL).partial_fit(
            X, y, classes=["a", "b", "c"])


def test_pickling_between_calls_changes_nothing():
    X, y = _blobs(n=60)
    est = LaplaceRegressor(hessian_structure="kron", **SMALL).partial_fit(X[:30], X[:30, 0])
    copy = pickle.loads(pickle.dumps(est))
    est.partial_fit(X[30:], X[30:, 0])
    copy.partial_fit(X[30:], X[30:, 0])
    np.testing.assert_array_equal(est.predict(X, return_std=True), copy.predict(X, return_std=True))
    assert est.log_evidence_ == copy.log_evidence_
    # and after the second call, too
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(est.predict(X), again.predict(X))
    # the trained net's criterion does not keep the earlier tasks' curvature
    assert est.net_.criterion_.prior is None


def test_a_failed_call_leaves_the_estimator_as_it_was(monkeypatch):
    """A call that raised after training (here in the Laplace fit) left net_ trained on
    the failed task, out of step with the posterior: the next call started from it."""
    from sklaplace.estimators import _continual

    X, y = _blobs(n=90)
    est = LaplaceClassifier(hessian_structure="kron", **SMALL)
    est.partial_fit(X[:30], y[:30], classes=["a", "b", "c"])
    state = pickle.dumps(est)
    ref = pickle.loads(state).partial_fit(X[30:60], y[30:60]).predict_proba(X)

    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    with monkeypatch.context() as patch:
        patch.setattr(_continual, "fit_laplace", fail)
        with pytest.raises(RuntimeError, match="interrupted"):
            est.partial_fit(X[60:], y[60:])
    assert est.n_tasks_ == 1
    torch.testing.assert_close(AllWeights(est.net_.module_).theta.double(),
                               est.laplace_.subset.theta, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(est.partial_fit(X[30:60], y[30:60]).predict_proba(X), ref)


@pytest.mark.parametrize("change", [dict(hessian_structure="diag"), dict(curvature="ef")])
def test_switching_structure_or_curvature_between_calls_is_refused(change):
    # a GGN sum with an empirical Fisher added was accepted without a word
    X, y = _blobs(n=60)
    est = LaplaceClassifier(hessian_structure="kron", **SMALL)
    est.partial_fit(X[:30], y[:30], classes=["a", "b", "c"])
    before = est.net_.module_.state_dict()
    name = next(iter(change))
    with pytest.raises(ValueError, match=f"{name}=.*partial_fit keeps one {name}"):
        est.set_params(**change).partial_fit(X[30:], y[30:])
    for key, value in est.net_.module_.state_dict().items():  # refused before training
        torch.testing.assert_close(value, before[key])


def test_random_state_makes_the_sequence_reproducible():
    X, y = _blobs(n=60)

    def run():
        est = LaplaceClassifier(hessian_structure="kron", **SMALL)
        est.partial_fit(X[:30], y[:30], classes=["a", "b", "c"])
        return est.partial_fit(X[30:], y[30:]).predict_proba(X)

    np.testing.assert_array_equal(run(), run())


def test_regressor_keeps_the_first_task_units():
    """normalize_y standardizes with the first task's mean and std, for every task."""
    X, _ = _blobs(n=60)
    y = 100 + 10 * X[:, 0]
    est = LaplaceRegressor(hessian_structure="diag", **SMALL).partial_fit(X[:30], y[:30])
    mean, std = est.laplace_.targets.mean.copy(), est.laplace_.targets.std.copy()
    est.partial_fit(X[30:], y[30:] + 50)
    np.testing.assert_array_equal(est.laplace_.targets.mean, mean)
    np.testing.assert_array_equal(est.laplace_.targets.std, std)



def test_a_task_of_constant_targets_keeps_a_sensible_noise():
    """σ's bounds scale with max(std(y), RMS residual): a later task of constant targets
    (std 0) that the net fits poorly once bounded σ to ~1e-11 (test NLL 1.8e5)."""
    rng = np.random.RandomState(0)
    X1 = rng.randn(100, 3)
    y1 = X1 @ [1.0, -2.0, 0.5] + 0.3 * rng.randn(100)
    X2, y2 = rng.randn(50, 3) + 3, np.full(50, 2.0)
    est = LaplaceRegressor(hessian_structure="full", max_epochs=20, random_state=0)
    est.partial_fit(X1, y1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.partial_fit(X2, y2)
    residual = np.sqrt(np.mean((est.predict(X2) - y2) ** 2))
    assert residual > 0.1
    assert est.sigma_noise_ > 1e-3 * residual
    mean, std = est.predict(X1, return_std=True)
    nll = np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * (mean - y1) ** 2 / std**2)
    assert nll < 5.0

def test_integer_weights_equal_duplicated_rows_at_a_frozen_net():
    """sample_weight in a later call: integer weights = duplicated rows (frozen MAP)."""
    rng = np.random.RandomState(1)
    X = rng.randn(40, 4)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    w = rng.randint(0, 3, 20)
    net = _frozen_classifier(X, y)
    common = dict(hessian_structure="kron", prior_precision=0.5, hyperparameter_tuning=None)
    weighted = LaplaceClassifier(net, **common).partial_fit(X[:20], y[:20], classes=[0, 1, 2])
    weighted.partial_fit(X[20:], y[20:], sample_weight=w)
    rows = np.repeat(np.arange(20, 40), w)
    duplicated = LaplaceClassifier(net, **common).partial_fit(X[:20], y[:20], classes=[0, 1, 2])
    duplicated.partial_fit(X[rows], y[rows])
    np.testing.assert_allclose(weighted.predict_proba(X), duplicated.predict_proba(X), rtol=1e-9)
    assert weighted.log_evidence_ == pytest.approx(duplicated.log_evidence_, rel=1e-9)


@pytest.mark.parametrize("params", [
    dict(hessian_structure="kron", prior_structure="layerwise"),
    dict(hessian_structure="diag", prior_structure="diag", curvature="ef"),
    dict(hessian_structure="full", temperature=0.5)])
def test_binary_and_multi_output_tasks_run(params):
    """Binary (one Bernoulli logit) and two-output regression tasks, other priors."""
    X, y = _blobs(n=60)
    binary = (y == "a")
    clf = LaplaceClassifier(**SMALL, **params)
    for rows in (slice(0, 30), slice(30, 60)):
        clf.partial_fit(X[rows], binary[rows], classes=[False, True])
        assert np.isfinite(clf.log_evidence_)
    assert clf.predict_proba(X).shape == (60, 2) and clf.n_tasks_ == 2
    Y = np.c_[X[:, 0], X[:, 1] ** 2]
    reg = LaplaceRegressor(**SMALL, **params)
    for rows in (slice(0, 30), slice(30, 60)):
        reg.partial_fit(X[rows], Y[rows])
        assert np.isfinite(reg.log_evidence_)
    assert reg.predict(X).shape == (60, 2)
    if params.get("prior_structure", "scalar") != "scalar":
        assert np.ndim(clf.prior_precision_) == 1


def test_partial_fit_after_a_refined_fit_is_refused():
    # it continued from the refined posterior around the refined mean, training from the MAP
    X, y = _blobs(n=60)
    est = LaplaceClassifier(hessian_structure="diag", refine="laplace", **SMALL).fit(X[:30], y[:30])
    with pytest.raises(ValueError, match="refine"):
        est.set_params(refine=None).partial_fit(X[30:], y[30:])
    assert "refine_n_iter_" in est.__dict__
