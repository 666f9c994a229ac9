"""The joint predictive of a LaplaceRegressor over rows (and outputs), for
``predict(X, return_cov=True)`` and ``sample_y``, GaussianProcessRegressor's API.

GLM predictive: N(f(X), J Σ Jᵀ + K ⊗ I + σ² I) with J the Jacobians of all rows stacked
(n·C × P), so the covariance couples every pair of rows and outputs, and K the kernel of
the variance outside the training range (``laplace_.outside``); ``pred_type="nn"``:
the sample covariance of the network at ``n_samples`` weight draws, plus σ².
"""

import numpy as np
import torch
from sklearn.utils import check_random_state

from .._laplace.curvature import check_budget, memory_budget
from .._laplace.fitted import generator


def joint_moments(estimator, X):
    """Mean (n, C) and covariance (n, C, n, C) of the predictive of y, in the units of y."""
    fitted = estimator.laplace_
    mean, cov = model_joint(estimator, estimator._X_tensor(X))
    n, C = mean.shape
    return fitted.targets.joint_moments(mean.cpu().numpy(), cov.cpu().numpy().reshape(n, C, n, C),
                                        fitted.hyper.sigma)


def model_joint(estimator, Xt, outside=True):
    """The outputs' joint mean (n, C) and covariance (n·C, n·C) in model units (tensors),
    with the variance outside the training range unless ``outside`` is False."""
    fitted = estimator.laplace_
    n, C = len(Xt), fitted.n_outputs
    budget = memory_budget(Xt.device)
    check_budget(8 * (n * C) ** 2, f"The joint predictive covariance of {n} rows × {C} "
                 "outputs", budget, "return_std=True, or fewer rows per call")
    with torch.no_grad():
        if estimator.pred_type == "nn":
            samples = fitted.nn_samples(Xt, estimator.n_samples,
                                        generator(fitted.prediction_seed))
            mean = samples.mean(0)
            centred = (samples - mean).reshape(len(samples), n * C)
            cov = centred.T @ centred / max(1, len(samples) - 1)
        else:
            subset = fitted.subset
            check_budget(8 * n * C * subset.n_params, f"The Jacobians of {n} rows × {C} outputs "
                         f"× {subset.n_params} weights", budget,
                         "return_std=True, or fewer rows per call")
            parts = [subset.jacobians(Xt[sl]) for sl in fitted.row_chunks(n)]
            mean = torch.cat([f for f, _ in parts])
            J = torch.cat([J for _, J in parts]).reshape(1, n * C, -1)
            cov = fitted.posterior.functional_variance(J)[0]
            cov = 0.5 * (cov + cov.T)
            if outside and fitted.outside is not None:  # its GP couples the rows, each output alike
                K = fitted.outside.cross(Xt, Xt).to(cov)
                cov = cov + torch.kron(K, torch.eye(C, dtype=cov.dtype, device=cov.device))
    return mean, cov


def per_output_cov(estimator, cov):
    """GaussianProcessRegressor's layout: (n, n) for 1-d y, else (n, n, C) per output."""
    per_output = np.einsum("icjc->ijc", cov)
    return per_output[:, :, 0] if estimator.laplace_.targets.ndim == 1 else per_output


def sample_joint(estimator, X, n_samples, random_state, moments=joint_moments):
    """Draws of y from the joint predictive (``moments``: its mean and covariance in the
    units of y): (n, n_samples) for 1-d y, else (n, C, n_samples)."""
    mean, cov = moments(estimator, X)
    n, C = mean.shape
    flat = cov.reshape(n * C, n * C)
    try:
        root = np.linalg.cholesky(flat)
    except np.linalg.LinAlgError:  # semi-definite in floating point: the symmetric root
        lam, V = np.linalg.eigh(flat)
        root = V * np.sqrt(np.clip(lam, 0, None))
    z = check_random_state(random_state).standard_normal((n * C, n_samples))
    draws = (mean.reshape(-1, 1) + root @ z).reshape(n, C, n_samples)
    return draws[:, 0, :] if estimator.laplace_.targets.ndim == 1 else draws
