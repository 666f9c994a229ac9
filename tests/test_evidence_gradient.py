"""The evidence gradient that tuning follows, against central finite differences.

Layer-wise tuning once returned its starting prior: the full/low-rank log-det
took the runs of its per-layer Gram matrices from the *values* of δ, so at the
uniform start (all layers equal) every layer's log-det gradient landed on the
first weight, L-BFGS-B's line search failed at iteration 0 and nobody looked at
``result.success``.  These tests differentiate ``Evidence.__call__`` with respect
to log δ per group (and log σ) on small nets of several shapes, in both the
per-weight form (δ = exp(v)[index], as online tuning calls it) and the grouped
form (``index=``, as ``maximize_evidence`` calls it), at the uniform start and
at points where some groups coincide.
"""

import functools
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning
from torch import nn

from sklaplace import LaplaceClassifier
from sklaplace._laplace.curvature import compute_posterior
from sklaplace._laplace.evidence import Evidence, maximize_evidence
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.posterior import EigenPosterior
from sklaplace._laplace.subsets import AllWeights

from _references import random_targets

DT = torch.float64
N_OUT = {"categorical": 3, "bernoulli": 1, "gaussian": 2}
N_FEATURES = 3


def _tanh_mlp(d, c):
    return nn.Sequential(nn.Linear(d, 5), nn.Tanh(), nn.Linear(5, c))


def _deep_relu(d, c):
    return nn.Sequential(nn.Linear(d, 4), nn.ReLU(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, c))


def _gelu_no_bias(d, c):
    return nn.Sequential(nn.Linear(d, 6, bias=False), nn.GELU(), nn.Linear(6, c), nn.Sigmoid(),
                         nn.Linear(c, c))


# (net, rows, temperature): 3 rows keep N·C < P (determinant lemma: the kernel of
# the P × N·C factor), 60 rows give N·C > P (the P × P matrix).
NETS = {
    "tanh-lemma": (_tanh_mlp, 3, 1.0),
    "tanh-matrix": (_tanh_mlp, 60, 1.0),
    "deep-relu-lemma": (_deep_relu, 3, 0.5),
    "gelu-nobias-matrix": (_gelu_no_bias, 60, 1.0),
}
CASES = [(h, p) for h in ("full", "diag", "kron", "lowrank")
         for p in ("scalar", "layerwise", "diag") if (h, p) != ("kron", "diag")]


@functools.lru_cache(maxsize=None)
def _problem(net, lik, structure):
    """(Evidence, group_index) built as ``BaseLaplace._fit_laplace`` builds them."""
    make, n_rows, temperature = NETS[net]
    seed = sorted(NETS).index(net) * 10 + sorted(N_OUT).index(lik)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    C = N_OUT[lik]
    module = make(N_FEATURES, C).to(DT)
    with torch.no_grad():  # weights large enough that the curvature is far from δ·I
        for p in module.parameters():
            p.mul_(1.5)
    X = torch.randn(n_rows, N_FEATURES, generator=gen, dtype=DT)
    y = random_targets(lik, n_rows, C, gen)
    subset = AllWeights(module)
    likelihood = LIKELIHOODS[lik]()
    rank = 5 if structure == "lowrank" else None
    posterior = compute_posterior(structure, subset, likelihood, X, y, torch.ones(C, dtype=DT),
                                  "ggn", rank)
    with torch.no_grad():
        f = subset.forward(X)
    theta = subset.theta.detach()
    if lik == "gaussian":
        evidence = Evidence(posterior, theta, temperature, n_rows,
                            sse=((y.reshape(f.shape) - f) ** 2).sum(0))
    else:
        evidence = Evidence(posterior, theta, temperature, n_rows,
                            nll=likelihood.nll(f, y).sum().item())
    return evidence, subset.group_index, subset.n_params, n_rows * C


def _index(prior_structure, group_index, n_params):
    if prior_structure == "scalar":
        return None
    if prior_structure == "layerwise":
        return torch.as_tensor(np.unique(group_index, return_inverse=True)[1])
    return torch.arange(n_params)


def _objective(evidence, index, n_free, form):
    """log Z as a function of x = (log δ per group [, log σ])."""

    def f(x):
        values = torch.exp(x[:n_free])
        sigma = torch.exp(x[n_free]) if evidence.gaussian else None
        if index is None:
            return evidence(values[0], sigma)
        if form == "grouped":
            return evidence(values, sigma, index=index)
        return evidence(values[index], sigma)

    return f


def _central_differences(f, x, coords, h=1e-5):
    out = torch.empty(len(coords), dtype=x.dtype)
    with torch.no_grad():
        for k, i in enumerate(coords):
            e = torch.zeros_like(x)
            e[i] = h
            out[k] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def _coordinates(n):
    """All coordinates of a few, else the first four, ten spread out and the last ones
    (per-weight exactness everywhere is checked against the marginal variance below)."""
    if n <= 16:
        return list(range(n))
    return sorted({0, 1, 2, 3, *np.linspace(4, n - 3, 10).astype(int).tolist(), n - 2, n - 1})


def _points(n_free, gaussian, seed):
    """The uniform start, and a random point where groups 0 and 1 coincide."""
    gen = torch.Generator().manual_seed(seed)
    uniform = torch.zeros(n_free, dtype=DT)
    mixed = torch.empty(n_free, dtype=DT).uniform_(-1.5, 2.0, generator=gen)
    if n_free > 1:
        mixed[1] = mixed[0]
    extra = [torch.tensor([-0.3], dtype=DT)] if gaussian else []
    return [torch.cat([uniform, *extra]), torch.cat([mixed, *extra])]


@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("lik", sorted(N_OUT))
@pytest.mark.parametrize("structure, prior_structure", CASES)
def test_evidence_gradient_matches_finite_differences(net, lik, structure, prior_structure):
    evidence, group_index, n_params, nc = _problem(net, lik, structure)
    if structure == "full":  # both eigen paths are covered: kernel (N·C < P) and matrix
        assert (evidence.posterior.rank < n_params) == ("lemma" in net) == (nc < n_params)
    index = _index(prior_structure, group_index, n_params)
    n_free = 1 if index is None else int(index.max()) + 1
    forms = ["per_weight"] if index is None else ["per_weight", "grouped"]
    for form in forms:
        f = _objective(evidence, index, n_free, form)
        for x0 in _points(n_free, evidence.gaussian, n_params):
            x = x0.clone().requires_grad_(True)
            (grad,) = torch.autograd.grad(f(x), x)
            coords = _coordinates(x0.numel())
            numeric = _central_differences(f, x0, coords)
            torch.testing.assert_close(grad[coords], numeric, rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{form} at {x0.tolist()}: {m}")


@pytest.mark.parametrize("structure", ["full", "diag", "kron", "lowrank"])
@pytest.mark.parametrize("net", ["tanh-lemma", "gelu-nobias-matrix"])
def test_per_weight_log_det_gradient_is_the_marginal_variance(net, structure):
    """∂ log det(s·H + D)/∂δ_i = Σ_ii for every weight, also where δ is uniform."""
    evidence, group_index, n_params, _ = _problem(net, "categorical", structure)
    post = evidence.posterior
    s = torch.tensor(0.8, dtype=DT)
    layerwise = torch.tensor([0.5, 2.0, 1.3, 0.7, 3.0, 1.1], dtype=DT)[:int(group_index.max()) + 1]
    for delta0 in (torch.ones(n_params, dtype=DT), layerwise[torch.as_tensor(group_index)]):
        delta = delta0.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(post.log_det(delta, s), delta)
        expected = post.with_prior(delta0, s).marginal_variance()
        torch.testing.assert_close(grad, expected, rtol=1e-8, atol=1e-10)


def test_grouped_and_per_weight_log_det_agree_for_a_small_factor():
    """The determinant-lemma path (from_factor) with adjacent equal groups."""
    U = torch.randn(12, 5, generator=torch.Generator().manual_seed(0), dtype=DT)
    post = EigenPosterior.from_factor(U)
    index = torch.tensor([0] * 4 + [1] * 6 + [2] * 2)
    dense = U @ U.T
    for v in ([1.0, 1.0, 1.0], [0.5, 0.5, 2.0], [0.5, 2.0, 0.5]):
        values = torch.tensor(v, dtype=DT, requires_grad=True)
        grouped = post.log_det(values, torch.tensor(0.7, dtype=DT), index=index)
        reference = torch.logdet(0.7 * dense + torch.diag(values[index]))
        torch.testing.assert_close(grouped, reference)
        g1, = torch.autograd.grad(grouped, values)
        g2, = torch.autograd.grad(reference, values)
        torch.testing.assert_close(g1, g2)


def test_grouping_is_read_off_the_tuning_expand():
    from sklaplace._laplace.evidence import _grouping

    free = torch.as_tensor([0, 0, 0, 1, 1, 2, 3, 3])
    index = _grouping(lambda v: v[free], 4, DT)
    assert torch.equal(index, free)
    assert _grouping(lambda v: v[0], 1, DT) is None  # scalar: 0-d
    assert _grouping(lambda v: v[free] * 2, 4, DT) is None  # not an indexing: per-weight form


# ----------------------------------------------------------------------- the bug report
def _skorch_net(activation, max_epochs):
    from skorch import NeuralNetClassifier

    return NeuralNetClassifier(
        nn.Sequential(nn.Linear(4, 16), activation(), nn.Linear(16, 2)),
        criterion=nn.CrossEntropyLoss, max_epochs=max_epochs, train_split=None, verbose=0,
    )


@pytest.mark.parametrize("activation, seed", [(nn.Tanh, 0), (nn.ReLU, 3)])
def test_layerwise_tuning_moves_the_prior_on_a_two_logit_net(activation, seed):
    """Bug report: layer-wise tuning on a 4→16→2 net returned [1, 1, 1, 1] silently."""
    rng = np.random.RandomState(seed)
    X = rng.randn(100, 4).astype(np.float32)
    y = rng.randint(0, 2, 100)
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        for prior_structure in ("scalar", "layerwise"):
            torch.manual_seed(seed)
            fits[prior_structure] = LaplaceClassifier(
                net=_skorch_net(activation, 5), hessian_structure="full", subset_of_weights="all",
                prior_structure=prior_structure, hyperparameter_tuning="evidence",
                random_state=seed,
                tol=None).fit(X, y)  # 5 epochs on purpose: the warnings are the evidence's
    layerwise, scalar = fits["layerwise"], fits["scalar"]
    assert layerwise.prior_precision_.shape == (4,)
    assert np.abs(np.log(layerwise.prior_precision_)).max() > 0.1
    assert layerwise.log_evidence_ >= scalar.log_evidence_ - 1e-8
    # ... and its layer-wise prior evaluated as a scalar one is no better.
    assert layerwise.log_evidence_ >= layerwise.log_evidence(
        prior_precision=scalar.prior_precision_) - 1e-8


class _FlippedGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return -grad


class _WrongGradientEvidence:
    """A concave 'evidence' whose gradient points the wrong way: the line search fails."""

    gaussian = False
    theta = torch.zeros(3, dtype=DT)

    def __call__(self, delta, sigma=None, index=None):
        return -(torch.log(_FlippedGradient.apply(delta)) - 1.0) ** 2


def test_failed_optimisation_warns():
    with pytest.warns(ConvergenceWarning,
                      match=r"did not converge: L-BFGS-B stopped after 0 iteration.*ABNORMAL.*"
                            r"may be the starting values"):
        log_delta, _ = maximize_evidence(_WrongGradientEvidence(), [0.0], lambda v: v[0])
    assert log_delta[0] == pytest.approx(0.0)
