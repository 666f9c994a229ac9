"""Cold start: what ``import sklaplace`` and a process's first fit import, and the default
MLP's optimizers (torch's arithmetic without the first-use import of TorchDynamo)."""

import subprocess
import sys

import pytest
import torch

from sklaplace._laplace import optim


def _train(optimizer_cls, steps=6, dtype=torch.float32, **kwargs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(),
                                torch.nn.Linear(5, 2)).to(dtype)
    X, y = torch.randn(20, 3).to(dtype), torch.randint(0, 2, (20,))
    opt = optimizer_cls(model.parameters(), **kwargs)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X), y)
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return [p.detach().clone() for p in model.parameters()], opt.state_dict()


@pytest.mark.parametrize("ours,torchs,kwargs", [
    (optim.Adam, torch.optim.Adam, {"lr": 0.05}),
    (optim.Adam, torch.optim.Adam, {"lr": 0.05, "amsgrad": True, "foreach": False}),
    # L-BFGS's algebra runs in float64 (optim.LBFGS): torch's on float64 parameters
    (optim.LBFGS, torch.optim.LBFGS, {"max_iter": 1, "max_eval": 25,
                                      "line_search_fn": "strong_wolfe",
                                      "dtype": torch.float64}),
])
def test_default_optimizers_are_torchs_arithmetic(ours, torchs, kwargs):
    assert issubclass(ours, torchs)
    mine, mine_state = _train(ours, **kwargs)
    theirs, their_state = _train(torchs, **kwargs)
    for a, b in zip(mine, theirs):
        assert torch.equal(a, b)  # bit for bit
    assert mine_state["param_groups"] == their_state["param_groups"]


def test_adam_step_keeps_the_callers_grad_mode():
    p = torch.nn.Parameter(torch.ones(2))
    opt = optim.Adam([p], lr=0.1)
    p.grad = torch.ones(2)
    with torch.enable_grad():
        # with autograd on, torch's in-place update of a leaf that requires grad would raise:
        # the step runs with it off (as torch's wrapper sets it) and restores it
        opt.step()
        assert torch.is_grad_enabled()
    q = torch.nn.Parameter(torch.ones(2))
    q.grad = torch.ones(2)
    torch.optim.Adam([q], lr=0.1).step()
    assert torch.equal(p.detach(), q.detach())


CHILD = r"""
import sys, warnings
import sklaplace
heavy = [m for m in ("matplotlib", "dask", "distributed", "torch._dynamo", "sklaplace.plotting",
                     "sklaplace.io") if m in sys.modules]
assert not heavy, f"import sklaplace imported {heavy}"
import numpy as np
from sklaplace import LaplaceClassifier, LaplaceRegressor
rng = np.random.default_rng(0)
X = rng.normal(size=(40, 3))
warnings.simplefilter("ignore")
LaplaceClassifier(hidden_layer_sizes=(4,), max_epochs=3, random_state=0).fit(X, X[:, 0] > 0)
LaplaceRegressor(hidden_layer_sizes=(4,), max_epochs=3, solver="lbfgs",
                 hyperparameter_tuning="online", random_state=0).fit(X, X[:, 1])
assert "torch._dynamo" not in sys.modules, "a default fit imported torch._dynamo"
print("ok")
"""


def test_import_and_first_fits_import_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
