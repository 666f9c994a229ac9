"""The Gaussian posterior over the Laplace weights of a fitted estimator, as a public object.

``estimator.posterior_`` returns a :class:`WeightPosterior`: N(θ̄, Σ) over the P weights the
Laplace approximation covers (all, the last layer or a subnetwork), at the fitted prior
precision (and noise σ). It wraps the estimator's own posterior structure (full, low-rank,
diagonal or Kronecker-factored) without copying it: the covariance and the precision are
``scipy.sparse.linalg.LinearOperator`` objects, and a dense P × P matrix is only built on
request, within the library's memory budget.
"""

import copy

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator
from sklearn.utils import check_random_state

from ._laplace.curvature import check_budget, memory_budget
from ._laplace.subsets import named_params

__all__ = ["WeightPosterior"]


def _base_subset(subset):
    """The subset itself, or the one a refined subset wraps (its names and indices)."""
    return getattr(subset, "base", subset)


class WeightPosterior:
    """Gaussian N(mean, covariance) over the Laplace weights of a fitted estimator.

    Obtained as ``estimator.posterior_``; it reads the estimator's fitted state at
    ``prior_precision_`` (and ``sigma_noise_``) and shares its memory. The weights are
    those of the fitted network ``net_`` in its own units: for a ``LaplaceRegressor``
    with ``normalize_y=True`` the net predicts standardized targets, so the weights
    (and the curvature) are those of the standardized problem.

    Parameters
    ----------
    estimator : LaplaceClassifier or LaplaceRegressor
        A fitted estimator.

    Attributes
    ----------
    mean : ndarray of shape (n_params,)
        The posterior mean: the trained weights θ* (with ``refine``, the refined mean),
        float64.
    n_params : int
        Number of weights P under the Laplace approximation.
    names : list of str
        Names of the parameter tensors of ``net_.module_`` the weights belong to, in the
        order of ``mean`` (all weights: every trainable tensor; last layer: its weight
        and bias).
    shapes : list of tuple
        The shapes of those tensors.
    indices : ndarray of shape (n_params,)
        Position of each weight in the flattened vector of all trainable parameters of
        ``net_.module_`` (tensors in ``named_parameters`` order, each flattened row-major).
        For all weights and the last layer the weights are the listed tensors
        concatenated; for a subnetwork, the chosen entries of them.
    subset_of_weights : str
        ``"all"``, ``"last_layer"`` or ``"subnetwork"``.
    hessian_structure : str
        ``"full"``, ``"lowrank"``, ``"diag"`` or ``"kron"``.
    """

    def __init__(self, estimator):
        fitted = estimator.laplace_
        subset = fitted.subset
        base = _base_subset(subset)
        self._estimator = estimator
        self._posterior = fitted.posterior
        self._theta = subset.theta.detach()
        self.mean = self._theta.cpu().numpy().astype(np.float64)
        self.n_params = int(subset.n_params)
        self.indices = np.asarray(base.whole_index, dtype=np.int64)
        whole = getattr(base, "_all", base)  # a subnetwork's tensors are those of all weights
        if hasattr(base, "indices"):
            used = np.unique(np.asarray(base.group_index))
            self.names = [whole.names[g] for g in used]
            self.shapes = [whole.shapes[g] for g in used]
        else:
            self.names, self.shapes = list(base.names), list(base.shapes)
        self.subset_of_weights = fitted.kind
        self.hessian_structure = fitted.structure

    # ------------------------------------------------------------ linear algebra
    def _tensor(self, X):
        return torch.as_tensor(np.asarray(X, dtype=np.float64), device=self._theta.device)

    def _operator(self, matmat):
        def apply(X):
            X = np.asarray(X, dtype=np.float64)
            col = X.ndim == 1
            out = matmat(self._tensor(X.reshape(self.n_params, -1))).cpu().numpy()
            return out[:, 0] if col else out

        shape = (self.n_params, self.n_params)
        return LinearOperator(shape, matvec=apply, rmatvec=apply, matmat=apply, rmatmat=apply,
                              dtype=np.float64)

    @property
    def covariance(self):
        """The posterior covariance Σ as a symmetric ``LinearOperator`` (never dense).

        Returns
        -------
        covariance : scipy.sparse.linalg.LinearOperator of shape (n_params, n_params)
            ``covariance @ v`` applies Σ in the structure's own form.
        """
        return self._operator(self._posterior.cov_matmat)

    @property
    def precision(self):
        """The posterior precision Σ⁻¹ (curvature plus prior) as a ``LinearOperator``.

        Returns
        -------
        precision : scipy.sparse.linalg.LinearOperator of shape (n_params, n_params)
            ``precision @ v`` applies Σ⁻¹ in the structure's own form.
        """
        return self._operator(self._posterior.precision_matmat)

    def _dense(self, matmat, what):
        P = self.n_params
        check_budget(2 * 8 * P * P, f"The dense {what} ({P} × {P})",
                     memory_budget(self._theta.device),
                     "the LinearOperator (covariance / precision), variance, sample")
        eye = torch.eye(P, dtype=torch.float64, device=self._theta.device)
        out = matmat(eye)
        return (0.5 * (out + out.T)).cpu().numpy()

    def covariance_matrix(self):
        """The covariance as a dense array, within the memory budget.

        Returns
        -------
        covariance : ndarray of shape (n_params, n_params)
            Σ, symmetric.

        Raises
        ------
        MemoryError
            If the P × P matrix exceeds the library's memory budget (4 GiB on the CPU).
        """
        return self._dense(self._posterior.cov_matmat, "covariance")

    def precision_matrix(self):
        """The precision as a dense array, within the memory budget.

        Returns
        -------
        precision : ndarray of shape (n_params, n_params)
            Σ⁻¹, symmetric.

        Raises
        ------
        MemoryError
            If the P × P matrix exceeds the library's memory budget (4 GiB on the CPU).
        """
        return self._dense(self._posterior.precision_matmat, "precision")

    @property
    def variance(self):
        """The marginal variances, the diagonal of Σ (no dense matrix).

        Returns
        -------
        variance : ndarray of shape (n_params,)
            diag Σ.
        """
        return self._posterior.marginal_variance().cpu().numpy().astype(np.float64)

    # ------------------------------------------------------------ distribution
    def sample(self, n_samples=1, random_state=None):
        """Draw weight vectors from the posterior.

        Parameters
        ----------
        n_samples : int, default=1
            Number of draws.
        random_state : int, RandomState instance or None, default=None
            Seed of the draws, as in scikit-learn.

        Returns
        -------
        theta : ndarray of shape (n_samples, n_params)
            The draws, float64.
        """
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) \
                or n_samples < 1:
            raise ValueError(f"n_samples must be a positive int, got {n_samples!r}.")
        seed = int(check_random_state(random_state).randint(0, 2**31 - 1))
        gen = torch.Generator()
        gen.manual_seed(seed)
        with torch.no_grad():
            eps = self._posterior.sample(int(n_samples), gen)
        return (self._theta + eps).cpu().numpy().astype(np.float64)

    def _check_theta(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape[-1:] != (self.n_params,) or theta.ndim > 2:
            raise ValueError(f"theta must have shape (n_params,) or (n, n_params) with "
                             f"n_params={self.n_params}; got shape {theta.shape}.")
        return theta

    def log_prob(self, theta):
        """Log density of the Gaussian posterior at weight vectors.

        Parameters
        ----------
        theta : array-like of shape (n_params,) or (n, n_params)
            Weight vectors, in the order of ``mean``.

        Returns
        -------
        log_prob : float or ndarray of shape (n,)
            The log density log N(theta; mean, Σ).
        """
        theta = self._check_theta(theta)
        d = self._tensor(np.atleast_2d(theta)) - self._theta
        with torch.no_grad():
            quad = (d * self._posterior.precision_matmat(d.T).T).sum(1)
            log_det = self._posterior.log_det_cov()
            out = -0.5 * (quad + log_det + self.n_params * np.log(2 * np.pi))
        out = out.cpu().numpy().astype(np.float64)
        return float(out[0]) if theta.ndim == 1 else out

    # ------------------------------------------------------------ the network
    def net_at(self, theta):
        """A copy of the fitted skorch net ``net_`` with the Laplace weights set to ``theta``.

        The weights outside the Laplace subset keep their trained values. The copy
        evaluates the network itself at ``theta`` (what ``pred_type="nn"`` does), not
        the linearized model of the GLM predictive, and a regressor's copy predicts in
        the units the net was trained in (standardized with ``normalize_y=True``).

        Parameters
        ----------
        theta : array-like of shape (n_params,)
            Weights in the order of ``mean``, for example a row of :meth:`sample`.

        Returns
        -------
        net : skorch.NeuralNet
            A deep copy of ``net_`` (the estimator is not changed).
        """
        theta = self._check_theta(theta)
        if theta.ndim != 1:
            raise ValueError(f"theta must be one weight vector of shape ({self.n_params},); "
                             f"got shape {theta.shape}.")
        net = copy.deepcopy(self._estimator.net_)
        params = named_params(net.module_)
        flat = torch.cat([p.detach().reshape(-1).cpu().double() for _, p in params])
        flat[torch.as_tensor(self.indices)] = torch.as_tensor(theta)
        start = 0
        with torch.no_grad():
            for _, p in params:
                p.copy_(flat[start:start + p.numel()].reshape(p.shape))
                start += p.numel()
        return net
