"""The net's device: training and the whole LA (float64) run there; CPU and CUDA agree."""

import numpy as np
import pytest
import torch
from skorch import NeuralNetClassifier
from sklearn.datasets import load_iris
from torch import nn

from sklaplace import LaplaceClassifier


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("subset", ["all", "last_layer"])
def test_cuda_net(subset):
    X, y = load_iris(return_X_y=True)
    module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, device="cuda",
                              max_epochs=20, optimizer=torch.optim.Adam, lr=0.03, verbose=0)
    clf = LaplaceClassifier(net, subset_of_weights=subset, random_state=0).fit(
        X.astype(np.float32), y)
    assert next(clf.net_.module_.parameters()).is_cuda
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(1), 1)
    assert np.isfinite(clf.log_evidence_)


def test_cpu_device_string_is_honoured():
    X, y = load_iris(return_X_y=True)
    module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, device="cpu",
                              max_epochs=5, verbose=0)
    clf = LaplaceClassifier(net, subset_of_weights="last_layer", random_state=0).fit(
        X.astype(np.float32), y)
    assert clf.net_.device == "cpu"
    assert clf.predict_proba(X).shape == (150, 3)


CONFIGS = [("all", "full"), ("all", "kron"), ("all", "diag"), ("all", "lowrank"),
           ("last_layer", "full"), ("last_layer", "kron"), ("last_layer", "diag"),
           ("subnetwork", "full")]


def _frozen_pair(kind, X, y):
    """One trained net, as FrozenEstimators on the CPU and on CUDA (same weights)."""
    from skorch import NeuralNetRegressor
    from sklearn.frozen import FrozenEstimator

    torch.manual_seed(0)
    n_out = 3 if kind == "classification" else 1
    module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6), nn.Tanh(),
                           nn.Linear(6, n_out)).double()  # float64: the LA's own precision
    if kind == "classification":
        net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, max_epochs=30,
                                  optimizer=torch.optim.Adam, lr=0.03, verbose=0,
                                  train_split=None).fit(X, y)
    else:
        net = NeuralNetRegressor(module, criterion=nn.MSELoss, max_epochs=30,
                                 optimizer=torch.optim.Adam, lr=0.03, verbose=0,
                                 train_split=None).fit(X, y.reshape(-1, 1))
    import copy

    on_cuda = copy.deepcopy(net)
    on_cuda.set_params(device="cuda")
    on_cuda.module_.to("cuda")
    return FrozenEstimator(net), FrozenEstimator(on_cuda)


def _task(kind):
    """(X, y, the net on the CPU, the same net on CUDA, the estimator class) of iris, or of a
    regression made from its features."""
    from sklaplace import LaplaceRegressor

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    if kind == "regression":
        y = X[:, 0] * 2.0 - X[:, 1] + 0.1 * np.random.RandomState(0).randn(len(X))
        X = np.hstack([X[:, 1:], X[:, 1:2] ** 2])
    cpu_net, cuda_net = _frozen_pair(kind, X, y)
    return X, y, cpu_net, cuda_net, (LaplaceClassifier if kind == "classification"
                                     else LaplaceRegressor)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("subset,structure", CONFIGS)
@pytest.mark.parametrize("kind", ["classification", "regression"])
@pytest.mark.parametrize("tuning", ["evidence", "cv"])
def test_cuda_equals_cpu(subset, structure, kind, tuning):
    """The LA on CUDA gives the CPU's numbers (float64 both; tolerance for reordered sums)."""
    X, y, cpu_net, cuda_net, Est = _task(kind)
    params = dict(subset_of_weights=subset, hessian_structure=structure,
                  hyperparameter_tuning=tuning, prior_structure="layerwise"
                  if structure != "kron" or subset == "all" else "scalar",
                  subnetwork=20, lowrank_rank=10, random_state=0)
    if tuning == "cv":
        params["prior_structure"] = "scalar"
    cpu = Est(cpu_net, **params).fit(X, y)
    gpu = Est(cuda_net, **params).fit(X, y)
    assert gpu.laplace_.posterior is not None and gpu.laplace_.subset.theta.is_cuda
    np.testing.assert_allclose(gpu.prior_precision_, cpu.prior_precision_, rtol=1e-5)
    np.testing.assert_allclose(gpu.log_evidence_, cpu.log_evidence_, rtol=1e-8)
    if kind == "classification":
        np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-9)
    else:
        for a, b in zip(gpu.predict(X, return_std=True), cpu.predict(X, return_std=True)):
            np.testing.assert_allclose(a, b, rtol=1e-6)  # σ: L-BFGS-B's tolerance
    np.testing.assert_allclose(gpu.sample_functions(X[:5], 4, random_state=1),
                               cpu.sample_functions(X[:5], 4, random_state=1), atol=1e-8)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("tuning", ["online", "auto"])
def test_default_mlp_on_cuda(tuning):
    from sklaplace import LaplaceRegressor

    X, y = load_iris(return_X_y=True)
    clf = LaplaceClassifier(device="cuda", hyperparameter_tuning=tuning, max_epochs=20,
                            random_state=0).fit(X, y)
    assert next(clf.net_.module_.parameters()).is_cuda and clf.laplace_.subset.theta.is_cuda
    np.testing.assert_allclose(clf.predict_proba(X).sum(1), 1)
    reg = LaplaceRegressor(device="cuda", hyperparameter_tuning=tuning, max_epochs=20,
                           random_state=0).fit(X[:, 1:], X[:, 0])
    mean, std = reg.predict(X[:, 1:], return_std=True)
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
    import pickle

    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_allclose(again.predict(X[:, 1:]), mean)


def test_device_parameter_is_validated():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="device"):
        LaplaceClassifier(device="tpu", max_epochs=2).fit(X, y)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device is 'cuda'"):
            LaplaceClassifier(device="cuda", max_epochs=2).fit(X, y)


def test_device_parameter_does_not_override_a_skorch_net():
    X, y = load_iris(return_X_y=True)
    net = NeuralNetClassifier(nn.Sequential(nn.Linear(4, 3)), criterion=nn.CrossEntropyLoss,
                              max_epochs=2, device="cpu", verbose=0)
    expected = "Set the device on the skorch net" if torch.cuda.is_available() else "no CUDA"
    with pytest.raises(ValueError, match=expected):
        LaplaceClassifier(net, device="cuda:0").fit(X.astype(np.float32), y)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("refine", ["laplace", "vi"])
@pytest.mark.parametrize("structure", ["full", "diag"])
@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_refine_on_cuda_equals_cpu(refine, structure, kind):
    X, y, cpu_net, cuda_net, Est = _task(kind)
    params = dict(subset_of_weights="all", hessian_structure=structure, refine=refine,
                  hyperparameter_tuning="evidence", random_state=0)
    cpu = Est(cpu_net, **params).fit(X, y)
    gpu = Est(cuda_net, **params).fit(X, y)
    np.testing.assert_allclose(gpu.refine_objective_, cpu.refine_objective_, rtol=1e-6)
    if kind == "classification":
        np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-6)
    else:
        for a, b in zip(gpu.predict(X, return_std=True), cpu.predict(X, return_std=True)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
