"""Fitted estimators survive pickle and joblib round-trips exactly."""

import pickle

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_iris, make_regression
from sklearn.preprocessing import StandardScaler
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor

FAST = dict(hidden_layer_sizes=(5,), max_epochs=5, random_state=0)
COMBINATIONS = [
    (subset, structure)
    for subset in ("all", "last_layer")
    for structure in ("full", "diag", "kron", "lowrank")
] + [("subnetwork", "full"), ("subnetwork", "diag")]


def _iris():
    X, y = load_iris(return_X_y=True)
    rows = np.r_[0:20, 50:70, 100:120]
    return StandardScaler().fit_transform(X[rows]), y[rows]


X_CLF, Y_CLF = _iris()
X_REG, Y_REG = make_regression(60, 4, noise=1.0, random_state=0)


def _modules(obj, depth=3, seen=None):
    """Every torch module reachable from ``obj`` through instance attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, nn.Module):
        return list(obj.modules())
    found = []
    values = vars(obj).values() if hasattr(obj, "__dict__") else []
    for value in values:
        found += _modules(value, depth - 1, seen)
    return found


def _outputs(est, X):
    """Everything a fitted estimator reports, as arrays and floats."""
    out = {
        "predict": est.predict(X),
        "log_evidence_": est.log_evidence_,
        "log_evidence": est.log_evidence(),
        "log_evidence(2)": est.log_evidence(prior_precision=2.0),
        "prior_precision_": np.asarray(est.prior_precision_),
        "samples": est.sample_functions(X[:7], n_samples=3, random_state=1),
        "n_params_": est.n_params_,
        "structure": (est.subset_of_weights_, est.hessian_structure_),
    }
    dist = est.predict_dist(X)
    if isinstance(est, LaplaceClassifier):
        out.update(proba=est.predict_proba(X), decision=est.decision_function(X),
                   logit_mean=dist.logit_mean, proba_dist=dist.proba(),
                   alpha=dist.dirichlet().alpha)
    else:
        mean, std = est.predict(X, return_std=True)
        out.update(mean=mean, std=std, sigma_noise_=np.asarray(est.sigma_noise_),
                   interval=np.asarray(dist.interval(0.9)),
                   log_evidence_sigma=est.log_evidence(sigma_noise=1.5 * est.sigma_noise_))
    return out


def _assert_identical(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            assert a[key] == b[key], key


def _round_trips(est, tmp_path):
    yield "pickle", pickle.loads(pickle.dumps(est, protocol=pickle.HIGHEST_PROTOCOL))
    path = tmp_path / "est.joblib"
    joblib.dump(est, path)
    yield "joblib", joblib.load(path)
    joblib.dump(est, tmp_path / "est.joblib.z", compress=3)
    yield "joblib-compressed", joblib.load(tmp_path / "est.joblib.z")


def _check_round_trip(est, X, tmp_path):
    before = _outputs(est, X)  # predict first: prediction must not leave unpicklable state
    for how, loaded in _round_trips(est, tmp_path):
        assert type(loaded) is type(est), how
        _assert_identical(before, _outputs(loaded, X))
        modules = _modules(loaded)
        assert len(modules) >= 4  # net_.module_ and the LA's float64 copy, with submodules
        for module in modules:
            hooks = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks)
            assert not any(hooks), f"{how}: live hooks on {type(module).__name__}"
    # the original is unchanged by being pickled
    _assert_identical(before, _outputs(est, X))


@pytest.mark.parametrize("subset, structure", COMBINATIONS)
def test_classifier_round_trip(subset, structure, tmp_path):
    est = LaplaceClassifier(subset_of_weights=subset, hessian_structure=structure,
                            subnetwork=10 if subset == "subnetwork" else None, **FAST)
    est.fit(X_CLF, Y_CLF)
    assert (est.subset_of_weights_, est.hessian_structure_) == (subset, structure)
    _check_round_trip(est, X_CLF, tmp_path)


@pytest.mark.parametrize("subset, structure", COMBINATIONS)
def test_regressor_round_trip(subset, structure, tmp_path):
    est = LaplaceRegressor(subset_of_weights=subset, hessian_structure=structure,
                           subnetwork=10 if subset == "subnetwork" else None, **FAST)
    est.fit(X_REG, Y_REG)
    assert (est.subset_of_weights_, est.hessian_structure_) == (subset, structure)
    _check_round_trip(est, X_REG, tmp_path)


@pytest.mark.parametrize("est, X, y", [
    (LaplaceClassifier(pred_type="nn", n_samples=10, **FAST), X_CLF, Y_CLF),
    (LaplaceClassifier(link_approx="mc", n_samples=10, prior_structure="layerwise", **FAST),
     X_CLF, Y_CLF),
    (LaplaceClassifier(hyperparameter_tuning="online", online_frequency=2, online_steps=5,
                       **FAST), X_CLF[:40], Y_CLF[:40]),
    (LaplaceRegressor(pred_type="nn", n_samples=10, normalize_y=True, **FAST), X_REG, Y_REG),
    (LaplaceRegressor(sigma_noise=[1.0, 2.0], **FAST),
     X_REG, np.column_stack([Y_REG, -Y_REG])),
], ids=["clf-nn", "clf-mc-layerwise", "clf-binary-online", "reg-nn-normalize", "reg-2-outputs"])
def test_variants_round_trip(est, X, y, tmp_path):
    _check_round_trip(est.fit(X, y), X, tmp_path)


def test_a_pickle_of_the_earlier_fitted_layout_is_refused_clearly():
    """Fits pickled before ``laplace_`` held the fitted state fail loudly, not later."""
    import pickle

    import numpy as np

    from sklaplace import LaplaceClassifier

    rng = np.random.RandomState(0)
    X, y = rng.normal(size=(30, 3)), np.arange(30) % 2
    est = LaplaceClassifier(hidden_layer_sizes=(3,), max_epochs=2, random_state=0).fit(X, y)
    state = dict(est.__dict__)
    state.pop("laplace_")
    state["_posterior"] = None  # what an earlier version stored
    old = LaplaceClassifier.__new__(LaplaceClassifier)
    with pytest.raises(ValueError, match="pickled by an earlier sklaplace"):
        old.__setstate__(state)
    assert pickle.loads(pickle.dumps(est)).predict_proba(X).shape == (30, 2)


#: the module paths of the flat layout, before the estimators, metrics, plotting and
#: distributions packages
FLAT_LAYOUT = [
    "sklaplace._classification_metrics", "sklaplace._regression_metrics", "sklaplace._scoring",
    "sklaplace._display", "sklaplace._evidence_curve", "sklaplace._ood_histogram",
    "sklaplace._dirichlet", "sklaplace._links", "sklaplace._scipy_like", "sklaplace._joint",
    "sklaplace.classifier", "sklaplace.regressor", "sklaplace._base", "sklaplace._fitting",
    "sklaplace._training", "sklaplace._validation", "sklaplace._selection",
    "sklaplace._averaging", "sklaplace._warmup", "sklaplace._crossfit", "sklaplace._continual",
    "sklaplace._dask", "sklaplace._dask_fit", "sklaplace._dask_train",
    "sklaplace._regressor_noise", "sklaplace._classifier_predictive",
    "sklaplace._regressor_predictive", "sklaplace._labels", "sklaplace._threads",
    "sklaplace._policy",
]


def test_pickles_of_the_flat_layout_fail_naming_the_module():
    """Pickles are tied to the version that wrote them, as scikit-learn's are: objects
    pickled when the distributions, metrics and estimators were flat modules of
    ``sklaplace`` (``sklaplace._dirichlet``, ...) fail to load, naming the module."""
    from pathlib import Path

    blob = (Path(__file__).parent / "data" / "flat_layout.pkl").read_bytes()
    assert b"sklaplace._dirichlet" in blob  # written before the move
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'sklaplace\.") as error:
        pickle.loads(blob)
    assert error.value.name in FLAT_LAYOUT


@pytest.mark.parametrize("old", FLAT_LAYOUT)
def test_no_earlier_module_path_resolves(old):
    """No import hook maps the earlier paths: a pickle naming one fails, naming it."""
    import importlib.util
    import sys

    assert importlib.util.find_spec(old) is None
    assert not any(type(finder).__module__.startswith("sklaplace") for finder in sys.meta_path)
    with pytest.raises(ModuleNotFoundError, match=f"No module named '{old}'"):
        pickle.loads(f"c{old}\nLaplaceClassifier\n.".encode())
