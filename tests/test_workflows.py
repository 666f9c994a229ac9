"""The workflows around the core: Ctrl-C, torch's grad modes, partial_fit
with another architecture, pickles of a CUDA fit on a CPU-only machine."""

import pickle
import signal
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError
from skorch import NeuralNet
from skorch.callbacks import Callback, EarlyStopping
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace._laplace.nets import MLP

MODES = {
    "outside": None,
    "no_grad": torch.no_grad,
    "set_grad_enabled(False)": lambda: torch.set_grad_enabled(False),
    "inference_mode": torch.inference_mode,
}


def _data(n=40, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3)
    labels = (X[:, 0] + 0.3 * rng.randn(n) > 0).astype(int)
    return X, labels, X @ [1.0, -1.0, 0.5] + 0.1 * rng.randn(n)


def _in_mode(mode, call):
    if MODES[mode] is None:
        return call()
    with MODES[mode]():
        return call()


def _predictions(est, X):
    """Every prediction method's numbers (numpy), in a fixed order."""
    out = [est.predict(X), est.sample_functions(X, n_samples=2, random_state=0),
           est.log_evidence()]
    if isinstance(est, LaplaceClassifier):
        dist = est.predict_dist(X)
        out += [est.predict_proba(X), est.decision_function(X), dist.logit_mean, dist.logit_cov]
    else:
        dist = est.predict_dist(X)
        out += [*est.predict(X, return_std=True), dist.mean, dist.epistemic_var]
    return out


def _assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- grad modes (items 2, 3)
@pytest.mark.parametrize("mode", ["no_grad", "set_grad_enabled(False)", "inference_mode"])
@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_fit_and_predict_in_any_grad_mode_give_the_same_numbers(kind, mode):
    """fit (evidence tuning, the regressor's online tuning) failed inside torch.no_grad()
    and prediction inside torch.inference_mode() ("element 0 of tensors does not require
    grad"); both must work there and give the numbers of a fit outside."""
    X, y_cls, y_reg = _data()
    est, y = ((LaplaceClassifier, y_cls) if kind == "classifier" else (LaplaceRegressor, y_reg))
    params = dict(hidden_layer_sizes=(4,), max_epochs=5, random_state=0,
                  hyperparameter_tuning="evidence" if kind == "classifier" else "auto")
    reference = est(**params).fit(X, y)
    expected = _predictions(reference, X)
    fitted = _in_mode(mode, lambda: est(**params).fit(X, y))
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    _assert_identical(_in_mode(mode, lambda: _predictions(fitted, X)), expected)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["classifier", "regressor"]),
    hidden=st.lists(st.integers(1, 5), min_size=0, max_size=2),
    structure=st.sampled_from(["full", "diag", "kron"]),
    pred_type=st.sampled_from(["glm", "nn"]),
    fit_mode=st.sampled_from(["outside", "no_grad", "inference_mode"]),
    seed=st.integers(0, 2**16),
)
def test_property_predictions_are_the_same_in_every_grad_mode(kind, hidden, structure, pred_type,
                                                             fit_mode, seed):
    """Random small nets fitted in a random grad mode: predict_proba / predict /
    predict_dist give identical numbers outside, inside torch.no_grad() and inside
    torch.inference_mode()."""
    X, y_cls, y_reg = _data(n=30, seed=seed % 7)
    est, y = ((LaplaceClassifier, y_cls) if kind == "classifier" else (LaplaceRegressor, y_reg))
    fitted = _in_mode(fit_mode, lambda: est(
        hidden_layer_sizes=tuple(hidden), max_epochs=3, subset_of_weights="all",
        hessian_structure=structure, pred_type=pred_type, n_samples=4,
        hyperparameter_tuning="evidence", random_state=seed).fit(X, y))
    X_test = np.random.RandomState(seed).randn(7, 3)
    expected = _predictions(fitted, X_test)
    for mode in ("no_grad", "inference_mode"):
        _assert_identical(_in_mode(mode, lambda: _predictions(fitted, X_test)), expected)


# ---------------------------------------------------------------- Ctrl-C (item 1)
class _CtrlC(Callback):
    """Presses Ctrl-C (a real SIGINT to this process) after a few training batches."""

    started = []  # on_train_begin of every training run (callbacks are copied by clone)

    def __init__(self, after=3):
        self.after = after

    def on_train_begin(self, net, **kwargs):
        self.batches_ = 0
        _CtrlC.started.append(net)

    def on_batch_end(self, net, **kwargs):
        self.batches_ += 1
        if self.batches_ == self.after:
            signal.raise_signal(signal.SIGINT)


@pytest.fixture
def ctrl_c(monkeypatch):
    """Python's own SIGINT handler (test runners may install another), restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    _CtrlC.started.clear()
    yield _CtrlC
    signal.signal(signal.SIGINT, previous)


def _user_net(*callbacks, max_epochs=40):
    return NeuralNet(MLP, module__n_features=3, module__n_outputs=2,
                     module__hidden_layer_sizes=(4,), criterion=nn.CrossEntropyLoss,
                     optimizer=torch.optim.Adam, lr=0.01, batch_size=8, max_epochs=max_epochs,
                     train_split=None, callbacks=list(callbacks), verbose=0)


def test_ctrl_c_in_training_propagates_and_keeps_the_previous_fit(ctrl_c):
    """skorch's partial_fit swallowed the KeyboardInterrupt: fit returned normally with a
    net trained 3 of 40 epochs and the earlier fitted model replaced."""
    X, y, _ = _data()
    est = LaplaceClassifier(_user_net(), hyperparameter_tuning="evidence", random_state=0)
    est.fit(X, y)
    net_before, expected = est.net_, est.predict_proba(X)
    est.set_params(net=_user_net(ctrl_c(after=3)))
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert len(ctrl_c.started) == 1
    assert est.net_ is net_before and len(est.net_.history) == 40
    np.testing.assert_array_equal(est.predict_proba(X), expected)


def test_ctrl_c_under_cv_tuning_does_not_restart_training(ctrl_c):
    """Under "cv" (two trainings) the interrupt was swallowed and training restarted."""
    X, y, _ = _data(n=60)
    est = LaplaceClassifier(_user_net(ctrl_c(after=2)), hyperparameter_tuning="cv",
                            random_state=0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(X, y)
    assert len(ctrl_c.started) == 1
    with pytest.raises(NotFittedError):
        est.predict(X)


def test_ctrl_c_in_a_later_partial_fit_keeps_the_earlier_tasks(ctrl_c):
    X, y, _ = _data()
    est = LaplaceClassifier(_user_net(), random_state=0).partial_fit(X, y, classes=[0, 1])
    posterior, expected = est.laplace_.posterior, est.predict_proba(X)
    est.set_params(net=_user_net(ctrl_c(after=2)))
    with pytest.raises(KeyboardInterrupt):
        est.partial_fit(X[::-1], y[::-1])
    assert est.laplace_.posterior is posterior and est.n_tasks_ == 1
    np.testing.assert_array_equal(est.predict_proba(X), expected)


def test_early_stopping_still_ends_training_normally(ctrl_c):
    """skorch's EarlyStopping ends training by raising KeyboardInterrupt itself: that is
    no Ctrl-C, and the fit completes."""
    X, y, _ = _data()
    stop = EarlyStopping(monitor="train_loss", patience=2, threshold=1e9)
    est = LaplaceClassifier(_user_net(stop), hyperparameter_tuning="evidence",
                            random_state=0).fit(X, y)
    assert len(est.net_.history) == 3  # the first epoch improves, two do not
    assert est.predict_proba(X).shape == (len(X), 2)


# ---------------------------------------------------------------- partial_fit (item 7)
def test_partial_fit_with_other_hidden_layer_sizes_names_the_parameter():
    """A size mismatch in load_state_dict (RuntimeError) before."""
    X, _, y = _data()
    est = LaplaceRegressor(hidden_layer_sizes=(4,), max_epochs=2, random_state=0)
    est.partial_fit(X, y)
    expected = est.predict(X)
    est.set_params(hidden_layer_sizes=(6,))
    with pytest.raises(ValueError, match=r"hidden_layer_sizes=\(6,\).*\(4,\)"):
        est.partial_fit(X, y)
    np.testing.assert_array_equal(est.predict(X), expected)
    est.set_params(hidden_layer_sizes=(4,)).partial_fit(X, y)  # the same one goes on
    assert est.n_tasks_ == 2


def test_partial_fit_with_a_net_of_another_module_names_net():
    X, y, _ = _data()
    est = LaplaceClassifier(_user_net(max_epochs=2), random_state=0)
    est.partial_fit(X, y, classes=[0, 1])
    other = _user_net(max_epochs=2).set_params(module__hidden_layer_sizes=(3, 3))
    with pytest.raises(ValueError, match=r"^net: .*layers\.0\.weight: \(4, 3\) → \(3, 3\)"):
        est.set_params(net=other).partial_fit(X, y)


def test_a_new_class_in_partial_fit_after_fit_names_fit():
    X, y, _ = _data()
    est = LaplaceClassifier(hidden_layer_sizes=(3,), max_epochs=2, random_state=0,
                            hyperparameter_tuning="evidence", subset_of_weights="all",
                            hessian_structure="diag").fit(X, y)
    with pytest.raises(ValueError, match="seen by fit") as error:
        est.partial_fit(X[:4], [0, 1, 2, 1])
    assert "first partial_fit" not in str(error.value)


# ---------------------------------------------------------------- pickles across devices (item 8)
def _tensors(obj, depth=6, seen=None):
    """Every torch tensor reachable from ``obj`` (attributes, containers)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, nn.Module):
        return list(obj.state_dict().values())
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        items = vars(obj).values()
    else:
        return []
    return [t for item in items for t in _tensors(item, depth - 1, seen)]


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_a_cuda_fit_unpickles_on_the_cpu_with_the_same_numbers(kind, monkeypatch):
    """A fit whose tensors were stored with a CUDA location (what torch writes for a fit on
    a GPU; faked here by torch's location tag) failed to unpickle where CUDA is absent
    ("Attempting to deserialize object on a CUDA device"): its tensors must load onto the
    CPU and predict the same numbers."""
    X, y_cls, y_reg = _data()
    est = (LaplaceClassifier(hidden_layer_sizes=(3,), max_epochs=3, random_state=0,
                             hyperparameter_tuning="evidence").fit(X, y_cls)
           if kind == "classifier" else
           LaplaceRegressor(hidden_layer_sizes=(3,), max_epochs=3, random_state=0,
                            refine="laplace", hessian_structure="full").fit(X, y_reg))
    expected = _predictions(est, X)
    import torch.serialization

    real_tag = torch.serialization.location_tag
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: (
        "cuda:0" if real_tag(storage) == "cpu" else real_tag(storage)))
    est.net_.device = "cuda"  # what skorch records for a net on the GPU
    blob = pickle.dumps(est)
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning) as record:
        loaded = pickle.loads(blob)
    assert any("fitted on 'cuda:0'" in str(w.message) for w in record)
    assert {t.device.type for t in _tensors(loaded)} == {"cpu"}
    _assert_identical(_predictions(loaded, X), expected)
