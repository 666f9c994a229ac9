"""Likelihoods: negative log-likelihood, output Hessian Λ and its square root.

Every likelihood works on the network outputs ``f`` of shape (n, C) in float64
and exposes what the MAP objective, the curvature and the evidence need:

- ``nll(f, y)``: per-row negative log-likelihood, shape (n,);
- ``sqrt_hessian(f)``: a factor ``S`` of shape (n, C, K) with ``S Sᵀ = Λ(f)``,
  Λ = −∇²_f log p(y | f) (independent of ``y`` for all of them; the heteroscedastic
  Gaussian's is the GGN's, its link's second derivative dropped);
- ``residual(f, y)``: ∇_f nll, shape (n, C), for the empirical Fisher.

The temperature ``T`` and the Gaussian noise ``σ`` are applied outside, as a
scalar factor on the log-likelihood and on Λ (see ``curvature_scale``).

Each likelihood also carries what the estimators decide by likelihood: whether it
has an observation noise σ (``has_noise``), the dtype and shape of its targets
(``train_targets`` for skorch, ``targets`` for tensors, ``split_weight`` for targets
with a trailing weight column), the number of logits for ``n_classes`` classes
(``n_outputs``), its full negative log-likelihood at a noise σ (``noisy_nll``) and
the torch loss whose Hessian BackPACK propagates (``loss_module``).

The *name* (``"categorical"``, ``"bernoulli"``, ``"multilabel"``, ``"gaussian"``,
``"heteroscedastic"``) is what crosses the
boundary to skorch (``criterion__likelihood``) and to pickles; :func:`get` turns it
into the object.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class _Likelihood:
    name = None
    has_noise = False  # an observation noise σ (scales the log-likelihood and Λ)
    regression = False  # real-valued targets (no stratified split, no "auto" outside variance)
    single_logit = False  # one logit for two classes
    multilabel = False  # one sigmoid per label of an indicator matrix

    def __reduce__(self):  # stateless: pickles as its name
        return get, (self.name,)

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"{type(self).__name__}()"

    def noisy_nll(self, f, y, sigma):
        """Per-row negative log-likelihood at the noise ``sigma`` (ignored without noise)."""
        return self.nll(f, y)

    def split_weight(self, y):
        """(targets, weights) of a target tensor whose last column holds row weights."""
        y = y.reshape(y.shape[0], -1)
        return self.targets(y[:, :-1]), y[:, -1]


class Categorical(_Likelihood):
    """Softmax likelihood over ``C`` logits."""

    name = "categorical"

    def n_outputs(self, n_classes):
        return n_classes

    def train_targets(self, y):
        return np.asarray(y).astype(np.int64)

    def targets(self, y):
        return y.reshape(y.shape[0], -1)[:, 0].long()

    def loss_module(self, out_scale):
        """(loss, target maker, c): c · GGN of ``loss`` (summed) is our GGN."""
        return nn.CrossEntropyLoss(reduction="sum"), _zero_labels, 1.0

    def nll(self, f, y):
        return F.cross_entropy(f, y.long(), reduction="none")

    def residual(self, f, y):
        return torch.softmax(f, -1) - F.one_hot(y.long(), f.shape[-1]).to(f.dtype)

    def sqrt_hessian(self, f):
        # Λ = diag(p) − p pᵀ = (diag(√p) − p √pᵀ)(diag(√p) − p √pᵀ)ᵀ since Σ p = 1.
        p = torch.softmax(f, -1)
        sp = p.sqrt()
        return torch.diag_embed(sp) - p.unsqueeze(-1) * sp.unsqueeze(-2)


class Bernoulli(_Likelihood):
    """Sigmoid likelihood of each output, independent across outputs.

    One logit models two classes (binary classification); ``L`` logits model ``L``
    labels of a row (:class:`Multilabel`). The negative log-likelihood sums over the
    outputs and Λ is diagonal, p(1 − p) per output.
    """

    name = "bernoulli"
    single_logit = True

    def n_outputs(self, n_classes):
        return 1

    def train_targets(self, y):
        return np.asarray(y).astype(np.float32)

    def targets(self, y):
        y = y.reshape(y.shape[0], -1).to(torch.float64)
        return y[:, 0] if self.single_logit else y

    def loss_module(self, out_scale):
        return nn.BCEWithLogitsLoss(reduction="sum"), torch.zeros_like, 1.0

    def nll(self, f, y):
        return F.binary_cross_entropy_with_logits(
            f, y.to(f.dtype).reshape(f.shape), reduction="none").sum(-1)

    def residual(self, f, y):
        return torch.sigmoid(f) - y.to(f.dtype).reshape(f.shape)

    def sqrt_hessian(self, f):
        p = torch.sigmoid(f)
        return torch.diag_embed((p * (1 - p)).sqrt())


class Multilabel(Bernoulli):
    """Bernoulli likelihood of ``L`` labels per row (an indicator matrix): one logit per
    label, the per-label sigmoids independent given the logits."""

    name = "multilabel"
    single_logit = False
    multilabel = True

    def n_outputs(self, n_classes):
        return n_classes


class Gaussian(_Likelihood):
    """Gaussian likelihood with unit noise; σ enters through ``curvature_scale``.

    ``nll`` here is ½‖y − f‖² (the σ-free part); ``noisy_nll`` and
    ``gaussian_log_likelihood`` give the full log-likelihood for any σ.
    """

    name = "gaussian"
    has_noise = True
    regression = True

    def n_outputs(self, n_classes):
        return n_classes

    def train_targets(self, y):
        y = np.asarray(y)
        return y.reshape(y.shape[0], -1)

    def targets(self, y):
        return y.reshape(y.shape[0], -1).to(torch.float64)

    def noisy_nll(self, f, y, sigma):
        sigma = sigma.to(f).expand(f.shape[1])
        sq = ((y.reshape(f.shape).to(f) - f) / sigma) ** 2
        return (0.5 * sq + torch.log(sigma) + 0.5 * math.log(2 * math.pi)).sum(-1)

    def loss_module(self, out_scale):
        # Λ = diag(out_scale²) but MSELoss(sum) has Hessian 2I: c = out_scale²/2, and only
        # when all outputs share one scale.
        if (out_scale != out_scale[0]).any():
            return None
        return nn.MSELoss(reduction="sum"), torch.zeros_like, float(out_scale[0]) ** 2 / 2

    def nll(self, f, y):
        return 0.5 * ((y.reshape(f.shape) - f) ** 2).sum(-1)

    def residual(self, f, y):
        return f - y.reshape(f.shape)

    def sqrt_hessian(self, f):
        eye = torch.eye(f.shape[-1], dtype=f.dtype, device=f.device)
        return eye.expand(f.shape[0], -1, -1)


class HeteroscedasticGaussian(_Likelihood):
    """Gaussian with a noise per row, in natural parameters (Immer et al. 2023).

    The outputs f (n, 2T) hold, per target t, η₁ = f[:, t] = μ/σ² and the log precision
    g = f[:, T + t] = −log σ², so η₂ = −1/(2σ²) = −½·exp(g). The negative log-likelihood
    ½ log 2π − ½ g + ½ e^g (y − μ)², μ = η₁ e^(−g), is convex in (η₁, η₂); its Hessian
    there is the covariance of the sufficient statistics (y, y²), which does not depend on
    y, and the GGN takes the link g ↦ η₂ as part of the network: per target
    Λ = Dᵀ Cov(y, y²) D = [[σ², −μ], [−μ, ½ + μ²/σ²]] (D = diag(1, −½e^g)), PSD, with
    the square root [[σ, 0], [−μ/σ, −1/√2]].
    """

    name = "heteroscedastic"
    regression = True

    def n_outputs(self, n_targets):
        return 2 * n_targets

    def train_targets(self, y):
        y = np.asarray(y)
        return y.reshape(y.shape[0], -1)

    def targets(self, y):
        return y.reshape(y.shape[0], -1).to(torch.float64)

    def loss_module(self, out_scale):
        return None  # BackPACK has no natural-parameter Gaussian loss

    @staticmethod
    def split(f):
        """(η₁, g) of the outputs (n, 2T): the first and second half of the columns."""
        half = f.shape[-1] // 2
        return f[..., :half], f[..., half:]

    @classmethod
    def mean_and_variance(cls, f):
        """μ = η₁ e^(−g) and σ² = e^(−g) of the outputs (n, 2T): two (n, T) tensors."""
        eta1, g = cls.split(f)
        var = torch.exp(-g)
        return eta1 * var, var

    def nll(self, f, y):
        eta1, g = self.split(f)
        mu = eta1 * torch.exp(-g)
        r2 = (y.reshape(mu.shape).to(f) - mu) ** 2
        return 0.5 * (math.log(2 * math.pi) - g + torch.exp(g) * r2).sum(-1)

    def residual(self, f, y):
        eta1, g = self.split(f)
        mu = eta1 * torch.exp(-g)
        y = y.reshape(mu.shape).to(f)
        # ∂/∂η₁ = μ − y; ∂/∂g = −½ + ½ e^g (y² − μ²)
        return torch.cat([mu - y, 0.5 * (torch.exp(g) * (y**2 - mu**2) - 1)], -1)

    def sqrt_hessian(self, f):
        eta1, g = self.split(f)
        n, T = eta1.shape
        sigma = torch.exp(-0.5 * g)
        mu = eta1 * sigma**2
        S = f.new_zeros(n, 2 * T, 2 * T)
        t = torch.arange(T, device=f.device)
        S[:, t, t] = sigma
        S[:, T + t, t] = -mu / sigma
        S[:, T + t, T + t] = -math.sqrt(0.5)
        return S


def gaussian_log_likelihood(sse, n, sigma):
    """Total Gaussian log-likelihood from per-output sums of squared errors.

    Parameters
    ----------
    sse : tensor of shape (C,)
        Σ_n (y_nc − f_nc)² per output.
    n : int
        Number of rows.
    sigma : tensor of shape () or (C,)
        Observation noise per output (broadcast).
    """
    sigma = sigma.expand_as(sse)
    return (
        -0.5 * n * sse.numel() * math.log(2 * math.pi)
        - n * torch.log(sigma).sum()
        - 0.5 * (sse / sigma**2).sum()
    )


def _zero_labels(f):
    return f.new_zeros(f.shape[0], dtype=torch.long)


LIKELIHOODS = {"categorical": Categorical, "bernoulli": Bernoulli, "multilabel": Multilabel,
               "gaussian": Gaussian, "heteroscedastic": HeteroscedasticGaussian}


def get(likelihood):
    """The likelihood object of a name (an object is returned as it is)."""
    if isinstance(likelihood, _Likelihood):
        return likelihood
    try:
        return LIKELIHOODS[likelihood]()
    except KeyError:
        raise ValueError(f"unknown likelihood {likelihood!r}; one of {sorted(LIKELIHOODS)}") \
            from None
