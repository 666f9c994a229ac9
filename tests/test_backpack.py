"""BackPACK curvature for nets outside our nn.Linear code, against brute force (float64).

References are independent of sklaplace and BackPACK: per-row Jacobians with
``torch.func.jacrev`` through ``functional_call`` and the output Hessian Λ written
out by hand (softmax diag(p) − ppᵀ, Bernoulli p(1 − p), Gaussian diag(out_scale²)),
as in test_curvature.py.
"""

import math

import numpy as np
import pytest
import torch
from skorch import NeuralNetClassifier
from sklearn.datasets import load_digits
from torch import nn
from torch.func import functional_call, jacrev

from _references import ref_lambda

from sklaplace import LaplaceClassifier
from sklaplace._laplace._backpack import backpack_diag, backpack_kron
from sklaplace._laplace.curvature import compute_posterior, kron_curvature
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.posterior import DiagPosterior, KronPosterior
from sklaplace._laplace.subsets import AllWeights

DT = torch.float64
N_OUT = {"categorical": 3, "bernoulli": 1, "gaussian": 2}
# (likelihood, out_scale entry): the Gaussian at unit and at a non-unit equal scale.
CASES = [("categorical", 1.0), ("bernoulli", 1.0), ("gaussian", 1.0), ("gaussian", 1.6)]


def close(a, b, rtol=1e-8, atol=1e-10):
    torch.testing.assert_close(torch.as_tensor(a, dtype=DT), torch.as_tensor(b, dtype=DT),
                               rtol=rtol, atol=atol)


def conv1d_net(n_out, kernel=3, seed=0):
    """(n, 6) → (n, 1, 6) → Conv1d → Tanh → Linear."""
    torch.manual_seed(seed)
    width = 2 * (6 - kernel + 1)
    return nn.Sequential(nn.Unflatten(1, (1, 6)), nn.Conv1d(1, 2, kernel), nn.Tanh(),
                         nn.Flatten(), nn.Linear(width, n_out)).to(DT)


def conv2d_net(n_out, seed=0):
    """(n, 16) → (n, 1, 4, 4) → Conv2d → Tanh → Linear."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Unflatten(1, (1, 4, 4)), nn.Conv2d(1, 2, 3), nn.Tanh(),
                         nn.Flatten(), nn.Linear(8, n_out)).to(DT)


class HeadFirst(nn.Module):
    """Registers the head before the body and reshapes in forward: the converter
    reorders the parameters (by first use), so they must be matched by name."""

    def __init__(self, n_out):
        super().__init__()
        self.head = nn.Linear(8, n_out)
        self.body = nn.Sequential(nn.Conv1d(1, 2, 3), nn.Tanh())

    def forward(self, x):
        return self.head(self.body(x.reshape(-1, 1, 6)).flatten(1))


class FunctionalTanh(nn.Module):
    """A functional activation BackPACK cannot backpropagate through."""

    def __init__(self, n_out):
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 3)
        self.head = nn.Linear(8, n_out)

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x.reshape(-1, 1, 6))).flatten(1))


def make_net(kind, n_out, seed=0):
    if kind == "conv1d":
        return conv1d_net(n_out, seed=seed)
    if kind == "conv2d":
        return conv2d_net(n_out, seed=seed)
    torch.manual_seed(seed)
    return {"head_first": HeadFirst, "functional": FunctionalTanh}[kind](n_out).to(DT)


def n_inputs(kind):
    return 16 if kind == "conv2d" else 6


def make_data(lik, n_rows, n_in, seed=1):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_rows, n_in, generator=g, dtype=DT)
    if lik == "categorical":
        y = torch.randint(0, 3, (n_rows,), generator=g)
    elif lik == "bernoulli":
        y = torch.randint(0, 2, (n_rows,), generator=g).to(DT)
    else:
        y = torch.randn(n_rows, 2, generator=g, dtype=DT)
    return X, y


def bruteforce_ggn(module, lik, X, out_scale):
    """Σ_n J_nᵀ Λ_n J_n over the flattened trainable parameters (registration order)."""
    names = [k for k, _ in module.named_parameters()]
    shapes = [p.shape for _, p in module.named_parameters()]
    theta = torch.cat([p.detach().reshape(-1) for _, p in module.named_parameters()])

    def f_row(th, x):
        params, i = {}, 0
        for k, sh in zip(names, shapes):
            params[k] = th[i : i + math.prod(sh)].reshape(sh)
            i += math.prod(sh)
        return functional_call(module, params, (x[None],)).reshape(-1)

    H = 0
    for x in X:
        J = jacrev(f_row)(theta, x).detach()
        with torch.no_grad():
            lam = ref_lambda(lik, f_row(theta, x), out_scale)
        H = H + J.T @ lam @ J
    return H


def problem(lik, scale, kind="conv1d", n_rows=30):
    module = make_net(kind, N_OUT[lik])
    X, y = make_data(lik, n_rows, n_inputs(kind))
    out_scale = torch.full((N_OUT[lik],), scale, dtype=DT)
    return module, X, y, out_scale


def no_jacobians(monkeypatch):
    def fail(self, X):
        raise AssertionError("the Jacobian path must not run")

    monkeypatch.setattr(AllWeights, "jacobians", fail)


# --------------------------------------------------------------------------- diagonal
@pytest.mark.parametrize("lik, scale", CASES)
@pytest.mark.parametrize("kind", ["conv1d", "conv2d", "head_first"])
def test_backpack_diag_matches_bruteforce(monkeypatch, lik, scale, kind):
    module, X, y, out_scale = problem(lik, scale, kind)
    H = bruteforce_ggn(module, lik, X, out_scale)
    subset = AllWeights(module)
    close(backpack_diag(subset, LIKELIHOODS[lik](), X, y, out_scale), H.diagonal())
    close(backpack_diag(subset, LIKELIHOODS[lik](), X, y, out_scale, chunk=7), H.diagonal())
    no_jacobians(monkeypatch)
    post = compute_posterior("diag", subset, LIKELIHOODS[lik](), X, y, out_scale, "ggn")
    assert isinstance(post, DiagPosterior)
    close(post.h, H.diagonal())


def test_backpack_diag_leaves_module_untouched():
    module, X, y, out_scale = problem("categorical", 1.0)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    backpack_diag(AllWeights(module), LIKELIHOODS["categorical"](), X, y, out_scale)
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert all(p.grad is None and not hasattr(p, "diag_ggn_exact") for p in module.parameters())
    assert not module._forward_hooks and not module[1]._forward_hooks


def test_unsupported_net_falls_back_to_jacobians():
    """A functional op BackPACK cannot see: None, and the Jacobian path still gives the GGN."""
    module, X, y, out_scale = problem("categorical", 1.0, "functional")
    subset = AllWeights(module)
    L = LIKELIHOODS["categorical"]()
    assert backpack_diag(subset, L, X, y, out_scale) is None
    assert backpack_kron(subset, L, X, y, out_scale) is None
    H = bruteforce_ggn(module, "categorical", X, out_scale)
    close(compute_posterior("diag", subset, L, X, y, out_scale, "ggn").h, H.diagonal())
    with pytest.raises(ValueError, match="BackPACK"):
        compute_posterior("kron", subset, L, X, y, out_scale, "ggn")


def test_unequal_gaussian_scale_is_not_backpack():
    module, X, y, _ = problem("gaussian", 1.0)
    out_scale = torch.tensor([2.0, 0.5], dtype=DT)
    subset = AllWeights(module)
    L = LIKELIHOODS["gaussian"]()
    assert backpack_diag(subset, L, X, y, out_scale) is None
    H = bruteforce_ggn(module, "gaussian", X, out_scale)
    close(compute_posterior("diag", subset, L, X, y, out_scale, "ggn").h, H.diagonal())


# --------------------------------------------------------------------------- KFLR
def dense(factors):
    return factors[0] if len(factors) == 1 else torch.kron(factors[0], factors[1])


def eig_dense(post):
    """Dense blocks of a KronPosterior, rebuilt from its eigen-factors."""
    return [dense([Q @ torch.diag(e) @ Q.T for Q, e in factors]) for _, factors, _ in post.blocks]


@pytest.mark.parametrize("lik, scale", CASES)
def test_kflr_conv_covering_input_is_linear_layer(lik, scale):
    """Conv1d with a kernel over the whole input: the weight block is B_n ⊗ x_n per row."""
    module = conv1d_net(N_OUT[lik], kernel=6)
    X, y = make_data(lik, 25, 6)
    out_scale = torch.full((N_OUT[lik],), scale, dtype=DT)
    L = LIKELIHOODS[lik]()
    blocks = backpack_kron(AllWeights(module), L, X, y, out_scale, chunk=10)
    H = bruteforce_ggn(module, lik, X, out_scale)
    (w_sl, (G, A)), (b_sl, (Gb,)) = blocks[0], blocks[1]
    assert (w_sl, b_sl) == (slice(0, 12), slice(12, 14)) and G.shape == (2, 2)
    close(G, H[b_sl, b_sl])          # G is the exact GGN of the bias
    close(Gb, H[b_sl, b_sl])
    close(A, X.T @ X / X.shape[0])  # A = Σ x xᵀ / N
    # One row: no averaging over rows, so G ⊗ A is the exact weight block.
    for n in range(3):
        (_, one), _ = backpack_kron(AllWeights(module), L, X[n : n + 1], y[n : n + 1],
                                    out_scale)[:2]
        close(dense(one), bruteforce_ggn(module, lik, X[n : n + 1], out_scale)[w_sl, w_sl])


@pytest.mark.parametrize("lik, scale", CASES)
def test_kflr_equals_our_kron_on_linear_mlp(lik, scale):
    torch.manual_seed(0)
    C = N_OUT[lik]
    module = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 4), nn.Tanh(),
                           nn.Linear(4, C)).to(DT)
    g = torch.Generator().manual_seed(2)
    X = torch.randn(37, 3, generator=g, dtype=DT)
    y = torch.zeros(37, dtype=DT)
    out_scale = torch.full((C,), scale, dtype=DT)
    subset, L = AllWeights(module), LIKELIHOODS[lik]()
    ours = eig_dense(kron_curvature(subset, L, X, y, out_scale))
    for chunk in (4096, 10):
        blocks = backpack_kron(subset, L, X, y, out_scale, chunk=chunk)
        assert [len(f) for _, f in blocks] == [2, 1, 2, 1, 2, 1]
        for (_, factors), M in zip(blocks, ours):
            close(dense(factors), M, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("lik, scale", CASES)
@pytest.mark.parametrize("kind", ["conv1d", "conv2d"])
def test_kron_structure_on_conv_net(lik, scale, kind):
    module, X, y, out_scale = problem(lik, scale, kind)
    subset = AllWeights(module)
    post = compute_posterior("kron", subset, LIKELIHOODS[lik](), X, y, out_scale, "ggn")
    assert isinstance(post, KronPosterior)
    slices = [sl for sl, _, _ in post.blocks]
    assert [sl.start for sl in slices] == [0] + [sl.stop for sl in slices[:-1]]
    assert slices[-1].stop == subset.n_params
    H = bruteforce_ggn(module, lik, X, out_scale)
    for (sl, factors, _), M in zip(post.blocks, eig_dense(post)):
        if len(factors) == 1:  # bias blocks are exact
            close(M, H[sl, sl])
    delta, s = torch.tensor(0.8, dtype=DT), torch.tensor(1.3, dtype=DT)
    block_diag = torch.block_diag(*eig_dense(post))
    log_det = post.log_det(delta, s)
    assert torch.isfinite(log_det)
    close(log_det, torch.logdet(s * block_diag + delta * torch.eye(subset.n_params, dtype=DT)))
    _, J = subset.jacobians(X[:4])
    var = post.with_prior(delta, s).functional_variance(J)
    assert torch.isfinite(var).all() and (torch.linalg.eigvalsh(var) > 0).all()


def test_kron_on_conv_net_rejects_what_backpack_cannot_do():
    module, X, y, _ = problem("gaussian", 1.0)
    subset, L = AllWeights(module), LIKELIHOODS["gaussian"]()
    with pytest.raises(ValueError, match="one sigma_noise"):
        compute_posterior("kron", subset, L, X, y, torch.tensor([2.0, 0.5], dtype=DT), "ggn")
    with pytest.raises(ValueError, match="curvature='ggn'"):
        compute_posterior("kron", subset, L, X, y, torch.ones(2, dtype=DT), "ef")


# --------------------------------------------------------------------------- estimator
class DigitsConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 3, 3, stride=2),
                                    nn.Tanh(), nn.Flatten(), nn.Linear(27, 10))

    def forward(self, X):
        return self.layers(X)


def test_classifier_with_conv_skorch_net_and_kron():
    X, y = load_digits(return_X_y=True)
    X, y = (X[:60] / 16).astype(np.float32), y[:60]
    net = NeuralNetClassifier(DigitsConv, criterion=nn.CrossEntropyLoss, train_split=None,
                              max_epochs=3, lr=0.1, verbose=0)
    clf = LaplaceClassifier(net, subset_of_weights="all", hessian_structure="kron",
                            random_state=0).fit(X, y)
    assert clf.hessian_structure_ == "kron" and clf.n_params_ == 3 * 9 + 3 + 27 * 10 + 10
    proba = clf.predict_proba(X)
    assert proba.shape == (60, 10) and np.isfinite(proba).all()
    np.testing.assert_allclose(proba.sum(1), 1, atol=1e-10)
    assert np.isfinite(clf.log_evidence_)



@pytest.mark.parametrize("lik, scale", CASES)
def test_kflr_conv_weight_block_is_exact_for_identical_positions(lik, scale):
    """A row constant along the T = 4 positions and a head that weighs every position
    alike: J_w = (Σ_t b) ⊗ u, so the weight block is exactly G ⊗ u uᵀ. BackPACK's A sums
    u uᵀ over the positions: the block was T times too large (T³ against T²)."""
    module = conv1d_net(N_OUT[lik])  # Conv1d(1, 2, 3): T = 4, flattened channel-major
    with torch.no_grad():
        head = module[-1].weight
        head.copy_(head[:, ::4].repeat_interleave(4, dim=1))  # the same for every position
    X = torch.full((1, 6), 0.7, dtype=DT)
    _, y = make_data(lik, 1, 6)
    out_scale = torch.full((N_OUT[lik],), scale, dtype=DT)
    blocks = backpack_kron(AllWeights(module), LIKELIHOODS[lik](), X, y, out_scale)
    H = bruteforce_ggn(module, lik, X, out_scale)
    (w_sl, weight_factors), (b_sl, bias_factors) = blocks[0], blocks[1]
    close(dense(weight_factors), H[w_sl, w_sl])
    close(dense(bias_factors), H[b_sl, b_sl])
