"""The default MLP and the preparation of a skorch net for MAP training.

sklaplace trains a copy of the user's net on exactly this objective, per batch:

    mean_i(−log p(y_i | f(x_i))) / T + δ/(2N) · ‖θ‖²

(the summed log joint divided by N), with the exact likelihood selected by the
net's criterion: ``CrossEntropyLoss`` → categorical, ``BCEWithLogitsLoss`` →
Bernoulli with one logit, ``MSELoss`` → Gaussian with the noise ``sigma_noise``,
:class:`HeteroscedasticGaussianNLLLoss` → Gaussian with a noise per row (natural
parameters).
The criterion is replaced by :class:`MAPLoss`, which adds the prior itself, so
an optimizer ``weight_decay`` would count the prior twice and is refused.

With row weights w_i (``sample_weight``; W = Σ_i w_i) the objective per batch is

    mean_i(w_i · N/W · −log p(y_i | f(x_i))) / T + δ/(2W) · ‖θ‖²

whose full-data form is (Σ_i w_i·nll_i / T + δ/2 · ‖θ‖²) / W: the weighted log
joint with N replaced by W, so integer weights train towards the MAP of the
duplicated rows.  The normalized weights w_i·N/W travel as an extra last column
of y and :class:`MAPLoss` (``sample_weight=True``) splits them off; without
weights nothing changes.
"""

import contextlib
import inspect
import itertools

import numpy as np
import torch
from skorch import NeuralNet
from torch import nn

from . import likelihoods, optim, progress
from .convergence import fit_net, warn_not_converged
from .threads import seeded
from .workflow import interrupts_recorded

DIVERGENCE_FACTOR = 1e3  # final / initial training loss beyond which training diverged



class HeteroscedasticGaussianNLLLoss(nn.Module):
    """Gaussian negative log-likelihood of natural-parameter outputs (mean over rows).

    The criterion of a skorch net for ``LaplaceRegressor(noise="heteroscedastic")``:
    the module returns (n, 2·T) values for T targets, per target η₁ = μ/σ² in the first
    T columns and the log precision −log σ² (η₂ = −½·exp of it) in the last T.
    ``torch.nn.GaussianNLLLoss`` takes a mean and a variance instead; sklaplace
    replaces this criterion by its own MAP loss of the same likelihood.
    """

    def forward(self, y_pred, y_true):
        f = y_pred.reshape(y_pred.shape[0], -1)
        return likelihoods.get("heteroscedastic").nll(f, y_true).mean()


CRITERIA = {
    nn.CrossEntropyLoss: "categorical",
    nn.BCEWithLogitsLoss: "bernoulli",
    nn.MSELoss: "gaussian",
    HeteroscedasticGaussianNLLLoss: "heteroscedastic",
}


class MLP(nn.Module):
    """Fully connected tanh network: ``n_features → hidden… → n_outputs``.

    The default net of the Laplace estimators (public as ``sklaplace.nets.MLP``).

    Parameters
    ----------
    n_features : int, default=1
        Input features.
    n_outputs : int, default=1
        Outputs (logits or regression targets).
    hidden_layer_sizes : tuple of int, default=(50,)
        Widths of the hidden layers, each followed by tanh.
    """

    def __init__(self, n_features=1, n_outputs=1, hidden_layer_sizes=(50,)):
        super().__init__()
        sizes = [n_features, *hidden_layer_sizes]
        layers = []
        for d_in, d_out in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(d_in, d_out), nn.Tanh()]
        layers.append(nn.Linear(sizes[-1], n_outputs))
        self.layers = nn.Sequential(*layers)

    def forward(self, X):
        return self.layers(X)


class MAPLoss(nn.Module):
    """Negative log joint per row: likelihood / T plus the Gaussian prior / N.

    The prior precision is a scalar or one value per parameter (flattened in
    ``module.named_parameters()`` order); the parameters are attached after
    the net is initialized with :meth:`attach` (a plain list, not registered,
    so skorch's optimizer does not see them twice).

    With ``sample_weight=True`` the last column of ``y_true`` holds each row's
    weight, and the data term is the batch mean of weight × nll (``n_train`` is
    then the total weight; see the module docstring).

    ``prior`` (continual learning, :class:`sklaplace._laplace.continual.TaskPrior`): the
    prior N(θ*_{t−1}, (s·H + δ)⁻¹) of a later task instead of N(0, δ⁻¹); the
    prior term is then ``prior.penalty(θ, δ) / N``.
    """

    def __init__(self, likelihood="categorical", n_train=1, temperature=1.0, sigma_noise=1.0,
                 prior_precision=1.0, sample_weight=False, prior=None):
        super().__init__()
        self.prior = prior
        self.sample_weight = sample_weight
        self.likelihood = likelihoods.get(likelihood)
        self.n_train = n_train
        self.temperature = temperature
        self.sigma_noise = torch.as_tensor(sigma_noise, dtype=torch.float64)
        self.prior_precision = torch.as_tensor(prior_precision, dtype=torch.float64)
        self._params = []

    def attach(self, module):
        self._params = [p for p in module.parameters() if p.requires_grad]
        return self

    def data_nll(self, y_pred, y_true):
        f = y_pred.reshape(y_pred.shape[0], -1)
        self.n_outputs_ = f.shape[1]  # read by the convergence rule (its log σ terms)
        if self.sample_weight:
            y_true, weight = self.likelihood.split_weight(y_true)
        nll = self.likelihood.noisy_nll(f, y_true, self.sigma_noise)
        return (nll * weight.to(f)).mean() if self.sample_weight else nll.mean()

    def prior_term(self):
        if not self._params:
            return 0.0
        theta = torch.cat([p.reshape(-1) for p in self._params])
        if self.prior is not None:
            return self.prior.penalty(theta, self.prior_precision) / self.n_train
        cached = self.__dict__.get("_delta_cache")
        if (cached is None or cached[0] is not self.prior_precision
                or cached[1].device != theta.device):
            cached = (self.prior_precision, self.prior_precision.to(theta))
            self._delta_cache = cached  # one copy per device, not one per batch
        delta = cached[1]
        return 0.5 * (delta * theta**2).sum() / self.n_train

    def forward(self, y_pred, y_true):
        return self.data_nll(y_pred, y_true) / self.temperature + self.prior_term()


def likelihood_of(net):
    """The likelihood name a skorch net's criterion stands for."""
    crit = net.criterion
    cls = crit if isinstance(crit, type) else type(crit)
    if cls is MAPLoss:
        params = net.get_params()
        return params.get("criterion__likelihood", "categorical")
    for base, name in CRITERIA.items():
        if issubclass(cls, base):
            return name
    raise ValueError(
        f"The net's criterion {cls.__name__} has no likelihood sklaplace knows; "
        "criterion must be CrossEntropyLoss, BCEWithLogitsLoss, MSELoss or "
        "sklaplace.nets.HeteroscedasticGaussianNLLLoss "
        "(skorch's default NLLLoss on probabilities is not supported: output logits)."
    )


def criterion_settings(net):
    """Settings of the net's criterion that change its likelihood (class ``weight``,
    ``pos_weight``, ``label_smoothing``, ...): sklaplace's loss and curvature use the
    criterion's class alone, so these would be ignored. ``reduction`` is harmless."""
    crit = net.criterion
    cls = crit if isinstance(crit, type) else type(crit)
    if cls is MAPLoss:
        return []
    defaults = inspect.signature(cls).parameters
    found = []
    for key, value in net.get_params().items():
        name = key[len("criterion__"):]
        if not key.startswith("criterion__") or name in ("reduction", "ignore_index"):
            continue  # the loss is summed; the encoded labels are 0 .. C - 1
        default = defaults[name].default if name in defaults else inspect.Parameter.empty
        scalar = isinstance(value, (bool, int, float, str))
        if value is None or (scalar and value == default):
            continue
        found.append(key)
    if not isinstance(crit, type):  # an instance: its own tensors and options
        found += [name for name in ("weight", "pos_weight")
                  if getattr(crit, name, None) is not None]
        if getattr(crit, "label_smoothing", 0.0):
            found.append("label_smoothing")
    return found


def check_no_weight_decay(net):
    """Refuse a non-zero optimizer weight decay: sklaplace adds the prior itself."""
    params = net.get_params()
    decay = params.get("optimizer__weight_decay")
    if decay is None:
        opt = net.optimizer
        try:
            default = inspect.signature(opt).parameters.get("weight_decay")
        except (TypeError, ValueError):
            default = None
        decay = 0 if default is None or default.default is inspect.Parameter.empty else default.default
    groups = params.get("optimizer__param_groups") or []
    decays = [decay] + [g[1].get("weight_decay", 0) for g in groups if len(g) > 1]
    if any(d for d in decays):
        raise ValueError(
            f"The net's optimizer has weight_decay={max(decays)}; set it to 0. sklaplace adds "
            "the Gaussian prior (prior_precision) to the loss itself, and weight decay "
            "would count it twice."
        )


def check_device_name(device, what="The net's device"):
    """Refuse a device torch cannot use here (unknown name, CUDA absent), naming it."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{what} must be a torch device such as 'cpu' or 'cuda', got "
                         f"{device!r}.") from error
    if parsed.type == "cuda":
        available = torch.cuda.is_available()
        if not available or (parsed.index is not None
                             and parsed.index >= torch.cuda.device_count()):
            raise ValueError(
                f"{what} is {device!r} but torch has no CUDA device of that index here "
                f"(torch {torch.__version__}, cuda available: {available}, "
                f"{torch.cuda.device_count() if available else 0} device(s)); use device='cpu'."
            )
    elif parsed.type != "cpu":
        raise ValueError(f"{what} must be 'cpu' or a CUDA device, got {device!r}.")


def check_device(net):
    """Refuse a CUDA device when torch has no CUDA, naming the device."""
    check_device_name(net.get_params().get("device", "cpu") or "cpu")


def module_device(module):
    """The device of a module's first parameter (or buffer); the CPU for neither."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


class RowSlices:
    """skorch's training iterator of the default MLP: contiguous row slices of the data.

    The default MLP trains without shuffling, so its batches are the rows 0…B−1, B…2B−1,
    … of every epoch: the same tensors as ``DataLoader``'s, which indexes each row of
    skorch's ``Dataset`` and stacks them again (about a quarter of a small fit's
    training time, 7 µs a row), and without its per-epoch draw from torch's global
    generator (a worker seed no one uses here). ``shuffle=True`` is refused.
    """

    def __init__(self, dataset, batch_size=128, shuffle=False, **kwargs):
        if shuffle:
            raise ValueError("RowSlices yields the rows in order; use torch's DataLoader "
                             "(iterator_train) to shuffle.")
        self.X, self.y = dataset.X, dataset.y
        self.batch_size = len(self.X) if batch_size in (None, -1) else int(batch_size)

    def __len__(self):
        return -(-len(self.X) // self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.X), self.batch_size):
            rows = slice(start, start + self.batch_size)
            yield self.X[rows], self.y[rows]


def default_net(n_features, n_outputs, hidden_layer_sizes, max_epochs, lr, batch_size, verbose=0,
                device="cpu", solver="adam"):
    """The default MLP as an uninitialized skorch net.

    ``solver="adam"``: minibatch Adam (``lr``, ``batch_size``); ``"lbfgs"``: full-batch
    L-BFGS with a strong Wolfe line search, one iteration per epoch (``lr`` and
    ``batch_size`` unused), deterministic, on the same objective.
    """
    if solver == "lbfgs":
        optimizer, lr, batch_size = optim.LBFGS, 1.0, -1
        # max_eval: torch's default (max_iter·5/4 = 1) leaves the line search no second
        # evaluation; a first step that fails the Armijo test would then return t = 0 and
        # every later epoch repeat it (the loss stuck)
        extra = {"optimizer__max_iter": 1, "optimizer__max_eval": 25,
                 "optimizer__line_search_fn": "strong_wolfe"}
    else:
        optimizer, extra = optim.Adam, {}
    return NeuralNet(
        module=MLP,
        module__n_features=n_features,
        module__n_outputs=n_outputs,
        module__hidden_layer_sizes=tuple(hidden_layer_sizes),
        criterion=MAPLoss,
        optimizer=optimizer,
        lr=lr,
        max_epochs=max_epochs,
        batch_size=batch_size,
        train_split=None,
        iterator_train=RowSlices,
        # skorch's PrintLog formats its epoch table even when it prints nothing (about
        # a tenth of a small fit's training): kept only where it is shown (verbose ≥ 1)
        **({} if verbose else {"callbacks__print_log": None}),
        verbose=int(verbose),
        device=device,
        **extra,
    )


def module_dtype(module):
    for p in module.parameters():
        return p.dtype
    return torch.float32


def with_weight_column(y, sample_weight):
    """Targets ``y`` (tensor) with the normalized weights w·N/W as a last column.

    What :class:`MAPLoss` with ``sample_weight=True`` reads (n_train = W = Σ w):
    int64 labels become float64 (exact), float targets keep their dtype.
    """
    w = np.asarray(sample_weight, dtype=np.float64)
    column = torch.as_tensor(w * (len(w) / float(w.sum())))
    dtype = torch.float64 if not y.is_floating_point() else y.dtype
    return torch.cat([y.reshape(len(y), -1).to(dtype), column.to(dtype)[:, None]], 1)


def draws_only_at_initialization(net):
    """Whether training ``net`` draws nothing from torch's global generator.

    True for sklaplace's own :class:`MLP` (no dropout) trained without shuffling;
    any other module may draw in its forward pass (dropout, noise).
    """
    return net.module is MLP and not getattr(net, "iterator_train__shuffle", False)


def train_map(net, X, y, *, likelihood, temperature, sigma_noise, prior_precision, seed,
              callbacks=(), sample_weight=None, prior=None, init_module=None,
              default_dtype=None, tol=None, n_iter_no_change=10):
    """Train the (cloned, uninitialized) skorch ``net`` to the MAP in place.

    ``default_dtype`` is not read: passed by the estimators (``torch.get_default_dtype()``
    as a string) so that a ``memory`` cache keys on it, as the new module's dtype does.

    ``X`` (float numpy) is cast to the module's parameter dtype; ``y`` is int64
    (categorical), float (Bernoulli) or 2-D float (Gaussian).  ``sample_weight``
    (non-negative, positive sum) weights the rows' likelihood terms (module docstring).
    Continual learning: ``prior`` replaces the prior term (see :class:`MAPLoss`) and
    training starts from the weights of ``init_module`` (a module of the same
    architecture); the prior is dropped from the trained net's criterion afterwards.
    ``tol`` / ``n_iter_no_change``: the convergence rule of :mod:`.convergence`
    (``tol=None``: all ``max_epochs`` epochs); ``ConvergenceWarning`` when not converged.
    """
    weighted = sample_weight is not None
    if weighted:
        sample_weight = np.asarray(sample_weight, dtype=np.float64)
        total = float(sample_weight.sum())
    net.set_params(
        criterion=MAPLoss,
        criterion__likelihood=likelihood,
        criterion__n_train=total if weighted else X.shape[0],
        criterion__temperature=temperature,
        criterion__sigma_noise=sigma_noise,
        criterion__prior_precision=prior_precision,
        train_split=None,
    )
    if weighted:
        net.set_params(criterion__sample_weight=True)
    if prior is not None:
        net.set_params(criterion__prior=prior)
    if callbacks:
        net.set_params(callbacks=list(net.callbacks or []) + list(callbacks))
    callbacks_param, shown = net.callbacks, progress.epoch_callbacks()  # verbose: the epochs
    if shown:
        net.set_params(callbacks=list(net.callbacks or []) + shown)
    # Initialization (and the training of any net but sklaplace's own MLP without
    # shuffling: shuffling, dropout) draws from torch's global generator under this fit's
    # seed and a process-wide lock, so that fits in threads cannot interleave their draws.
    with contextlib.ExitStack() as rng:
        rng.enter_context(seeded(seed))
        net.initialize()
        if init_module is not None:
            net.module_.load_state_dict(init_module.state_dict())
        net.criterion_.attach(net.module_)
        dtype = module_dtype(net.module_)
        Xt = torch.tensor(np.ascontiguousarray(X)).to(dtype)
        yt = torch.tensor(likelihoods.get(likelihood).train_targets(y))
        if yt.is_floating_point():
            yt = yt.to(dtype)
        data = (Xt, yt)
        if weighted:
            # The normalized weights w·N/W as a last column of y (float64 for labels, so
            # that they stay exact); a Dataset, so that skorch's classifiers take a 2-D y.
            from skorch.dataset import Dataset

            data = (Dataset(Xt, with_weight_column(yt, sample_weight)), None)
        if draws_only_at_initialization(net):
            rng.close()  # nothing more to draw: other threads' fits need not wait
        try:
            with interrupts_recorded() as interrupted:  # skorch swallows Ctrl-C
                converged = fit_net(net, *data, tol, n_iter_no_change)
        except KeyError as error:
            if "valid" not in str(error):
                raise
            raise ValueError(
                f"A callback of the net needs validation scores ({error}), but sklaplace trains "
                "on all rows (train_split=None): the prior, the curvature and the evidence are "
                "all over the full training data. Monitor the training loss instead (e.g. "
                "EarlyStopping(monitor='train_loss')), or hold out validation data yourself."
            ) from error
    progress.drop_callbacks(net, shown, callbacks_param)
    if interrupted:
        raise KeyboardInterrupt(
            "MAP training was interrupted (Ctrl-C); the estimator keeps its earlier state.")
    net.criterion_.attach(nn.Module())  # drop the references: nothing to pickle twice
    if prior is not None:  # the earlier tasks' curvature is the estimator's, not the net's
        net.criterion_.prior = None
        net.__dict__.pop("criterion__prior", None)
    if weighted and hasattr(net, "classes_inferred_"):  # skorch read them off the weighted y
        net.classes_inferred_ = np.unique(np.asarray(y))
    losses = [h.get("train_loss", 0.0) for h in net.history]
    finite = all(np.isfinite(losses)) and all(
        torch.isfinite(p).all() for p in net.module_.parameters()
    )
    # A loss that ends 1000 times above where it started has not found a MAP either
    # (Adam with a huge lr keeps weights finite but meaningless).
    exploded = finite and losses[-1] > DIVERGENCE_FACTOR * max(abs(losses[0]), 1.0)
    if not finite or exploded:
        what = "non-finite loss or weights" if not finite else (
            f"the loss grew from {losses[0]:.3g} to {losses[-1]:.3g}")
        raise ValueError(
            f"MAP training diverged ({what}). Lower the learning rate (lr), scale the "
            "features (e.g. StandardScaler) or raise prior_precision."
        )
    warn_not_converged(net, tol, n_iter_no_change, converged)
    return net
