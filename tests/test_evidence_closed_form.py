"""The closed-form evidence of a scalar δ (and σ) equals autograd's of ``Evidence.__call__``.

``maximize_evidence`` takes the closed form (:meth:`Evidence.closed_form`) where the
posterior's determinant is a sum over a spectrum; these tests pin its value, gradient
and Hessian to autograd's in float64, and its optimum to an independent maximisation.
"""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from sklaplace._laplace.continual import TaskEvidence
from sklaplace._laplace.curvature import compute_posterior
from sklaplace._laplace.evidence import Evidence, maximize_evidence
from sklaplace._laplace.likelihoods import LIKELIHOODS
from sklaplace._laplace.nets import MLP
from sklaplace._laplace.subsets import AllWeights

DT = torch.float64


def _evidence(likelihood, structure, curvature="ggn", temperature=1.0, weighted=False,
              n_rows=12, n_out=2):
    torch.manual_seed(0)
    n_out = 1 if likelihood == "bernoulli" else n_out
    module = MLP(3, n_out, (4,)).to(DT)
    X = torch.randn(n_rows, 3, dtype=DT)
    if likelihood == "gaussian":
        y = torch.randn(n_rows, n_out, dtype=DT)
    else:
        y = torch.randint(0, max(n_out, 2), (n_rows,))
    weight = torch.rand(n_rows, dtype=DT) + 0.5 if weighted else None
    subset, lik = AllWeights(module), LIKELIHOODS[likelihood]()
    posterior = compute_posterior(structure, subset, lik, X, y, torch.ones(n_out, dtype=DT),
                                  curvature, weight=weight, eigenvalues_only=structure == "full")
    with torch.no_grad():
        f = subset.forward(X)
    return Evidence.at_fit(posterior, subset.theta.detach(), lik, f, y, weight, temperature,
                           curvature)


def _autograd(evidence, x, with_sigma, log_sigma0):
    def value(x):
        sigma = (torch.exp(x[1]) if with_sigma else
                 None if log_sigma0 is None else torch.tensor(np.exp(log_sigma0), dtype=DT))
        return -evidence(torch.exp(x[0]), sigma)

    x = torch.tensor(x, dtype=DT, requires_grad=True)
    v = value(x)
    (g,) = torch.autograd.grad(v, x)
    h = torch.autograd.functional.hessian(value, x.detach())
    return v.item(), g.numpy(), h.numpy()


CASES = [
    ("gaussian", "full", "ggn", 1.0, False, True),
    ("gaussian", "full", "ef", 1.0, False, True),
    ("gaussian", "full", "ggn", 0.5, True, True),
    ("gaussian", "diag", "ggn", 2.0, False, True),
    ("gaussian", "full", "ggn", 1.0, False, False),  # σ held fixed
    ("categorical", "full", "ggn", 1.0, False, False),
    ("bernoulli", "diag", "ef", 0.7, True, False),
]


@pytest.mark.parametrize("likelihood,structure,curvature,temperature,weighted,with_sigma", CASES)
@pytest.mark.parametrize("n_rows", [4, 40])  # the kernel (N·C < P) and the P × P matrix
def test_closed_form_equals_autograd(likelihood, structure, curvature, temperature, weighted,
                                     with_sigma, n_rows):
    evidence = _evidence(likelihood, structure, curvature, temperature, weighted, n_rows)
    log_sigma0 = np.log(0.8) if likelihood == "gaussian" else None
    objective, hessian = evidence.closed_form(with_sigma, log_sigma0)
    for point in ([0.3, -0.2], [-2.0, 0.5], [3.0, -1.5]):
        x = np.array(point if with_sigma else point[:1])
        value, grad = objective(x)
        ref_value, ref_grad, ref_hess = _autograd(evidence, x, with_sigma, log_sigma0)
        np.testing.assert_allclose(value, ref_value, rtol=1e-12, atol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(hessian(x), ref_hess, rtol=1e-10, atol=1e-10)


def test_the_maximum_is_the_evidence_maximum():
    """maximize_evidence (closed form) against Nelder–Mead on ``Evidence.__call__``."""
    evidence = _evidence("gaussian", "full", n_rows=40)
    log_delta, log_sigma = maximize_evidence(
        evidence, np.zeros(1), lambda v: v.reshape(()), np.log(1.0), sigma_floor=1e-3)

    def negative(x):
        return -evidence(torch.tensor(np.exp(x[0]), dtype=DT),
                         torch.tensor(np.exp(x[1]), dtype=DT)).item()

    ref = minimize(negative, [0.0, 0.0], method="Nelder-Mead",
                   options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 5000}).x
    np.testing.assert_allclose([log_delta[0], float(log_sigma)], ref, atol=1e-6)


def test_no_closed_form_where_the_evidence_is_another_function():
    evidence = _evidence("gaussian", "full", n_rows=40)
    assert evidence.closed_form(True, np.log([0.8, 0.9])) is None  # one σ per output
    kron = _evidence("gaussian", "kron", n_rows=40)
    assert kron.closed_form(True, np.log(0.8)) is None
    task = TaskEvidence.__new__(TaskEvidence)  # a later task's evidence: its own __call__
    task.__dict__.update(vars(evidence))
    assert task.closed_form(True, np.log(0.8)) is None
