"""hidden_layer_sizes="auto": the default MLP's architecture chosen among candidates."""

import pickle
import warnings

import numpy as np
import pytest
from skorch import NeuralNetClassifier
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace.estimators._selection import AUTO_CANDIDATES, candidates, n_weights
from sklaplace.nets import MLP

FAST = dict(max_epochs=40, lr=0.03, random_state=0)
FIELDS = {"hidden_layer_sizes", "n_params", "criterion", "held_out_nll", "log_evidence",
          "fit_time", "training_prior_precision", "n_iter", "stopped_losing", "rank"}


def logistic_rows(n=400, d=8, seed=0):
    """A logistic ground truth on three of ``d`` standard normal features."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, d))
    w = np.zeros(d)
    w[:3] = [1.5, -1.0, 0.5]
    p = 1 / (1 + np.exp(-(X @ w)))
    return X, (rng.uniform(size=n) < p).astype(int)


def xor_rows(n=300, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, ((X[:, 0] * X[:, 1]) > 0).astype(int)


def quiet_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


def test_candidates_are_ordered_by_capacity():
    assert candidates("auto", 4, 1) == list(AUTO_CANDIDATES)
    assert candidates([(50, 50), (), (3,), (3,)], 4, 2) == [(), (3,), (50, 50)]
    assert candidates((8,), 4, 1) is None
    assert n_weights((), 4, 3) == 15 and n_weights((2,), 4, 1) == 13


def test_auto_picks_the_linear_model_on_a_logistic_truth():
    X, y = logistic_rows()
    est = quiet_fit(LaplaceClassifier(**FAST), X, y)
    results = est.model_selection_results_
    assert est.hidden_layer_sizes_ == ()
    assert [p.shape for p in est.net_.module_.parameters()] == [(1, 8), (1,)]
    assert results["rank"][0] == 1
    assert np.nanargmin(results["held_out_nll"]) == 0
    assert np.isnan(results["held_out_nll"][2])  # (50,) did not improve: (50, 50) not fitted
    assert results["fit_time"][2] == 0


def test_auto_takes_a_hidden_layer_where_the_table_needs_one():
    X, y = xor_rows()
    est = quiet_fit(LaplaceClassifier(**FAST), X, y)
    assert est.hidden_layer_sizes_ != ()
    nll = est.model_selection_results_["held_out_nll"]
    assert nll[0] > 0.5 and min(nll[1:]) < 0.4  # the linear model cannot separate XOR
    assert est.score(X, y) > 0.9


def test_the_regressor_picks_the_linear_model_on_a_linear_truth():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(200, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 * rng.normal(size=200)
    est = quiet_fit(LaplaceRegressor(max_epochs=40, random_state=0), X, y)
    assert est.hidden_layer_sizes_ == ()
    assert est.hyperparameter_tuning_ == "online"
    assert est.model_selection_results_["criterion"][0] == "held_out_nll"


def test_model_selection_results_fields():
    X, y = logistic_rows(200)
    est = quiet_fit(LaplaceClassifier(hidden_layer_sizes=[(4,), ()], **FAST), X, y)
    r = est.model_selection_results_
    assert set(r) == FIELDS
    assert all(len(v) == 2 for v in r.values())
    assert list(r["hidden_layer_sizes"]) == [(), (4,)]  # by capacity
    assert list(r["n_params"]) == [9, 4 * 9 + 5]
    assert list(r["criterion"]) == ["held_out_nll"] * 2
    assert np.all(np.isfinite(r["held_out_nll"])) and np.all(np.isfinite(r["log_evidence"]))
    assert np.all(r["fit_time"] > 0)
    assert sorted(r["rank"]) == [1, 2]
    assert r["training_prior_precision"] == [1.0, 1.0]  # one class per row: never retried
    chosen = r["hidden_layer_sizes"][list(r["rank"]).index(1)]
    assert est.hidden_layer_sizes_ == chosen
    assert est.validation_nll_ == pytest.approx(r["held_out_nll"].min())
    assert est.n_params_ == r["n_params"][list(r["rank"]).index(1)]


def test_too_few_rows_to_hold_out_choose_by_the_evidence():
    X, y = logistic_rows(30)
    est = quiet_fit(LaplaceClassifier(**FAST), X, y)
    r = est.model_selection_results_
    assert list(r["criterion"]) == ["log_evidence"] * 3
    assert np.all(np.isnan(r["held_out_nll"]))
    assert est.hidden_layer_sizes_ == r["hidden_layer_sizes"][np.argmax(r["log_evidence"])]


def test_a_convergence_warning_when_the_largest_candidate_wins():
    X, y = xor_rows()
    with pytest.warns(ConvergenceWarning, match="the largest candidate"):
        est = LaplaceClassifier(hidden_layer_sizes=[(), (8,)], **FAST).fit(X, y)
    assert est.hidden_layer_sizes_ == (8,)


def test_no_warning_when_the_linear_model_wins():
    X, y = logistic_rows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        LaplaceClassifier(hidden_layer_sizes=[(), (8,)], **FAST).fit(X, y)
    assert not [w for w in caught if "largest candidate" in str(w.message)]


def test_an_explicit_tuple_and_a_user_net_skip_the_selection():
    X, y = logistic_rows(120)
    est = quiet_fit(LaplaceClassifier(hidden_layer_sizes=(5,), **FAST), X, y)
    assert est.hidden_layer_sizes_ == (5,)
    assert not hasattr(est, "model_selection_results_")
    net = NeuralNetClassifier(MLP, module__n_features=8, module__n_outputs=2,
                              module__hidden_layer_sizes=(3,), max_epochs=5, lr=0.05,
                              criterion=nn.CrossEntropyLoss,
                              train_split=None, verbose=0)
    user = quiet_fit(LaplaceClassifier(net, random_state=0), X, y)
    assert user.hidden_layer_sizes_ is None
    assert not hasattr(user, "model_selection_results_")
    # a later fit with a tuple drops the earlier selection's results
    auto = quiet_fit(LaplaceClassifier(**FAST), X, y)
    assert hasattr(auto, "model_selection_results_")
    quiet_fit(auto.set_params(hidden_layer_sizes=(3,)), X, y)
    assert not hasattr(auto, "model_selection_results_")


def test_clone_pickle_and_grid_search_with_auto():
    X, y = xor_rows(200)
    est = LaplaceClassifier(**FAST)
    assert clone(est).get_params()["hidden_layer_sizes"] == "auto"
    quiet_fit(est, X, y)
    loaded = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    assert loaded.hidden_layer_sizes_ == est.hidden_layer_sizes_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search = GridSearchCV(LaplaceClassifier(max_epochs=20, random_state=0),
                              {"hidden_layer_sizes": ["auto", (4,)]}, cv=2,
                              scoring="neg_log_loss").fit(X, y)
    assert search.best_params_["hidden_layer_sizes"] in ("auto", (4,))
    assert len(search.cv_results_["mean_test_score"]) == 2


def test_partial_fit_takes_one_architecture_for_auto():
    X, y = logistic_rows(120)
    est = LaplaceClassifier(max_epochs=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.partial_fit(X, y, classes=[0, 1]).partial_fit(X, y)
    assert est.hidden_layer_sizes_ == (50,)
    assert not hasattr(est, "model_selection_results_")
