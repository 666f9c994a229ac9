"""Input validation and numerical faults.

Every bad input below must fail with the listed exception and a message that
names the argument, and — for ``fit`` — before any training happens: the
``no_training`` fixture replaces :func:`sklaplace._laplace.nets.train_map` by a
function that fails the test if it is reached.
"""

import copy
import re
import warnings
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from skorch import NeuralNetClassifier, NeuralNetRegressor
from sklearn.datasets import load_iris, make_regression
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.utils.validation import validate_data
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace import nets
from sklaplace.estimators._validation import validate_predict_X
from sklaplace._laplace.nets import MLP

FAST = dict(hidden_layer_sizes=(5,), max_epochs=5, random_state=0)
LOG10_BOUNDS = (-4, 4)


def _iris():
    X, y = load_iris(return_X_y=True)
    rows = np.r_[0:20, 50:70, 100:120]
    X = X[rows]
    return (X - X.mean(0)) / X.std(0), y[rows]


X_CLF, Y_CLF = _iris()
X_REG, Y_REG = make_regression(60, 4, noise=1.0, random_state=0)


class TrainingReached(Exception):
    """Raised by the patched train_map: validation let the input through."""


def _refuse_training(*args, **kwargs):
    raise TrainingReached


@pytest.fixture
def no_training(monkeypatch):
    monkeypatch.setattr(nets, "train_map", _refuse_training)


@pytest.fixture(scope="module")
def fitted():
    return {
        "clf": LaplaceClassifier(**FAST).fit(X_CLF, Y_CLF),
        "reg": LaplaceRegressor(**FAST).fit(X_REG, Y_REG),
    }


def _data(estimator_cls):
    return (X_CLF, Y_CLF) if estimator_cls is LaplaceClassifier else (X_REG, Y_REG)


# ---------------------------------------------------------------- bad hyperparameters
BOTH = (LaplaceClassifier, LaplaceRegressor)
PARAM_CASES = [
    # (params, exception, message fragment)
    (dict(prior_precision=-1.0), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=0.0), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=np.nan), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=np.inf), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision="high"), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=[[1.0, 2.0]]), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=[1.0, -2.0]), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision=[1.0, 2.0, 3.0]), ValueError, "prior_precision has 3 values"),
    (dict(temperature=0), ValueError, "'temperature' parameter of Laplace"),
    (dict(temperature=-1.0), ValueError, "'temperature' parameter of Laplace"),
    (dict(temperature="1"), ValueError, "'temperature' parameter of Laplace"),
    (dict(n_samples=0), ValueError, "'n_samples' parameter of Laplace"),
    (dict(n_samples=2.5), ValueError, "'n_samples' parameter of Laplace"),
    (dict(max_epochs=0), ValueError, "'max_epochs' parameter of Laplace"),
    (dict(lr=-0.1), ValueError, "'lr' parameter of Laplace"),
    (dict(lr=np.inf), ValueError, "'lr' parameter of Laplace"),
    (dict(batch_size=0), ValueError, "'batch_size' parameter of Laplace"),
    (dict(hidden_layer_sizes=(0,)), ValueError, "hidden_layer_sizes must be a tuple"),
    (dict(hidden_layer_sizes=5), ValueError, "hidden_layer_sizes must be a tuple"),
    (dict(lowrank_rank=0), ValueError, "'lowrank_rank' parameter of Laplace"),
    (dict(online_frequency=0), ValueError, "'online_frequency' parameter of Laplace"),
    (dict(online_burn_in=-1), ValueError, "'online_burn_in' parameter of Laplace"),
    (dict(online_steps=0), ValueError, "'online_steps' parameter of Laplace"),
    (dict(online_lr=0.0), ValueError, "'online_lr' parameter of Laplace"),
    (dict(prior_structure="global"), ValueError, "'prior_structure' parameter of Laplace"),
    (dict(hyperparameter_tuning="always"), ValueError, "'hyperparameter_tuning' parameter of Laplace"),
    (dict(subset_of_weights="first_layer"), ValueError, "'subset_of_weights' parameter of Laplace"),
    (dict(hessian_structure="block"), ValueError, "'hessian_structure' parameter of Laplace"),
    (dict(curvature="fisher"), ValueError, "'curvature' parameter of Laplace"),
    (dict(pred_type="map"), ValueError, "'pred_type' parameter of Laplace"),
    (dict(refine="newton"), ValueError, "'refine' parameter of Laplace"),
    (dict(refine=True), ValueError, "'refine' parameter of Laplace"),
    (dict(prior_precision=True), ValueError, "prior_precision must be a positive"),
    (dict(prior_precision="1.0"), ValueError, "prior_precision must be a positive"),
    (dict(refine="laplace", hessian_structure="kron"), ValueError,
     "refine='laplace' needs hessian_structure in"),
    (dict(refine="vi", curvature="ef"), ValueError, "refine='vi' needs curvature in"),
    (dict(refine="vi", pred_type="gp"), ValueError, "refine='vi' needs pred_type in"),
    (dict(subset_of_weights="subnetwork"), ValueError, "needs subnetwork="),
    (dict(subset_of_weights="subnetwork", subnetwork="layers.0.weight"), ValueError,
     "subnetwork must be a positive int or a list"),
    (dict(subset_of_weights="subnetwork", subnetwork=0), ValueError,
     "subnetwork must be a positive int or a list"),
    (dict(subset_of_weights="subnetwork", subnetwork=5, hessian_structure="kron"), ValueError,
     "supports hessian_structure 'full' or 'diag' only"),
    (dict(subset_of_weights="subnetwork", subnetwork=5, hessian_structure="lowrank"),
     ValueError, "supports hessian_structure 'full' or 'diag' only"),
    (dict(hessian_structure="kron", prior_structure="diag"), ValueError,
     "prior_structure='diag' is not supported with hessian_structure='kron'"),
    (dict(hyperparameter_tuning="online", subset_of_weights="last_layer"), ValueError,
     "hyperparameter_tuning='online' needs subset_of_weights='all'"),
    (dict(random_state="seed"), ValueError, "'random_state' parameter of Laplace"),
    (dict(memory=3), ValueError, "memory"),
    (dict(net="mlp"), ValueError, "net must be None, a skorch NeuralNet"),
]
CLASSIFIER_PARAM_CASES = [
    (dict(link_approx="softmax"), ValueError, "'link_approx' parameter of Laplace"),
]
REGRESSOR_PARAM_CASES = [
    (dict(sigma_noise=-1.0), ValueError, "sigma_noise must be a positive"),
    (dict(sigma_noise=0.0), ValueError, "sigma_noise must be a positive"),
    (dict(sigma_noise=np.nan), ValueError, "sigma_noise must be a positive"),
    (dict(sigma_noise="loud"), ValueError, "sigma_noise must be a positive"),
    (dict(sigma_noise=True), ValueError, "sigma_noise must be a positive"),
    (dict(sigma_noise=[1.0, 2.0]), ValueError, "sigma_noise has 2 values but y has 1 outputs"),
    (dict(normalize_y="yes"), ValueError, "'normalize_y' parameter of Laplace"),
]


def _param_cases():
    for cls in BOTH:
        for params, exc, match in PARAM_CASES:
            yield pytest.param(cls, params, exc, match, id=f"{cls.__name__}-{params}")
    for params, exc, match in CLASSIFIER_PARAM_CASES:
        yield pytest.param(LaplaceClassifier, params, exc, match, id=f"clf-{params}")
    for params, exc, match in REGRESSOR_PARAM_CASES:
        yield pytest.param(LaplaceRegressor, params, exc, match, id=f"reg-{params}")


@pytest.mark.parametrize("cls, params, exc, match", list(_param_cases()))
def test_bad_hyperparameters_fail_before_training(no_training, cls, params, exc, match):
    X, y = _data(cls)
    est = cls(**{**FAST, **params})
    with pytest.raises(exc, match=re.escape(match)):
        est.fit(X, y)
    assert not hasattr(est, "net_")


def _nll_net():
    return NeuralNetClassifier(MLP, module__n_features=4, module__n_outputs=3, max_epochs=1)


@pytest.mark.parametrize("net, match", [
    (_nll_net(), "criterion must be CrossEntropyLoss"),
    (NeuralNetClassifier(MLP, module__n_features=4, module__n_outputs=3,
                         criterion=nn.CrossEntropyLoss, optimizer__weight_decay=1e-3),
     "weight_decay=0.001"),
    (FrozenEstimator(NeuralNetClassifier(MLP, criterion=nn.CrossEntropyLoss)),
     "needs an initialized, trained skorch net"),
], ids=["nll-criterion", "weight-decay", "uninitialized-frozen"])
def test_bad_nets_fail_before_training(no_training, net, match):
    with pytest.raises(ValueError, match=match):
        LaplaceClassifier(net, **FAST).fit(X_CLF, Y_CLF)


def test_online_tuning_refuses_a_frozen_net(no_training):
    net = NeuralNetClassifier(MLP, module__n_features=4, module__n_outputs=3,
                              criterion=nn.CrossEntropyLoss).initialize()
    with pytest.raises(ValueError, match="cannot be used with a FrozenEstimator"):
        LaplaceClassifier(FrozenEstimator(net), hyperparameter_tuning="online").fit(X_CLF, Y_CLF)


def test_subnetwork_larger_than_the_net_is_refused():
    # The size of the net is known only once it exists: checked after training.
    est = LaplaceClassifier(subset_of_weights="subnetwork", subnetwork=10**6, **FAST)
    with pytest.raises(ValueError, match=r"subnetwork=1000000 must be between 1 and .* \(43\)"):
        est.fit(X_CLF, Y_CLF)


# ---------------------------------------------------------------- bad data in fit
def _with(X, row, col, value):
    X = X.astype(float)
    X[row, col] = value
    return X


STRINGS = np.array([["a", "b", "c", "d"]] * 60, dtype=object)
BAD_FIT_DATA = [
    # (estimator, X, y, exception, message fragment)
    ("both", _with(X_CLF, 3, 1, np.nan), None, ValueError, "Input X contains NaN"),
    ("both", _with(X_CLF, 3, 1, np.inf), None, ValueError, "Input X contains infinity"),
    ("both", _with(X_CLF, 3, 1, -np.inf), None, ValueError, "Input X contains infinity"),
    ("both", np.empty((0, 4)), np.empty(0), ValueError, r"0 sample\(s\)"),
    ("both", np.empty((60, 0)), None, ValueError, r"0 feature\(s\)"),
    ("both", X_CLF[:, 0], None, ValueError, "Expected 2D array, got 1D array"),
    ("both", X_CLF[:, :, None], None, ValueError, "Found array with dim 3"),
    ("both", STRINGS, None, ValueError, "X must contain numeric features only"),
    ("both", pd.DataFrame({"a": ["x"] * 60, "b": X_CLF[:, 0]}), None, ValueError,
     "X must contain numeric features only"),
    ("both", X_CLF, "short", ValueError, "inconsistent numbers of samples"),
    ("clf", X_CLF, np.zeros(60), ValueError, "needs at least two classes in y"),
    ("clf", X_CLF, np.full(60, "yes"), ValueError, "needs at least two classes in y"),
    ("clf", X_CLF, np.linspace(0, 1, 60), ValueError, "Unknown label type"),
    ("clf", X_CLF, np.where(np.arange(60) == 0, np.nan, Y_CLF), ValueError, "Input y contains NaN"),
    ("reg", X_REG, np.where(np.arange(60) == 0, np.nan, Y_REG), ValueError, "Input y contains NaN"),
    ("reg", X_REG, np.where(np.arange(60) == 0, np.inf, Y_REG), ValueError,
     "Input y contains infinity"),
    ("reg", X_REG, np.array(["a"] * 60), ValueError, "y must be numeric for LaplaceRegressor"),
    ("reg", X_REG, np.array(["a"] * 60, dtype=object), ValueError,
     "y must be numeric for LaplaceRegressor"),
    ("reg", X_REG, None, ValueError, "requires y to be passed"),
]


def _fit_data_cases():
    for which, X, y, exc, match in BAD_FIT_DATA:
        classes = BOTH if which == "both" else (
            (LaplaceClassifier,) if which == "clf" else (LaplaceRegressor,))
        for cls in classes:
            yield pytest.param(cls, X, y, exc, match, id=f"{cls.__name__}-{match[:30]}")


@pytest.mark.parametrize("cls, X, y, exc, match", list(_fit_data_cases()))
def test_bad_data_fails_before_training(no_training, cls, X, y, exc, match):
    default_y = _data(cls)[1]
    if y is None and match != "requires y to be passed":
        y = default_y
    elif isinstance(y, str) and y == "short":
        y = default_y[:-1]
    with pytest.raises(exc, match=match):
        cls(**FAST).fit(X, y)


# ---------------------------------------------------------------- bad data after fit
def _predict_cases():
    bad_X = [
        (X_CLF[:, :3], ValueError, "X has 3 features, but .* is expecting 4 features"),
        (_with(X_CLF[:5], 0, 0, np.nan), ValueError, "Input X contains NaN"),
        (_with(X_CLF[:5], 0, 0, np.inf), ValueError, "Input X contains infinity"),
        (np.empty((0, 4)), ValueError, r"0 sample\(s\)"),
        (X_CLF[0], ValueError, "Expected 2D array, got 1D array"),
        (STRINGS[:2], ValueError, "X must contain numeric features only"),
    ]
    methods = {"clf": ["predict", "predict_proba", "predict_log_proba", "decision_function",
                       "predict_dist", "sample_functions"],
               "reg": ["predict", "predict_dist", "sample_functions"]}
    for which, names in methods.items():
        for name in names:
            for X, exc, match in bad_X:
                yield pytest.param(which, name, X, exc, match, id=f"{which}-{name}-{match[:25]}")


@pytest.mark.parametrize("which, method, X, exc, match", list(_predict_cases()))
def test_bad_data_at_prediction(fitted, which, method, X, exc, match):
    with pytest.raises(exc, match=match):
        getattr(fitted[which], method)(X)


@pytest.mark.parametrize("which, call, exc, match", [
    ("clf", lambda e: e.log_evidence(prior_precision=-1.0), ValueError, "prior_precision must"),
    ("clf", lambda e: e.log_evidence(prior_precision="x"), ValueError, "prior_precision must"),
    ("clf", lambda e: e.log_evidence(prior_precision=[1.0, 2.0, 3.0]), ValueError,
     "prior_precision has 3 values"),
    ("reg", lambda e: e.log_evidence(sigma_noise=0.0), ValueError, "sigma_noise must"),
    ("reg", lambda e: e.log_evidence(sigma_noise=np.inf), ValueError, "sigma_noise must"),
    ("reg", lambda e: e.log_evidence(sigma_noise=[1.0, 2.0]), ValueError,
     "sigma_noise must have the form of sigma_noise_"),
    ("clf", lambda e: e.sample_functions(X_CLF, n_samples=0), ValueError, "n_samples must"),
    ("reg", lambda e: e.sample_functions(X_REG, n_samples=1.5), ValueError, "n_samples must"),
    ("reg", lambda e: e.sample_functions(X_REG, random_state="x"), ValueError,
     "random_state must"),
], ids=["ev-neg", "ev-str", "ev-len", "ev-sigma0", "ev-sigma-inf", "ev-sigma-shape",
        "sf-n0", "sf-nfloat", "sf-seed"])
def test_bad_arguments_of_fitted_methods(fitted, which, call, exc, match):
    with pytest.raises(exc, match=match):
        call(fitted[which])


@pytest.mark.parametrize("cls, method, args", [
    (LaplaceClassifier, "predict", (X_CLF,)),
    (LaplaceClassifier, "predict_proba", (X_CLF,)),
    (LaplaceClassifier, "predict_log_proba", (X_CLF,)),
    (LaplaceClassifier, "decision_function", (X_CLF,)),
    (LaplaceClassifier, "predict_dist", (X_CLF,)),
    (LaplaceClassifier, "sample_functions", (X_CLF,)),
    (LaplaceClassifier, "log_evidence", ()),
    (LaplaceClassifier, "score", (X_CLF, Y_CLF)),
    (LaplaceRegressor, "predict", (X_REG,)),
    (LaplaceRegressor, "predict_dist", (X_REG,)),
    (LaplaceRegressor, "sample_functions", (X_REG,)),
    (LaplaceRegressor, "log_evidence", ()),
    (LaplaceRegressor, "score", (X_REG, Y_REG)),
])
def test_not_fitted(cls, method, args):
    with pytest.raises(NotFittedError, match="not fitted yet"):
        getattr(cls(**FAST), method)(*args)


# ---------------------------------------------------------------- inputs that must work
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
def test_input_dtypes(fitted, dtype):
    for cls, key in ((LaplaceClassifier, "clf"), (LaplaceRegressor, "reg")):
        X, y = _data(cls)
        Xd = (X * 4).astype(dtype) if dtype is np.int64 else X.astype(dtype)
        est = cls(**FAST).fit(Xd, y)
        out = est.predict_proba(Xd) if key == "clf" else est.predict(Xd, return_std=True)[1]
        assert out.dtype == np.float64 and np.isfinite(out).all()
        assert np.isfinite(est.log_evidence_)
        # predicting with another dtype than the one fitted on works too
        other = fitted[key].predict(X.astype(dtype))
        assert len(other) == len(X)


def test_float32_and_float64_fits_agree():
    a = LaplaceRegressor(**FAST).fit(X_REG.astype(np.float32), Y_REG)
    b = LaplaceRegressor(**FAST).fit(X_REG, Y_REG)
    np.testing.assert_allclose(a.predict(X_REG), b.predict(X_REG), rtol=1e-4)
    np.testing.assert_allclose(a.log_evidence_, b.log_evidence_, rtol=1e-4)


def test_pandas_inputs_and_string_labels():
    names = ["sepal length", "sepal width", "petal length", "petal width"]
    X = pd.DataFrame(X_CLF, columns=names)
    labels = pd.Series(np.array(["setosa", "versicolor", "virginica"])[Y_CLF])
    clf = LaplaceClassifier(**FAST).fit(X, labels)
    np.testing.assert_array_equal(clf.feature_names_in_, names)
    np.testing.assert_array_equal(clf.classes_, ["setosa", "versicolor", "virginica"])
    assert set(clf.predict(X)) <= set(labels)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        np.testing.assert_allclose(clf.predict_proba(X), clf.predict_proba(X_CLF))
    with pytest.raises(ValueError, match="feature names"):
        clf.predict(X.rename(columns={"petal width": "other"}))

    binary = LaplaceClassifier(**FAST).fit(X[:40], labels[:40].astype("category"))
    assert binary.decision_function(X[:40]).shape == (40,)
    assert list(binary.classes_) == ["setosa", "versicolor"]

    reg = LaplaceRegressor(**FAST).fit(pd.DataFrame(X_REG), pd.Series(Y_REG))
    mean, std = reg.predict(pd.DataFrame(X_REG), return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()


def test_object_array_of_numbers_is_accepted():
    est = LaplaceClassifier(**FAST).fit(X_CLF.astype(object), Y_CLF)
    assert np.isfinite(est.predict_proba(X_CLF.astype(object))).all()


# ---------------------------------------------------------------- numerical faults
@pytest.mark.parametrize("cls, params, scale_X, scale_y", [
    (LaplaceClassifier, dict(lr=1e6, max_epochs=20), 1.0, 1.0),
    (LaplaceRegressor, dict(lr=1e6, max_epochs=20), 1.0, 1.0),
    (LaplaceClassifier, {}, 1e300, 1.0),
    (LaplaceRegressor, {}, 1e300, 1.0),
], ids=["clf-lr", "reg-lr", "clf-huge-X", "reg-huge-X"])
def test_diverging_training_raises(cls, params, scale_X, scale_y):
    X, y = _data(cls)
    y = y * scale_y if cls is LaplaceRegressor else y
    est = cls(**{**FAST, **params})
    with pytest.raises(ValueError, match="MAP training diverged.*(lr|learning rate)"):
        est.fit(X * scale_X, y)
    assert not hasattr(est, "log_evidence_")  # no LA fitted on a diverged net


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("normalize_y", [True, False])
def test_targets_beyond_float_range_raise(normalize_y):
    X, y = _data(LaplaceRegressor)
    est = LaplaceRegressor(normalize_y=normalize_y, **FAST)
    with pytest.raises(ValueError, match="y"):
        est.fit(X, y * 1e300)
    assert not hasattr(est, "log_evidence_")


@pytest.mark.parametrize("scale", [1e-6, 1e6])
@pytest.mark.parametrize("cls", BOTH)
def test_extreme_feature_scales(cls, scale):
    X, y = _data(cls)
    est = cls(**{**FAST, "max_epochs": 20})
    try:
        est.fit(X * scale, y)
    except ValueError as error:  # allowed, if it says why
        assert "diverged" in str(error) and "scale the features" in str(error)
        return
    out = (est.predict_proba(X * scale) if cls is LaplaceClassifier
           else np.column_stack(est.predict(X * scale, return_std=True)))
    assert np.isfinite(out).all()
    assert np.isfinite(est.log_evidence_)
    assert np.isfinite(est.log_evidence())


def _in_bounds(est, y=None):
    log10_delta = np.log10(np.atleast_1d(est.prior_precision_))
    assert np.all(log10_delta >= LOG10_BOUNDS[0] - 1e-9)
    assert np.all(log10_delta <= LOG10_BOUNDS[1] + 1e-9)
    if y is not None:
        assert np.all(est.sigma_noise_ >= 1e-3 * np.std(y) * (1 - 1e-9))
    assert np.isfinite(est.log_evidence_)


def _warned_at_bound(record):
    return [w for w in record if issubclass(w.category, ConvergenceWarning)
            and "bound" in str(w.message)]


@pytest.mark.parametrize("cls, rows", [
    (LaplaceClassifier, [0, 20, 40]),
    (LaplaceClassifier, [0, 1, 20]),
    (LaplaceRegressor, [0, 1, 2]),
    (LaplaceRegressor, [0]),
])
@pytest.mark.parametrize("structure", ["full", "diag"])
def test_tiny_data_tunes_inside_the_bounds(cls, rows, structure):
    X, y = _data(cls)
    est = cls(**{**FAST, "max_epochs": 20, "hessian_structure": structure})
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.fit(X[rows], y[rows])
    _in_bounds(est, y[rows] if cls is LaplaceRegressor else None)
    for w in _warned_at_bound(record):  # a warning is allowed only when at a bound
        at_delta = np.isclose(np.abs(np.log10(est.prior_precision_)), 4).any()
        at_sigma = "sigma_noise" in str(w.message)
        assert at_delta or at_sigma


def test_prior_precision_at_its_bound_warns():
    # 3 rows and targets of size ~1e8 without normalize_y: the weights must be huge,
    # so the evidence wants a prior precision below 1e-4.
    est = LaplaceRegressor(normalize_y=False, hyperparameter_tuning="evidence", **FAST)
    with pytest.warns(ConvergenceWarning, match=r"prior_precision at its bound"):
        est.fit(X_REG[:3], Y_REG[:3] * 1e6)
    assert est.prior_precision_ == pytest.approx(1e-4)
    _in_bounds(est, Y_REG[:3] * 1e6)


def test_interpolating_fit_stops_sigma_at_its_floor():
    # A frozen net that reproduces y exactly: the evidence grows as σ → 0.
    X = np.random.RandomState(0).randn(3, 4)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = NeuralNetRegressor(MLP, module__n_features=4, module__hidden_layer_sizes=(5,),
                                 criterion=nn.MSELoss).initialize()
    with torch.no_grad():
        y = copy.deepcopy(net.module_).double()(torch.tensor(X)).numpy()[:, 0]
    est = LaplaceRegressor(FrozenEstimator(net), hessian_structure="full", normalize_y=False)
    with pytest.warns(ConvergenceWarning, match=r"sigma_noise at its lower bound"):
        est.fit(X, y)
    _in_bounds(est, y)
    assert est.sigma_noise_ == pytest.approx(1e-3 * np.std(y), rel=1e-6)
    mean, std = est.predict(X, return_std=True)
    assert np.isfinite(mean).all() and np.isfinite(std).all()


# ---------------------------------------------------------------- property-based
INVALID_POSITIVE_FLOAT = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([np.nan, np.inf, -np.inf, "1.0", None, [1.0, "a"]]),
)
INVALID_POSITIVE_INT = st.one_of(
    st.integers(max_value=0),
    st.floats(min_value=0.01, max_value=1e3).filter(lambda v: not float(v).is_integer()),
    st.sampled_from(["5", None, True, np.inf]),
)
CHOICE_PARAMS = ["prior_structure", "hyperparameter_tuning", "subset_of_weights",
                 "hessian_structure", "curvature", "pred_type", "refine"]
CHOICE_VALUES = {"laplace", "vi",
                 "scalar", "layerwise", "diag", "evidence", "online", "auto", "all",
                 "last_layer", "subnetwork", "full", "kron", "lowrank", "ggn", "ef", "glm",
                 "nn", "probit", "bridge", "mc"}


@st.composite
def invalid_param(draw):
    """(estimator class, parameter name, an invalid value for it)."""
    cls = draw(st.sampled_from(BOTH))
    kind = draw(st.sampled_from(["float", "int", "choice", "prior", "sigma", "hidden"]))
    if kind == "float":
        return cls, draw(st.sampled_from(["temperature", "lr", "online_lr"])), draw(
            INVALID_POSITIVE_FLOAT)
    if kind == "int":
        name = draw(st.sampled_from(["n_samples", "max_epochs", "batch_size",
                                     "online_frequency", "online_steps", "lowrank_rank"]))
        value = draw(INVALID_POSITIVE_INT)
        # None is valid for these two (their defaults): draw 0 instead
        return cls, name, 0 if name in ("lowrank_rank", "online_steps") and value is None else value
    if kind == "choice":
        value = draw(st.text(max_size=8).filter(lambda s: s not in CHOICE_VALUES))
        return cls, draw(st.sampled_from(CHOICE_PARAMS)), value
    if kind == "prior":
        bad = draw(st.floats(max_value=0.0, allow_nan=False))
        good = draw(st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=3))
        return cls, "prior_precision", draw(st.sampled_from([bad, good + [bad]]))
    if kind == "sigma":
        bad = draw(st.one_of(st.floats(max_value=0.0, allow_nan=False),
                             st.sampled_from([np.nan, np.inf])))
        return LaplaceRegressor, "sigma_noise", bad
    sizes = draw(st.lists(st.integers(-5, 5), min_size=1, max_size=3).filter(
        lambda s: min(s) <= 0))
    return cls, "hidden_layer_sizes", tuple(sizes)


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(invalid_param())
@example((LaplaceClassifier, "n_samples", -(2**63) - 1))  # beyond int64: np.isfinite fails
def test_property_invalid_parameters_name_themselves_before_training(case):
    cls, name, value = case
    X, y = _data(cls)
    with mock.patch.object(nets, "train_map", _refuse_training):
        with pytest.raises((ValueError, TypeError)) as info:
            cls(**{**FAST, name: value}).fit(X, y)
    assert name in str(info.value)


@settings(max_examples=25, deadline=None, database=None)
@given(
    cls=st.sampled_from(BOTH),
    prior_precision=st.floats(1e-6, 1e6),
    temperature=st.floats(1e-3, 1e3),
    n_samples=st.integers(1, 10**4),
    lr=st.floats(1e-6, 1.0),
    hidden=st.lists(st.integers(1, 8), min_size=0, max_size=2),
    structure=st.sampled_from(["auto", "full", "diag", "kron", "lowrank"]),
)
def test_property_valid_parameters_reach_training(cls, prior_precision, temperature,
                                                  n_samples, lr, hidden, structure):
    X, y = _data(cls)
    est = cls(prior_precision=prior_precision, temperature=temperature, n_samples=n_samples,
              lr=lr, hidden_layer_sizes=tuple(hidden), hessian_structure=structure,
              max_epochs=1)
    with mock.patch.object(nets, "train_map", _refuse_training):
        with pytest.raises(TrainingReached):
            est.fit(X, y)


@settings(max_examples=25, deadline=None, database=None)
@given(
    cls=st.sampled_from(BOTH),
    row=st.integers(0, 59),
    col=st.integers(0, 3),
    value=st.sampled_from([np.nan, np.inf, -np.inf]),
    frame=st.booleans(),
)
def test_property_non_finite_features_are_refused_before_training(cls, row, col, value, frame):
    X, y = _data(cls)
    X = _with(X, row, col, value)
    X = pd.DataFrame(X, columns=list("abcd")) if frame else X
    with mock.patch.object(nets, "train_map", _refuse_training):
        with pytest.raises(ValueError, match="Input X contains (NaN|infinity)"):
            cls(**FAST).fit(X, y)


def test_frozen_net_with_non_finite_weights_is_refused():
    X, y = load_iris(return_X_y=True)
    net = NeuralNetClassifier(nn.Sequential(nn.Linear(4, 3)), criterion=nn.CrossEntropyLoss)
    net.initialize()
    with torch.no_grad():
        net.module_[0].weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        LaplaceClassifier(FrozenEstimator(net)).fit(X, y)


def _predict_inputs():
    X = X_CLF[:6]
    return {
        "C float64": X, "F float64": np.asfortranarray(X), "float32": X.astype(np.float32),
        "float16": X.astype(np.float16), "int": (4 * X).astype(np.int64), "list": X.tolist(),
        "big-endian": X.astype(">f8"), "sum overflows": np.full((3, 4), 1e308),
        "NaN": _with(X, 1, 2, np.nan), "-inf": _with(X, 0, 0, -np.inf),
        "3 columns": X[:, :3], "no rows": np.empty((0, 4)), "1-D": X[0], "strings": STRINGS[:2],
        "frame": pd.DataFrame(X, columns=list("abcd")),
    }


@pytest.mark.parametrize("name", list(_predict_inputs()))
def test_prediction_validation_shortcut_is_validate_data(fitted, name):
    """validate_predict_X returns what validate_data returns, or raises and warns the same."""
    X, est = _predict_inputs()[name], fitted["clf"]

    def outcome(fn):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            try:
                result = np.asarray(fn())
            except (TypeError, ValueError) as error:
                result = (type(error), str(error).split(";")[-1].strip())
        return result, [str(w.message) for w in record]

    ours, our_warnings = outcome(lambda: validate_predict_X(est, X))
    theirs, their_warnings = outcome(
        lambda: validate_data(est, X, reset=False, dtype=[np.float64, np.float32]))
    assert our_warnings == their_warnings
    if isinstance(theirs, tuple):
        assert ours == theirs
    else:
        assert ours.dtype == theirs.dtype and ours.flags.c_contiguous == theirs.flags.c_contiguous
        np.testing.assert_array_equal(ours, theirs)


def test_prediction_validation_shortcut_keeps_feature_name_checks():
    frame = pd.DataFrame(X_CLF, columns=list("abcd"))
    est = LaplaceClassifier(**FAST).fit(frame, Y_CLF)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        est.predict_proba(X_CLF)
    with pytest.raises(ValueError, match="feature names"):
        est.predict_proba(frame[list("dcba")])
