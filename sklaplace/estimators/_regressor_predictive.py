"""The regressor's readouts of the fitted Laplace approximation, in the units of y.

The log evidence at given hyperparameters (σ converted by the fit's ``TargetScale``),
and the predictive Gaussians: per row chunk the GLM predictive's mean f(x) and epistemic variance diag J(x) Σ J(x)ᵀ
(``pred_type="nn"``: the moments of the net at weight samples), plus the noise σ²,
mapped to the units of y by the fit's ``TargetScale``; the joint predictive over rows
(``return_cov``, ``sample_y``) in :mod:`.distributions._joint`. ``LaplaceRegressor`` inherits these
methods.
"""

import numpy as np
import torch
from sklearn.utils.validation import check_is_fitted

from . import _averaging as averaging
from ..distributions._joint import joint_moments, per_output_cov, sample_joint
from ._dask import lazy_on_dask, refuse_dask
from .._laplace.gradients import moment_gradients
from .._laplace.workflow import torch_entry_point
from ._threads import thread_policy
from ._validation import check_positive, positive_array
from ..distributions import NormalPrediction


class RegressorPredictive:
    """Prediction and evidence methods of :class:`~sklaplace.LaplaceRegressor` (a mixin)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    @thread_policy
    @torch_entry_point
    def log_evidence(self, prior_precision=None, sigma_noise=None):
        """Laplace log marginal likelihood at the fitted or given hyperparameters.

        Parameters
        ----------
        prior_precision : float or array-like, default=None
            Whole-net form as the constructor parameter; ``None`` uses ``prior_precision_``.
        sigma_noise : float or array-like, default=None
            In the units of y, of the form of ``sigma_noise_``; ``None`` uses ``sigma_noise_``
            (``None`` only with ``noise="heteroscedastic"``).

        Returns
        -------
        log_evidence : float
            The Laplace approximation of log p(y | X) at those hyperparameters,
            in the units of y (after ``partial_fit``: of the last task given the
            earlier ones).

        Raises
        ------
        ValueError
            If ``sigma_noise`` does not have the form of ``sigma_noise_``.
        """
        check_is_fitted(self)
        fitted = self.laplace_
        if fitted.likelihood.name == "heteroscedastic":
            if sigma_noise is not None:
                raise ValueError("sigma_noise: this fit's noise is per row "
                                 "(noise='heteroscedastic'); leave sigma_noise=None.")
            return self._log_evidence(prior_precision, None) + self._evidence_offset(fitted)
        sigma = self.sigma_noise_ if sigma_noise is None else sigma_noise
        positive_array("sigma_noise", sigma)
        if np.ndim(sigma) != np.ndim(self.sigma_noise_):
            raise ValueError(
                f"sigma_noise must have the form of sigma_noise_ (shape {np.shape(self.sigma_noise_)})."
            )
        value = self._log_evidence(prior_precision,
                                   fitted.targets.sigma_model(sigma, fitted.hyper.sigma))
        return value + self._evidence_offset(fitted)

    def _output_moments(self, X):
        """Predictive mean, epistemic and aleatoric variance in the units of y."""
        Xt, fitted = self._X_tensor(X), self.laplace_
        if fitted.likelihood.name == "heteroscedastic":
            mean, var, noise = self._natural_moments(Xt)
        elif self.pred_type == "nn":  # per row chunk: no (S, n, C) outputs for all rows
            correction = int(self.n_samples > 1)
            mean, var = fitted.nn_per_chunk(
                Xt, lambda samples: (samples.mean(0), samples.var(0, correction=correction)),
                self.n_samples)
        else:  # per row chunk: no (n, C, C) covariance for all rows
            mean, var = fitted.per_chunk(Xt, lambda f, cov: (
                f, torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0)))
        if fitted.likelihood.name != "heteroscedastic":
            mean, var, noise = fitted.targets.moments(mean.cpu().numpy(), var.cpu().numpy(),
                                                      fitted.hyper.sigma)
        if fitted.targets.ndim == 1:
            return mean[:, 0], var[:, 0], noise[:, 0]
        return mean, var, noise

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def predict_dist(self, X):
        """Normal predictive distribution per row (and output), in the units of y.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.

        Returns
        -------
        dist : NormalPrediction or NormalMixturePrediction
            ``mean``, ``std``, ``epistemic_var``, ``aleatoric_var``, ``interval`` ...
            (``model_averaging=True``: the mixture of the candidates' Gaussians).
        """
        check_is_fitted(self)
        if averaging.averaged(self):
            return averaging.regressor_dist(self, X)
        mean, var, noise = self._output_moments(X)
        return NormalPrediction(mean=mean, epistemic_var=var, aleatoric_var=noise)

    @lazy_on_dask
    @thread_policy
    @torch_entry_point
    def predict(self, X, return_std=False, return_cov=False, return_mean_grad=False,
                return_std_grad=False):
        """Predictive mean, and the predictive std or joint covariance (σ included).

        As in ``GaussianProcessRegressor``: at most one of ``return_std`` and
        ``return_cov``; both include the noise σ², so the diagonal of the covariance is
        the squared std. The gradients with respect to the rows of ``X`` follow
        scikit-optimize's ``GaussianProcessRegressor`` (what its acquisition
        functions and L-BFGS acquisition optimizer call): they are those of the
        GLM predictive's mean and of the same std as ``return_std`` returns (σ
        included; its gradient is that of the epistemic part), by automatic
        differentiation, the variance outside the training range included. They
        are taken with respect to the input the estimator receives: in a
        Pipeline, the output of the steps before it.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Input samples.
        return_std : bool, default=False
            Whether to return the predictive standard deviation too.
        return_cov : bool, default=False
            Whether to return the joint predictive covariance over the rows of ``X``
            (J Σ Jᵀ + σ² I of the GLM predictive; with ``pred_type="nn"`` the sample
            covariance of the network at the weight draws, plus σ²). It holds
            n_samples² values per output: for many rows use ``return_std``.
        return_mean_grad : bool, default=False
            Whether to return the gradient of the predictive mean with respect to
            each row of ``X`` too (``pred_type="glm"`` only; ``model_averaging=True``:
            the mixture's).
        return_std_grad : bool, default=False
            Whether to return the gradient of the predictive std with respect to
            each row of ``X`` too; needs ``return_std=True`` and
            ``return_mean_grad=True``, as in scikit-optimize.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_targets)
            Predictive mean, in the units of y.
        std : ndarray of the same shape
            Only with ``return_std=True``.
        cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_targets)
            Only with ``return_cov=True``, in the units of y²: for multi-output y one
            covariance over the rows per output (``GaussianProcessRegressor``'s layout;
            the covariances between outputs are not returned, :meth:`sample_y` keeps them).
        mean_grad : ndarray of shape (n_samples, n_features) or (n_samples, n_targets, n_features)
            Only with ``return_mean_grad=True``: ∂mean/∂x of each row, in the units
            of y per unit of x. For a single row the row axis is dropped,
            (n_features,) or (n_targets, n_features), as scikit-optimize expects.
        std_grad : ndarray of the shape of ``mean_grad``
            Only with ``return_std_grad=True``: ∂std/∂x of each row.

        Raises
        ------
        ValueError
            If both ``return_std`` and ``return_cov`` are True, if ``return_std_grad``
            is requested without ``return_std`` and ``return_mean_grad``, or if
            gradients are requested of a predictive that has none here
            (``pred_type`` other than ``"glm"``, ``noise="heteroscedastic"``,
            ``return_cov=True``).
        """
        check_is_fitted(self)
        if return_std and return_cov:
            raise ValueError("At most one of return_std or return_cov can be requested.")
        if return_mean_grad or return_std_grad:
            return self._predict_with_gradients(X, return_std, return_cov, return_mean_grad,
                                                return_std_grad)
        if return_cov:
            mean, cov = self._joint_moments()(self, X)
            mean = mean[:, 0] if self.laplace_.targets.ndim == 1 else mean
            return mean, per_output_cov(self, cov)
        if averaging.averaged(self):  # the mixture's mean and total std
            dist = averaging.regressor_dist(self, X)
            return (dist.mean, dist.std) if return_std else dist.mean
        mean, var, noise = self._output_moments(X)
        return (mean, np.sqrt(var + noise)) if return_std else mean

    def _predict_with_gradients(self, X, return_std, return_cov, return_mean_grad,
                                return_std_grad):
        """``predict`` with ``return_mean_grad`` (and ``return_std_grad``)."""
        if return_std_grad and not (return_std and return_mean_grad):
            raise ValueError("return_std_grad=True needs return_std=True (the std whose "
                             "gradient it is) and return_mean_grad=True, as in "
                             "scikit-optimize.")
        if return_cov:
            raise ValueError("return_mean_grad and return_std_grad are per row; they do not "
                             "combine with return_cov=True.")
        if averaging.averaged(self):
            return averaging.regressor_gradients(self, X, return_std, return_std_grad)
        fitted = self.laplace_
        if fitted.likelihood.name == "heteroscedastic" or self.pred_type != "glm":
            raise ValueError(
                "return_mean_grad / return_std_grad: gradients of the predictive are "
                "available for pred_type='glm' with noise='homoscedastic'; this estimator "
                f"has pred_type={self.pred_type!r}, noise={getattr(self, 'noise', None)!r}.")
        Xt = self._X_tensor(X)
        _, _, mean_grad, var_grad = moment_gradients(fitted.subset, fitted.posterior,
                                                     fitted.outside, Xt)
        # the moments as predict returns them (the same numbers, whatever path they take)
        mean, var, noise = (a.reshape(len(a), -1) for a in self._output_moments(X))
        scale = np.asarray(fitted.targets.std, dtype=float)  # y = mean_y + s·f per output
        extra = (1,) * (mean_grad.dim() - 2)
        mean_grad = mean_grad.cpu().numpy() * scale.reshape(1, -1, *extra)
        std = np.sqrt(var + noise)
        # ∂√(s² v + s² σ²)/∂x = s² ∂v/∂x / (2 std)
        std_grad = var_grad.cpu().numpy() * (scale**2).reshape(1, -1, *extra) / (
            2 * std.reshape(*std.shape, *extra))
        if fitted.targets.ndim == 1:
            mean, std, mean_grad, std_grad = mean[:, 0], std[:, 0], mean_grad[:, 0], std_grad[:, 0]
        if len(mean) == 1:  # one row: its gradient alone, as scikit-optimize's GP returns
            mean_grad, std_grad = mean_grad[0], std_grad[0]
        out = (mean,) + ((std,) if return_std else ()) + (mean_grad,)
        return out + ((std_grad,) if return_std_grad else ())

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def sample_y(self, X, n_samples=1, random_state=0):
        """Draw targets from the joint predictive, as ``GaussianProcessRegressor.sample_y``.

        The draws come from N(mean, cov) over all rows and outputs of ``X`` together, the
        distribution of ``predict(X, return_cov=True)`` with the covariances between
        outputs kept; σ² is included (for noise-free functions use
        :meth:`sample_functions`). ``model_averaging=True``: each draw from one candidate's
        joint predictive, the candidate drawn by its weight (a draw of the mixture).

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
            Input samples.
        n_samples : int, default=1
            Number of draws per row.
        random_state : int, RandomState instance or None, default=0
            Seed of the draws, as in ``GaussianProcessRegressor.sample_y``.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or (n_samples_X, n_targets, n_samples)
            The draws, in the units of y.
        """
        check_is_fitted(self)
        check_positive("n_samples", n_samples, integer=True)
        if averaging.averaged(self):
            return averaging.regressor_sample_y(self, X, int(n_samples), random_state)
        return sample_joint(self, X, int(n_samples), random_state, self._joint_moments())

    def _joint_moments(self):
        """(estimator, X) → the joint predictive's mean and covariance in the units of y."""
        if averaging.averaged(self):
            return averaging.regressor_joint
        if self.laplace_.likelihood.name == "heteroscedastic":
            return type(self)._natural_joint
        return joint_moments

    @refuse_dask
    @thread_policy
    @torch_entry_point
    def sample_functions(self, X, n_samples=1, random_state=None):
        """Draw functions from the posterior, in the units of y (no noise added).

        GLM: f(x, θ*) + J(x)(θ − θ*); ``pred_type="nn"``: f(x, θ).
        ``model_averaging=True``: each draw from one candidate, drawn by its weight.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input samples.
        n_samples : int, default=1
            Number of functions drawn.
        random_state : int, RandomState instance or None, default=None
            Seed of the draws, as in scikit-learn.

        Returns
        -------
        samples : ndarray of shape (n_samples, n_rows, n_outputs)
            The value of each drawn function at each row and output (with
            ``noise="heteroscedastic"``, of the mean μ(x) = η₁(x)·σ²(x)).
        """
        check_is_fitted(self)
        if self.laplace_.likelihood.name == "heteroscedastic":
            return self._natural_functions(X, n_samples, random_state)
        f = self._function_samples(X, n_samples, random_state).cpu().numpy()
        targets = self.laplace_.targets
        return f * targets.std + targets.mean
