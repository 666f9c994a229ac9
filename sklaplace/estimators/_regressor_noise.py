"""The regressor's noise model: one σ per output, or a σ(x) that the network predicts.

``noise="homoscedastic"`` is the Gaussian likelihood with the noise ``sigma_noise``
(tuned with δ). ``noise="heteroscedastic"`` is the Gaussian in natural parameters
(:class:`~._laplace.likelihoods.HeteroscedasticGaussian`): the net outputs, per target,
η₁ = μ/σ² and the log precision −log σ², the curvature is the GGN of that likelihood,
the tuners tune δ alone, and the predictive maps the Gaussian over the outputs to the
mean and variance of y by linearizing the mean function (:mod:`._laplace.natural`).

:class:`RegressorNoise` holds the hooks of the shared fit sequence that depend on the
noise model (the rows' targets and σ as ``fit`` reads them, outputs per target, the
default tuning, the held-out NLL, what is stored), the rules of
its combination with other parameters, and the heteroscedastic predictive readouts.
"""

import dataclasses
import warnings

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.utils.validation import check_is_fitted

from ..distributions._joint import model_joint
from .._laplace import natural, nets, policy
from .._laplace.fitted import generator
from .._laplace.hyperparameters import TARGET_SCALING, TargetScale
from ._validation import (check_fit_weight, check_positive, check_seed, positive_array,
                          validate_numeric, without_zero_weights)

HETERO = "heteroscedastic"
#: ``check_X_y``'s arguments of a fit's X and y, in memory and on each partition of a dask
#: collection.
FIT_CHECKS = {"dtype": [np.float64, np.float32], "multi_output": True, "y_numeric": True}
_CRITERION = "sklaplace.nets.HeteroscedasticGaussianNLLLoss"
# μ = η₁e^(−g) of networks at sampled weights is heavy-tailed (exponential in the log
# precision g's draws): median std 5e5 against the GLM predictive's 0.27 on sin(3x)
_SAMPLED = ("pred_type='nn' is not available (use pred_type='glm' or 'gp'): the mean "
            "η₁·e^(−g) of networks at sampled weights is heavy-tailed in the log precision g, "
            "and its moments are no predictive")


def _net_likelihood(net):
    inner = net.estimator if isinstance(net, FrozenEstimator) else net
    try:
        return nets.likelihood_of(inner)
    except (ValueError, AttributeError):
        return None  # check_params names the criterion problem


class RegressorNoise:
    """Noise-model hooks and readouts of :class:`~sklaplace.LaplaceRegressor` (a mixin)."""

    def _heteroscedastic(self):
        return self.noise == HETERO

    def _noise_likelihood(self, task=None):
        """The likelihood name of ``noise``, after the rules of its combinations."""
        if not self._heteroscedastic():
            if self.net is not None and _net_likelihood(self.net) == HETERO:
                raise ValueError(
                    f"The net's criterion is {_CRITERION} (natural parameters of a noise "
                    "per row): use noise='heteroscedastic', or criterion MSELoss.")
            return "gaussian"
        problems = []
        if np.size(self.sigma_noise) != 1 or float(np.ravel(self.sigma_noise)[0]) != 1.0:
            problems.append(
                "sigma_noise must stay at its default 1.0: the network predicts the noise "
                "(predict_dist(X).aleatoric_var), and sigma_noise_ is not set")
        if self.refine is not None:
            problems.append(f"refine={self.refine!r} is not available (use refine=None): "
                            "the refined GLM is implemented for a fixed noise")
        if self.pred_type == "nn":
            problems.append(_SAMPLED)
        if task is not None:
            problems.append("partial_fit is not available")
        if self.net is not None and _net_likelihood(self.net) not in (None, HETERO):
            problems.append(
                f"the net's criterion gives a {_net_likelihood(self.net)} likelihood; "
                f"expected {_CRITERION}, with a module returning (n_samples, 2 * n_targets) "
                "values: η₁ = μ/σ² per target, then the log precision −log σ² per target")
        if problems:
            raise ValueError("noise='heteroscedastic': " + "; ".join(problems) + ".")
        return HETERO

    # hooks of the shared fit sequence (_base.BaseLaplace)
    def _fit_rows(self, X, y, sample_weight=None, task=None):
        """``fit``'s body; ``task``: the first ``partial_fit`` call's."""
        X, y = validate_numeric(self, X, y, **FIT_CHECKS)
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"y must be numeric for LaplaceRegressor; {error}") from error
        y2 = y.reshape(len(y), -1)
        sample_weight = check_fit_weight(sample_weight, X)
        X, y2, sample_weight = without_zero_weights(X, y2, sample_weight)
        kind = self._noise_likelihood(task)
        sigma = positive_array("sigma_noise", self.sigma_noise)
        if sigma.size not in (1, y2.shape[1]):
            raise ValueError(
                f"sigma_noise has {sigma.size} values but y has {y2.shape[1]} outputs.")
        frozen = self.net.estimator if isinstance(self.net, FrozenEstimator) else None
        if kind == HETERO and not self.normalize_y and frozen is None:
            warn_unscaled(y2, sample_weight)
        targets, y_model = TargetScale.of_fit(y2, y.ndim, self.normalize_y, sample_weight, frozen,
                                              self.sigma_noise, sigma, kind == "gaussian")
        self._fit(X, y_model, kind, (2 if kind != "gaussian" else 1) * y2.shape[1], targets,
                  sample_weight, task=task)
        return self._record_scaling()

    def _default_tuning(self, n_rows):
        return policy.regressor_tuning(
            isinstance(self.net, FrozenEstimator), np.size(self.sigma_noise),
            self.max_epochs if self.net is None else self.net.max_epochs,
            self.online_burn_in, self.online_frequency, self.subset_of_weights)

    def _check_outputs(self, likelihood, n_outputs, n_out):
        if n_out == n_outputs:
            return
        if likelihood.name == HETERO:
            raise ValueError(
                f"The network outputs {n_out} values per row, but noise='heteroscedastic' "
                f"with {n_outputs // 2} target(s) expects {n_outputs}: η₁ = μ/σ² per target, "
                "then the log precision −log σ² per target.")
        raise ValueError(
            f"The network outputs {n_out} values per row but y has {n_outputs} outputs.")

    def _initial_sigma(self):
        # The parameter is in the units the net is trained in: those of the standardized
        # target with normalize_y (as GaussianProcessRegressor's alpha), else of y.
        sigma = np.asarray(self.sigma_noise, dtype=float)
        return float(sigma.reshape(())) if sigma.size == 1 else sigma.copy()

    def _evidence_offset(self, fitted):
        return fitted.targets.evidence_offset(fitted.evidence.n_rows)

    def _store_sigma(self, fitted):
        if fitted.likelihood.name == HETERO:
            self.__dict__.pop("sigma_noise_", None)  # the noise is per row: predict_dist
        else:
            self.sigma_noise_ = fitted.targets.sigma_original(fitted.hyper.sigma)

    def _record_scaling(self):
        """Record the standardization on a net this estimator trained (not on a frozen one)."""
        if not isinstance(self.net, FrozenEstimator):
            self.laplace_.targets.record_on(self.net_)
        return self

    #: Attribute of a trained ``net_`` with the (mean, std) of its outputs' standardization.
    TARGET_SCALING = TARGET_SCALING

    def _held_out_scorers(self, likelihood, seed):
        """The held-out NLL (model units, per row) of the predictive
        (:mod:`._laplace.natural`): of GLM moments (f, cov) and of output draws (S, n, 2T)."""
        if likelihood.name != HETERO:
            return None
        return (lambda f, cov, y: _nll(natural.moments(f, cov), y),
                lambda samples, y: _nll(natural.sample_moments(samples), y))

    # heteroscedastic readouts, in the units of y
    def _natural_fit(self):
        """``laplace_``, refusing ``pred_type="nn"`` set after the fit as ``fit`` refuses it."""
        if self.pred_type == "nn":
            raise ValueError(f"noise='heteroscedastic': {_SAMPLED}.")
        return self.laplace_

    def _natural_moments(self, Xt):
        """(mean, epistemic variance, aleatoric variance) (n, T), numpy, units of y."""
        fitted = self._natural_fit()
        # the variance outside the training range adds to the mean's variance
        mean, var, noise = dataclasses.replace(fitted, outside=None).per_chunk(
            Xt, natural.moments)
        if fitted.outside is not None:
            with torch.no_grad():
                var = var + fitted.outside.diag(Xt).to(var)[:, None]
        t = fitted.targets
        return (mean.cpu().numpy() * t.std + t.mean, var.cpu().numpy() * t.std**2,
                noise.cpu().numpy() * t.std**2)

    def _natural_joint(self, X):
        """Joint mean (n, T) and covariance (n, T, n, T) of y, units of y."""
        fitted, Xt = self._natural_fit(), self._X_tensor(X)
        n, C = len(Xt), fitted.n_outputs
        f, cov = model_joint(self, Xt, outside=False)
        mean, cov_mu, noise = natural.joint(f, cov.reshape(n, C, n, C))
        if fitted.outside is not None:
            K = fitted.outside.cross(Xt, Xt).to(cov_mu)
            cov_mu = cov_mu + K[:, None, :, None] * torch.eye(C // 2).to(cov_mu)[None, :, None]
        t = fitted.targets
        mean = mean.cpu().numpy() * t.std + t.mean
        cov_y = cov_mu.cpu().numpy() * t.std[None, :, None, None] * t.std[None, None, None, :]
        rows = np.arange(n)
        noise = noise.cpu().numpy() * t.std**2
        cov_y[rows, :, rows, :] += np.einsum("nc,cd->ncd", noise, np.eye(C // 2))
        return mean, cov_y

    def _natural_functions(self, X, n_samples, random_state):
        """Draws of the mean function μ(x) = η₁e^(−g) (S, n, T), units of y (the variance
        outside the training range added to μ)."""
        check_is_fitted(self)
        check_positive("n_samples", n_samples, integer=True)
        fitted, Xt = self._natural_fit(), self._X_tensor(X)
        seed = check_seed("random_state", random_state).randint(0, 2**31 - 1)
        f = dataclasses.replace(fitted, outside=None).function_samples(Xt, n_samples, seed, False)
        T = f.shape[-1] // 2
        mu = f[..., :T] * torch.exp(-f[..., T:])
        if fitted.outside is not None:
            mu = mu + fitted.outside.sample(Xt, n_samples, T, generator(seed + 1)).to(mu)
        return mu.cpu().numpy() * fitted.targets.std + fitted.targets.mean


#: The targets' root mean square within which an unstandardized heteroscedastic fit trains
#: as at unit scale (y = sin(3x) + noise: R² within 0.25 of y's from y×1e-2 to y×1e2; y×1e-3
#: diverged, y×1e4 had R² −2.5 and y×1e6 means 10³ times the targets' range).
UNSCALED_RANGE = (1e-2, 1e2)


def warn_unscaled(y2, sample_weight=None):
    """Warn where ``normalize_y=False`` leaves the natural parameters far from unit scale.

    η₁ = μ/σ² and −log σ² are then trained in the units of y, while the optimizer steps
    each weight by about ``lr`` and the mean-first start sets η₁'s weights to the mean's
    times e^(g₀), g₀ = −log of the residuals' mean square (−27 for y in micro-units):
    steps of ``lr`` on η₁'s weights (of order 10⁻⁵ for y in micro-units) move
    μ = η₁e^(−g) by orders of magnitude.
    """
    rms = np.sqrt(np.average(np.square(y2), axis=0, weights=sample_weight))
    low, high = UNSCALED_RANGE
    if np.all((rms >= low) & (rms <= high)):
        return
    worst = float(rms[np.argmax(np.abs(np.log10(np.maximum(rms, 1e-300))))])
    warnings.warn(
        f"noise='heteroscedastic' with normalize_y=False trains η₁ = μ/σ² and the log "
        f"precision −log σ² in the units of y, whose root mean square is {worst:.3g} here "
        f"(outside [{low:g}, {high:g}]): the training steps (about lr per weight) are then "
        "far from the size of these weights, and the predicted means and variances can be "
        "orders of magnitude off. Use normalize_y=True (the default), or rescale y.",
        UserWarning, stacklevel=3)


def _nll(moments, y):
    mean, epistemic, aleatoric = moments
    return natural.gaussian_nll(mean, epistemic + aleatoric, y.to(mean)).cpu().numpy()
