"""The hyperparameters δ (prior precision) and σ (noise), and their units.

One home for the two values every tuner (evidence, held-out, online, continual)
returns and prediction reads:

- :class:`Hyperparameters`: δ in *whole-net form* (a float, one value per parameter
  tensor or one per parameter: what the user gives and ``prior_precision_`` reports)
  and σ in *model units* (a 0-d tensor, or one value per output; 1 for classifiers),
  with the crossings to the Laplace weights (:func:`~.prior.subset_prior`), to
  training (:func:`~.prior.expand_prior`) and to the curvature scale s(σ);
- :class:`TargetScale`: the regressor's standardization y = μ + s·y_model
  (``normalize_y``): targets, σ, moments and the evidence between the units of y and
  the model's. One σ shared by outputs standardized by different stds is a
  different noise per output in the units of y: σ·std_c, reported per output.
"""

from dataclasses import dataclass, replace

import numpy as np
import torch

from .evidence import curvature_scale
from .prior import expand_prior, subset_prior


def weighted_spread(values, weight=None, axis=None):
    """``np.std(values, axis)``, or the std under row weights (the rows' duplication)."""
    values = np.asarray(values)
    if weight is None:
        return np.std(values, axis=axis)
    w = np.asarray(weight, dtype=float)
    if axis is None:
        w = np.broadcast_to(w.reshape(len(w), *[1] * (values.ndim - 1)), values.shape).ravel()
        values = values.ravel()
    else:
        w = w.reshape(len(w), *[1] * (values.ndim - 1))
    mean = np.sum(w * values, axis=axis) / np.sum(w, axis=axis)
    centered = values - (mean if axis is None else np.expand_dims(mean, axis))
    return np.sqrt(np.sum(w * centered**2, axis=axis) / np.sum(w, axis=axis))


#: σ's lower bound in tuning (and σ(x)'s at the heteroscedastic start), relative to the
#: targets' scale (:func:`target_unit`).
SIGMA_FLOOR = 1e-3


def target_unit(spread):
    """The scale of targets of std ``spread``: the std, or 1 where it is 0 (a constant
    target), as :class:`TargetScale` standardizes (scikit-learn's
    ``_handle_zeros_in_scale``); σ's bounds are relative to it."""
    spread = np.asarray(spread, dtype=float)
    return np.where(spread > 0, spread, 1.0)


def sigma_floor(spread):
    """σ's lower bound for targets of std ``spread`` (per output, or one value)."""
    return SIGMA_FLOOR * target_unit(spread)


def whole_net(prior):
    """A whole-net prior as stored: a float, or a float array."""
    arr = np.asarray(prior, dtype=float)
    return float(arr) if arr.ndim == 0 else arr


@dataclass(frozen=True)
class Hyperparameters:
    """δ (whole-net form), σ (model units, a float64 tensor) and the classifier's σ² of
    the variance outside the training range (:mod:`.outside`; 0: none) of one fit."""

    prior_precision: object
    sigma: torch.Tensor
    outside_variance: float = 0.0

    @classmethod
    def of(cls, prior_precision, sigma=None):
        """From a whole-net prior (any array-like) and σ (a number, array or tensor;
        None: 1, a classifier's)."""
        sigma = 1.0 if sigma is None else sigma
        return cls(whole_net(prior_precision),
                   torch.as_tensor(np.asarray(sigma, dtype=float) if not torch.is_tensor(sigma)
                                   else sigma, dtype=torch.float64))

    def with_prior(self, prior_precision):
        return replace(self, prior_precision=whole_net(prior_precision))

    def with_outside_variance(self, variance):
        return replace(self, outside_variance=float(variance))

    def delta(self, subset):
        """δ of the Laplace weights of ``subset`` (0-d, or one per weight)."""
        return subset_prior(self.prior_precision, subset)

    def for_training(self, sizes):
        """δ for the training loss: a float, or one value per net parameter."""
        arr = np.asarray(self.prior_precision, dtype=float)
        return float(arr) if arr.ndim == 0 else expand_prior(arr, sizes)

    @property
    def vector_sigma(self):
        """Whether σ has one value per output (built into the curvature)."""
        return self.sigma.dim() > 0

    def scale(self, gaussian, curvature, temperature, sigma=None):
        """The curvature scale s(σ) (of this σ, or of the given one)."""
        return curvature_scale(gaussian, curvature, temperature,
                               self.sigma if sigma is None else sigma)


#: Attribute of a trained net with the (mean, std) of the standardization its outputs are
#: in (``normalize_y``): a ``FrozenEstimator`` of it reads its outputs in those units.
TARGET_SCALING = "sklaplace_target_scaling_"
# Adam squares the gradients, of order std(y)/σ² per row: beyond ~1e15 they
# overflow float32 (3e38) and the net silently stays at its initialization.
MAX_GRADIENT_SCALE = 1e15


def trained_scaling(net, n_outputs):
    """(mean, std) of the standardized targets a frozen ``net`` was trained on, or None."""
    scaling = getattr(net, TARGET_SCALING, None)
    if scaling is None:
        return None
    mean, std = (np.asarray(v, dtype=np.float64).reshape(-1) for v in scaling)
    if mean.size != n_outputs or std.size != n_outputs:
        raise ValueError(
            f"The frozen net was trained by a LaplaceRegressor on {mean.size} standardized "
            f"target(s), but y has {n_outputs} outputs.")
    return mean, std


def check_sigma_scale(given, sigma, y_model, normalizes, sample_weight=None):
    """Refuse a σ (``given`` as the parameter) so small against the spread of the
    targets that training breaks."""
    spread = weighted_spread(y_model, sample_weight, axis=0)
    scale = target_unit(spread) / sigma**2
    if not np.all(scale <= MAX_GRADIENT_SCALE):
        unit = "standardized y" if normalizes else "y"
        floor = np.sqrt(np.max(target_unit(spread)) / MAX_GRADIENT_SCALE)
        raise ValueError(
            f"sigma_noise={given!r} (in units of {unit}) is too small for the "
            f"spread of y: MAP training cannot fit with it (the gradients of the Gaussian "
            f"loss, ~std(y)/σ², overflow). Use sigma_noise ≥ {floor:.3g}, of the order of the "
            "expected residuals, or keep the default and let "
            "hyperparameter_tuning='evidence' tune it."
        )


@dataclass(frozen=True)
class TargetScale:
    """y = mean + std·y_model per output; ``ndim`` of the fitted y (1 or 2)."""

    mean: np.ndarray
    std: np.ndarray
    normalizes: bool
    ndim: int

    @classmethod
    def of_fit(cls, y2, ndim, normalize_y, sample_weight, frozen, given_sigma, sigma,
               check_sigma=True):
        """(the scale, y in model units) of a regressor's fit; ``frozen``: a
        ``FrozenEstimator``'s net or None. A frozen net predicts in the units it was
        trained on: those of y for a user's net (standardizing y would silently misread
        its outputs), the standardized units of the estimator that trained it for a
        LaplaceRegressor's ``net_`` (recorded, ``TARGET_SCALING``). Refuses a σ so
        small that training would overflow (only training can; ``check_sigma``)."""
        targets = cls.fit(y2, bool(normalize_y) and frozen is None, ndim, sample_weight,
                          trained=None if frozen is None else trained_scaling(frozen,
                                                                              y2.shape[1]))
        y_model = targets.to_model(y2)
        if frozen is None and check_sigma:
            check_sigma_scale(given_sigma, sigma, y_model, targets.normalizes, sample_weight)
        return targets, y_model

    @classmethod
    def fit(cls, y2, normalize, ndim, sample_weight=None, trained=None):
        """The standardization of the targets ``y2`` (n, C): their (weighted) mean and
        std with ``normalize``, or the (mean, std) a frozen net was ``trained`` in."""
        if trained is not None:
            mean, spread = trained
            normalize = True
        elif not normalize:
            mean = np.zeros(y2.shape[1])
        else:
            mean = np.average(y2, axis=0, weights=sample_weight)
        if trained is None:
            with np.errstate(over="ignore", invalid="ignore"):
                spread = weighted_spread(y2, sample_weight, axis=0)
        if not np.all(np.isfinite(spread)):
            raise ValueError(
                "y is too large for float64 arithmetic (its standard deviation overflows); "
                "rescale the targets."
            )
        std = target_unit(spread) if normalize else np.ones(y2.shape[1])
        return cls(np.asarray(mean, dtype=float), std, bool(normalize), ndim)

    def record_on(self, net):
        """Record a standardization on the net trained in its units (``TARGET_SCALING``)."""
        if self.normalizes:
            setattr(net, TARGET_SCALING, (self.mean.copy(), self.std.copy()))

    def to_model(self, y2):
        return (y2 - self.mean) / self.std

    @property
    def per_output_sigma(self):
        """A scalar model σ is a different σ per output of y."""
        return self.normalizes and self.std.size > 1

    def sigma_original(self, sigma):
        """Model-units σ tensor → the units of y (float or array, ``sigma_noise_``)."""
        if sigma.dim() == 0 and self.per_output_sigma:
            return float(sigma) * self.std
        s = sigma.cpu().numpy() * (self.std if sigma.dim() > 0 else self.std.mean())
        return float(s) if np.ndim(s) == 0 else np.asarray(s)

    def sigma_model(self, sigma, fitted_sigma):
        """σ in the units of y (of the form of ``sigma_noise_``) → model units, given
        the fit's model σ (its form decides how a per-output value is read)."""
        s = np.asarray(sigma, dtype=float)
        if s.ndim == 0 or s.size == 1:
            return torch.tensor(float(s.reshape(())) / float(self.std.mean()), dtype=torch.float64)
        if fitted_sigma.dim() == 0 and self.per_output_sigma:
            shared = s / self.std
            if not np.allclose(shared, shared[0], rtol=1e-9, atol=0):
                raise ValueError(
                    "sigma_noise: this fit has one noise σ for all outputs in standardized "
                    "units, so sigma_noise must be c·std(y) per output (as sigma_noise_ is); "
                    f"got {s.tolist()} for target stds {self.std.tolist()}.")
            return torch.tensor(float(shared[0]), dtype=torch.float64)
        return torch.as_tensor(s / self.std, dtype=torch.float64)

    def evidence_offset(self, n_rows):
        """log p(y) − log p(y_model) = −N Σ_c log s_c."""
        return -n_rows * float(np.log(self.std).sum())

    def moments(self, mean, var, sigma):
        """Model-units mean, epistemic variance (n, C) and σ → those of y, with the
        aleatoric variance (σ·s)² beside: (mean, var, noise)."""
        sigma = sigma.expand(mean.shape[1]).cpu().numpy()
        mean = mean * self.std + self.mean
        var = var * self.std**2
        noise = np.broadcast_to((sigma * self.std) ** 2, var.shape).copy()
        return mean, var, noise

    def joint_moments(self, mean, cov, sigma):
        """Model-units mean (n, C), joint epistemic covariance (n, C, n, C, numpy) and σ →
        the joint predictive of y: its mean and covariance, the noise (σ·s)² on each
        row's own block."""
        mean, _, noise = self.moments(mean, np.zeros(mean.shape), sigma)
        cov = cov * self.std[None, :, None, None] * self.std[None, None, None, :]
        rows = np.arange(len(mean))
        cov[rows, :, rows, :] += np.diag(noise[0])
        return mean, cov
