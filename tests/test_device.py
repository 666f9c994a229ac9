"""The net's device: training runs there, the LA on the CPU in float64."""

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
