"""UCI benchmark runner: the papers' regression and classification tables, ours beside theirs.

Two protocols (DIGEST §2.2–2.3, the printed values live in :mod:`.paper_tables`):

``regression`` — marginal-likelihood paper, Table C2 / C3
    The eight Hernández-Lobato & Adams sets with their 20 fixed 90/10
    train/test splits.  One hidden layer of 50 ReLU units, inputs standardized
    on the training set, targets standardized inside the estimator
    (``normalize_y=True``); every NLL is in the original target units.

    * ``map``: δ from a grid of ``n_deltas`` log-spaced values in [1e-2, 1e2]
      chosen on a random ``val_fraction`` hold-out of the training set
      (validation NLL with σ = the validation RMSE of that net, so the choice
      is by validation RMSE), then retrained on the whole training set with
      the chosen δ; the MAP predictive N(f(x), σ²) uses σ from the hold-out.
    * ``la_full`` / ``la_kron`` / ``la_diag``: post-hoc Laplace over all
      weights on that *same* retrained MAP net (``FrozenEstimator``), GGN,
      layer-wise prior precision and σ tuned by the evidence, GLM predictive.
    * ``la_full_peer`` / ``la_kron_peer``: the same post-hoc LA by laplace-torch
      (the peer; optional, an error record without it) on a float64 copy of that
      same net and the same standardized targets: ``Laplace(model, "regression",
      subset_of_weights="all", hessian_structure="full" / "kron")``, layer-wise δ and
      σ by Adam on its ``log_marginal_likelihood`` (``PEER_STEPS`` steps, lr
      ``PEER_LR``, from the MAP's δ and σ = std(y), as ours), GLM predictive
      N(f, f_var + σ²) — laplace-torch returns f_var alone, σ² is added here.
      laplace-torch 0.3's Kron evidence is not differentiable in σ (``math.pow``,
      see :func:`differentiable_kron_scaling`); the runner patches that for tuning.
    * ``online_full`` / ``online_kron`` / ``online_diag``: a fresh net trained
      with ``hyperparameter_tuning="online"`` (Immer et al. 2021 Alg. 1,
      layer-wise δ and σ), GLM predictive of that structure.  No validation data.
    * ``la_full_scalar`` / ``online_full_scalar``: the same with one scalar δ
      (``prior_structure="scalar"``).

``classification`` — GLM-predictive paper, Table 1 / B2
    glass, ionosphere, vehicle, satellite, breast cancer (both copies), digits,
    waveform; 10 stratified 70/15/15 splits; 2 hidden layers × 50 tanh.  For
    every δ of the paper's grid (10 log-spaced values in [1e-2, 1e2]; [1e-1, 1e2]
    for digits and satellite) one MAP net is trained; each method then picks
    its own δ on validation NLL, as in the paper.

    * ``map``: softmax of the MAP net.
    * ``glm``: full-GGN Laplace over all weights at δ, GLM predictive (probit).
    * ``glm_diag``: the same with the diagonal GGN.
    * ``bnn``: the full-GGN posterior, predictive by sampling weights and running
      the net (``pred_type="nn"``, 100 samples).
    * ``la_evidence``: no validation data — ``glm`` at the δ of the grid with
      the largest Laplace log evidence (net trained and LA fitted at that δ):
      model selection by the marginal likelihood instead of validation NLL.
    * ``online_kron``: no validation data and no grid — a fresh net trained with
      ``hyperparameter_tuning="online"`` (layer-wise δ, Kronecker GGN over all
      weights), GLM predictive (probit).
    * ``glm_refine`` / ``glm_refine_diag``: the GLM posterior refined at δ by
      natural-gradient VI in the linearized model (``refine="vi"``, full /
      diagonal covariance, as the paper's "glm refine" columns), GLM predictive
      (probit); δ by validation NLL.
    * ``glm_refine_laplace`` / ``glm_refine_laplace_diag``: the same with
      ``refine="laplace"`` (the linearized model's mode and its exact LA).
    * ``glm_refine_elbo`` / ``glm_refine_diag_elbo``: no validation data — the VI
      fit of ``glm_refine`` / ``glm_refine_diag`` at the δ of the grid with the largest
      ELBO (the lower bound on the GLM's log marginal likelihood that VI maximizes); the
      same fits as those rows when both are run.
    * ``gp``: the functional Laplace (``pred_type="gp"``) on all training rows,
      which equals the full GLM predictive; δ by validation NLL.
    * ``glm_refine_mc`` / ``glm_refine_diag_mc`` / ``gp_mc``: the same fits as those rows,
      predicted by Monte Carlo on the GLM's logits (``link_approx="mc"``, ``MC_SAMPLES``
      draws), as the paper evaluates its predictives, instead of the probit approximation;
      δ by validation NLL of that predictive.

Training (both protocols): Adam with learning rate ``lr`` and a cosine decay to
0, ``steps`` optimizer steps with mini-batches of ``min(N, batch_size)`` rows
(so full-batch on the small sets); the MAP objective adds the prior as
sklaplace defines it (δ/(2N)‖θ‖² per row).  The papers train 10,000 steps with
lr 1e-3; the defaults here are chosen to fit a 2-core machine (see --help).

Every (protocol, data set, method, split) result is one JSON file under
``<cache-dir>/<protocol>-<config hash>/``; ``--resume`` skips the cached ones,
``--report`` only builds the tables from the cache.
"""

import argparse
import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import math
import sys
import time
import warnings
import zlib
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.preprocessing import LabelEncoder, StandardScaler
from torch import nn

from . import paper_tables
from .data import (
    UCI_REGRESSION,
    classification_splits,
    load_uci_classification,
    load_uci_regression,
    make_waveform,
    n_splits_uci_regression,
)

HELP = "UCI regression / classification tables of the papers, ours beside theirs."

PROTOCOLS = ("regression", "classification")
REGRESSION_METHODS = ("map", "la_full", "la_full_scalar", "la_kron", "la_diag",
                      "online_full", "online_full_scalar", "online_kron", "online_diag")
#: laplace-torch on the same nets: run only when named in ``--methods``.
PEER_METHODS = ("la_full_peer", "la_kron_peer")
CLASSIFICATION_METHODS = ("map", "glm", "glm_diag", "bnn", "la_evidence", "online_kron",
                          "glm_refine", "glm_refine_diag", "glm_refine_laplace",
                          "glm_refine_laplace_diag", "gp", "glm_refine_elbo",
                          "glm_refine_diag_elbo", "glm_refine_mc", "glm_refine_diag_mc",
                          "gp_mc")
#: The LA of each δ's net with these estimator settings (``FrozenEstimator`` of the net).
GLM_VARIANTS = MappingProxyType({
    "glm_refine": dict(hessian_structure="full", refine="vi"),
    "glm_refine_diag": dict(hessian_structure="diag", refine="vi"),
    "glm_refine_laplace": dict(hessian_structure="full", refine="laplace"),
    "glm_refine_laplace_diag": dict(hessian_structure="diag", refine="laplace"),
    "gp": dict(pred_type="gp", hessian_structure="diag"),
})
#: No validation data: the VI fit of the named method at the δ of the grid with the largest
#: ELBO (its lower bound on the GLM's log marginal likelihood), as ``la_evidence`` for ``glm``.
ELBO_METHODS = MappingProxyType({"glm_refine_elbo": "glm_refine",
                                 "glm_refine_diag_elbo": "glm_refine_diag"})
#: The same fits as the named row, predicted by Monte Carlo on the logits (``link_approx="mc"``,
#: ``MC_SAMPLES`` draws), the GLM paper's predictive, instead of the probit approximation.
MC_METHODS = MappingProxyType({"glm_refine_mc": "glm_refine",
                               "glm_refine_diag_mc": "glm_refine_diag", "gp_mc": "gp"})
MC_SAMPLES = 1000
CLASSIFICATION_DATASETS = ("glass", "ionosphere", "vehicle", "breast_cancer",
                           "breast_cancer_wdbc", "waveform", "digits", "satellite")
METHODS = {"regression": REGRESSION_METHODS, "classification": CLASSIFICATION_METHODS}
#: Methods run only when asked for (``--methods``), not by default.
OPTIONAL_METHODS = {"regression": PEER_METHODS, "classification": ()}
DATASETS = {"regression": UCI_REGRESSION, "classification": CLASSIFICATION_DATASETS}
PROTOCOL_SPLITS = {"regression": 20, "classification": 10}
QUICK_DATASETS = {"regression": ("yacht", "boston"), "classification": ("glass", "ionosphere")}
#: Sets whose full GGN over all weights (P ≈ 4.8k–6.3k) costs ~100 s per fit on one core:
#: a coarser δ grid, ``Config.n_deltas_large`` values in [1e-1, 1e2].
LARGE_DATASETS = ("digits", "satellite")
WAVEFORM_ROWS = 1000  # Table B1
NLL_FLOOR = 1e-12


# ----------------------------------------------------------------------------- networks


class RegressionMLP(nn.Module):
    """1 hidden layer × 50 ReLU (marginal-likelihood paper, UCI regression)."""

    def __init__(self, n_features=1, n_outputs=1, width=50):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(n_features, width), nn.ReLU(),
                                    nn.Linear(width, n_outputs))

    def forward(self, X):
        return self.layers(X)


class ClassificationMLP(nn.Module):
    """2 hidden layers × 50 tanh (GLM-predictive paper, Table 1)."""

    def __init__(self, n_features=1, n_outputs=2, width=50):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(n_features, width), nn.Tanh(),
                                    nn.Linear(width, width), nn.Tanh(),
                                    nn.Linear(width, n_outputs))

    def forward(self, X):
        return self.layers(X)


class TensorBatches:
    """A skorch iterator that slices tensors instead of collating rows one by one.

    skorch's default ``DataLoader`` indexes and collates every row separately,
    about 20 µs per row and epoch on this machine — far more than the
    arithmetic of a 50-unit MLP.  Slicing whole batches makes full-batch
    training ~5× faster.  Shuffling draws from torch's global generator, which
    sklaplace seeds for each fit.
    """

    def __init__(self, dataset, batch_size=128, shuffle=False, **kwargs):
        self.X, self.y = dataset.X, dataset.y
        self.n = len(self.X)
        self.batch_size = self.n if batch_size in (None, -1) else int(batch_size)
        self.shuffle = shuffle

    def __len__(self):
        return -(-self.n // self.batch_size)

    def __iter__(self):
        order = torch.randperm(self.n) if self.shuffle else None
        for start in range(0, self.n, self.batch_size):
            if order is None:
                idx = slice(start, start + self.batch_size)
            else:
                idx = order[start:start + self.batch_size]
            yield self.X[idx], (None if self.y is None else self.y[idx])


def make_net(protocol, n_features, n_outputs, n_train, cfg):
    """An uninitialized skorch net for the protocol (Adam, cosine learning-rate decay)."""
    from skorch import NeuralNet
    from skorch.callbacks import LRScheduler

    batch = min(n_train, cfg.batch_size)
    epochs = max(1, math.ceil(cfg.steps / math.ceil(n_train / batch)))
    regression = protocol == "regression"
    return NeuralNet(
        module=RegressionMLP if regression else ClassificationMLP,
        module__n_features=n_features,
        module__n_outputs=n_outputs,
        criterion=nn.MSELoss if regression else nn.CrossEntropyLoss,
        optimizer=torch.optim.Adam,
        lr=cfg.lr,
        max_epochs=epochs,
        batch_size=batch,
        train_split=None,
        iterator_train=TensorBatches,
        iterator_train__shuffle=True,
        iterator_valid=TensorBatches,
        callbacks=[("cosine", LRScheduler(policy="CosineAnnealingLR", T_max=epochs))],
        verbose=0,
    )


# ----------------------------------------------------------------------------- config


#: Per-data-set seed offsets, pinned by name (the values the published tables were run
#: with): adding or reordering data sets never changes another set's seeds. A set not
#: listed gets an offset from its name.
DATASET_SEEDS = MappingProxyType({
    "boston": 0, "concrete": 1, "energy": 2, "kin8nm": 3, "naval": 4, "power": 5, "wine": 6,
    "yacht": 7, "glass": 0, "ionosphere": 1, "vehicle": 2, "breast_cancer": 3,
    "breast_cancer_wdbc": 4, "waveform": 5, "digits": 6, "satellite": 7,
})


def dataset_seed(name):
    """Seed offset of a data set, by its name (see :data:`DATASET_SEEDS`)."""
    if name in DATASET_SEEDS:
        return DATASET_SEEDS[name]
    return 100 + zlib.crc32(name.encode()) % 900


@functools.lru_cache(maxsize=1)
def source_hash():
    """Hash of the source of sklaplace (estimators) and of this runner, for the cache key."""
    import sklaplace

    package = Path(sklaplace.__file__).resolve().parent
    here = Path(__file__).resolve().parent
    files = [(p, p.relative_to(package.parent)) for p in sorted(package.rglob("*.py"))]
    files += [(here / name, Path("benchmarks") / name) for name in ("uci.py", "data.py")]
    digest = hashlib.sha1()
    for path, name in files:
        digest.update(name.as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class Config:
    """Settings that determine the results (hashed into the cache path)."""

    steps: int = 2000
    lr: float = 1e-2
    batch_size: int = 512
    n_deltas: int = 10
    n_deltas_large: int = 4
    val_fraction: float = 0.2
    online_updates: int = 10
    online_steps: int = 50
    bnn_samples: int = 100
    seed: int = 0

    def tag(self, protocol):
        """Cache directory name: the protocol, these settings and the code that computes
        the results (a change of any estimator module starts a new cache)."""
        blob = json.dumps({"protocol": protocol, "code": source_hash(),
                           **dataclasses.asdict(self)}, sort_keys=True)
        return f"{protocol}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"

    def deltas(self, protocol, dataset):
        if dataset in LARGE_DATASETS:
            return np.logspace(-1.0, 2.0, self.n_deltas_large)
        return np.logspace(-2.0, 2.0, self.n_deltas)


QUICK = dict(steps=150, n_deltas=3, n_deltas_large=2, online_updates=2, online_steps=20,
             bnn_samples=30)


# ----------------------------------------------------------------------------- cache


class Cache:
    """One JSON file per (protocol, data set, method, split)."""

    def __init__(self, root, cfg, tags=None):
        self.root = Path(root)
        self.cfg = cfg
        self.tags = dict(tags or {})

    def tag(self, protocol):
        """The directory of a protocol's results: the config's hash, or a tag given
        explicitly (``--cache-tag``, to report a cache written by another code version)."""
        return self.tags.get(protocol) or self.cfg.tag(protocol)

    def path(self, protocol, dataset, method, split):
        return self.root / self.tag(protocol) / dataset / method / f"split_{split:02d}.json"

    def get(self, protocol, dataset, method, split):
        path = self.path(protocol, dataset, method, split)
        if not path.is_file():
            return None
        return json.loads(path.read_text())

    def put(self, protocol, dataset, method, split, result):
        path = self.path(protocol, dataset, method, split)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"protocol": protocol, "dataset": dataset, "method": method, "split": split,
                  "config": dataclasses.asdict(self.cfg), **result}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=1, default=_jsonable))
        tmp.replace(path)

    def results(self, protocol):
        base = self.root / self.tag(protocol)
        return [json.loads(p.read_text()) for p in sorted(base.glob("*/*/split_??.json"))]

    def put_error(self, protocol, dataset, method, split, message):
        """An error is stored beside the results (``split_XX.error.json``), never as one:
        ``--resume`` retries it, the report lists it."""
        path = self.path(protocol, dataset, method, split).with_suffix(".error.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"protocol": protocol, "dataset": dataset, "method": method,
                                    "split": split, "error": message}, indent=1))

    def clear_error(self, protocol, dataset, method, split):
        self.path(protocol, dataset, method, split).with_suffix(".error.json").unlink(
            missing_ok=True)

    def errors(self, protocol):
        base = self.root / self.tag(protocol)
        return [json.loads(p.read_text()) for p in sorted(base.glob("*/*/split_*.error.json"))]


class SplitsCSV:
    """Cells read back from per-split CSVs (``--splits-csv`` files), for ``--report
    --from-splits-csv``: one table from the cells of several runs, code versions or
    caches.  A (protocol, data set, method, split) in a later file replaces the same cell
    of an earlier one."""

    def __init__(self, paths):
        self.paths = [Path(p) for p in paths]

    def tag(self, protocol):
        return "from " + " + ".join(p.name for p in self.paths)

    def results(self, protocol):
        cells = {}
        for path in self.paths:
            with open(path, newline="") as fh:
                for row in csv.DictReader(fh):
                    if row["protocol"] != protocol:
                        continue
                    cell = {k: (v if k in ("protocol", "dataset", "method")
                                else float(v or "nan"))
                            for k, v in row.items() if k != "prior_precision_all"}
                    cell["split"] = int(cell["split"])
                    cell["prior_precision"] = [float(d) for d in
                                               row["prior_precision_all"].split()]
                    cells[(row["dataset"], row["method"], cell["split"])] = cell
        return [cells[k] for k in sorted(cells)]

    def errors(self, protocol):
        return []


def _jsonable(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# ----------------------------------------------------------------------------- metrics


def gaussian_nll(y, mean, std):
    return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))


def _ece(y, proba, n_bins=10):
    try:
        from sklaplace.metrics import expected_calibration_error
    except ImportError:  # metrics still in progress: the same top-label ECE, uniform bins
        conf = proba.max(1)
        correct = proba.argmax(1) == y
        bins = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], conf, side="left")
        total = 0.0
        for b in range(n_bins):
            m = bins == b
            if m.any():
                total += m.sum() * abs(correct[m].mean() - conf[m].mean())
        return float(total / len(y))
    return float(expected_calibration_error(y, proba, n_bins=n_bins))


def classification_metrics(y, proba):
    """Test NLL, accuracy and ECE (10 bins) for integer labels ``y``."""
    p = np.clip(proba[np.arange(len(y)), y], NLL_FLOOR, None)
    return {"nll": float(-np.mean(np.log(p))),
            "acc": float(np.mean(proba.argmax(1) == y)),
            "ece": _ece(y, proba)}


# ----------------------------------------------------------------------------- regression


def _regression_estimator(net, **params):
    """A ``LaplaceRegressor`` on standardized targets with σ = std(y) at the start.

    ``sigma_noise`` is in the units of the standardized target under ``normalize_y``
    (since 9e83544): 1.0 is a noise as large as std(y), the σ of MAP training and the
    start of tuning.  (Passing std(y) itself, as before that change, would train the
    MAP at σ = std(y)² in the units of y: a prior std(y)² times too strong.)
    """
    from sklaplace import LaplaceRegressor

    return LaplaceRegressor(net, normalize_y=True, sigma_noise=1.0,
                            subset_of_weights="all", **params)


#: joblib.Memory for MAP training (``memory=`` of the estimators), set by :func:`run`, so
#: that re-running a split whose MAP methods are cached does not retrain the δ grid.
MEMORY = None


def regression_data(dataset, split, cfg, data_dir=None):
    """(Xtr, ytr, Xte, yte, seed) of one split: inputs standardized on the training set."""
    Xtr, ytr, Xte, yte = load_uci_regression(dataset, split, data_dir=data_dir)
    scaler = StandardScaler().fit(Xtr)
    Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
    seed = cfg.seed * 100_003 + 1_000 * split + dataset_seed(dataset)
    return Xtr, ytr, Xte, yte, seed


def regression_map(Xtr, ytr, seed, cfg, dataset):
    """The ``map`` method's net: δ from the grid by hold-out NLL, retrained on all rows.

    Returns (the retrained estimator, δ, σ of the hold-out, the grid's (val NLL, δ, σ)).
    The post-hoc methods (``la_*``, ``la_*_peer``) all use this estimator's net.
    """
    d = Xtr.shape[1]
    rng = np.random.RandomState(seed)
    perm = rng.permutation(len(Xtr))
    n_val = max(2, int(round(cfg.val_fraction * len(Xtr))))
    val, sub = perm[:n_val], perm[n_val:]
    grid = []
    for delta in cfg.deltas("regression", dataset):
        est = _regression_estimator(
            make_net("regression", d, 1, len(sub), cfg), prior_precision=delta,
            hyperparameter_tuning=None, hessian_structure="diag", random_state=seed,
            memory=MEMORY,
        ).fit(Xtr[sub], ytr[sub])
        mean = est.predict(Xtr[val])
        sigma = float(np.sqrt(np.mean((ytr[val] - mean) ** 2)))
        grid.append((gaussian_nll(ytr[val], mean, sigma), float(delta), sigma))
    _, delta, sigma_val = min(grid)
    map_est = _regression_estimator(
        make_net("regression", d, 1, len(Xtr), cfg), prior_precision=delta,
        hyperparameter_tuning=None, hessian_structure="diag", random_state=seed,
        memory=MEMORY,
    ).fit(Xtr, ytr)
    return map_est, delta, sigma_val, grid


def run_regression_split(dataset, split, methods, cfg, data_dir=None, log=print):
    """Results {method: {...}} of one split of a UCI regression set."""
    Xtr, ytr, Xte, yte, seed = regression_data(dataset, split, cfg, data_dir)
    d = Xtr.shape[1]
    results = {}

    posthoc = [m for m in methods if m.startswith("la_")]
    if "map" in methods or posthoc:
        t0 = time.perf_counter()
        map_est, delta, sigma_val, grid = regression_map(Xtr, ytr, seed, cfg, dataset)
        mean = map_est.predict(Xte)
        t_map = time.perf_counter() - t0
        if "map" in methods:
            results["map"] = {
                "nll": gaussian_nll(yte, mean, sigma_val),
                "rmse": float(np.sqrt(np.mean((yte - mean) ** 2))),
                "prior_precision": delta, "sigma_noise": sigma_val,
                "val_nll_grid": [g[0] for g in grid], "seconds": t_map,
            }
        for method in posthoc:
            t0 = time.perf_counter()
            if method.endswith("_peer"):
                results[method] = _fit_peer(map_est, method.split("_")[1], delta,
                                            Xtr, ytr, Xte, yte, t0)
                continue
            structure, prior = _structure_and_prior(method)
            est = _regression_estimator(
                FrozenEstimator(map_est.net_), prior_precision=delta,
                prior_structure=prior, hyperparameter_tuning="evidence",
                hessian_structure=structure, random_state=seed,
            )
            results[method] = _fit_and_score(est, Xtr, ytr, Xte, yte, t0,
                                             map_prior_precision=delta)

    for method in [m for m in methods if m.startswith("online_")]:
        t0 = time.perf_counter()
        net = make_net("regression", d, 1, len(Xtr), cfg)
        structure, prior = _structure_and_prior(method)
        est = _regression_estimator(
            net, prior_precision=1.0, prior_structure=prior,
            hyperparameter_tuning="online", hessian_structure=structure,
            online_frequency=max(1, net.max_epochs // cfg.online_updates),
            online_steps=cfg.online_steps, random_state=seed,
        )
        results[method] = _fit_and_score(est, Xtr, ytr, Xte, yte, t0)
    return results


#: laplace-torch's hyperparameter optimization for the ``*_peer`` methods: Adam steps
#: and learning rate on (log δ per parameter tensor, log σ), as in its README.
PEER_STEPS = 300
PEER_LR = 0.1


def peer_laplace(map_est, structure, Xtr, ytr):
    """laplace-torch's LA over all weights of a float64 copy of the ``map`` net, fitted
    on the standardized target the net was trained on (``normalize_y``).

    Returns (the fitted ``Laplace``, mean, std of that standardization).  Needs
    laplace-torch (ImportError otherwise).
    """
    import copy

    from laplace import Laplace
    from sklaplace import LaplaceRegressor
    from torch.utils.data import DataLoader, TensorDataset

    y_mean, y_std = (float(np.ravel(v)[0])
                     for v in getattr(map_est.net_, LaplaceRegressor.TARGET_SCALING))
    model = copy.deepcopy(map_est.net_.module_).double().eval()
    for param in model.parameters():
        param.requires_grad_(True)
    X = torch.as_tensor(Xtr, dtype=torch.float64)
    y = torch.as_tensor((ytr - y_mean) / y_std, dtype=torch.float64).reshape(-1, 1)
    la = Laplace(model, "regression", subset_of_weights="all", hessian_structure=structure)
    la.fit(DataLoader(TensorDataset(X, y), batch_size=min(len(X), 512)))
    return la, y_mean, y_std


def tune_peer(la, delta, sigma=1.0, steps=None, lr=None):
    """Adam on laplace-torch's log marginal likelihood over (log δ per parameter tensor,
    log σ) from (δ, σ), as its README does; sets them on ``la``, returns the objective's
    trace (negative log evidence after each step)."""
    steps = PEER_STEPS if steps is None else steps
    log_prior = torch.full((la.n_layers,), math.log(delta), dtype=torch.float64,
                           requires_grad=True)
    log_sigma = torch.full((1,), math.log(sigma), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([log_prior, log_sigma], lr=PEER_LR if lr is None else lr)
    trace = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = -la.log_marginal_likelihood(log_prior.exp(), log_sigma.exp())
        loss.backward()
        optimizer.step()
        trace.append(loss.item())
    la.prior_precision = log_prior.detach().exp()
    la.sigma_noise = log_sigma.detach().exp()
    return trace


def peer_predict(la, X, y_mean, y_std):
    """(mean, f_var, σ²) of laplace-torch's GLM predictive in the units of y.

    laplace-torch returns the functional variance f_var alone; the predictive
    variance of y is f_var + σ²."""
    f_mu, f_var = la(torch.as_tensor(X, dtype=torch.float64), pred_type="glm")
    mean = f_mu.detach().numpy().reshape(-1) * y_std + y_mean
    f_var = f_var.detach().numpy().reshape(-1) * y_std**2
    return mean, f_var, (float(la.sigma_noise) * y_std) ** 2


@contextlib.contextmanager
def differentiable_kron_scaling():
    """Patch laplace-torch 0.3's Kronecker scaling so that its log evidence is
    differentiable in σ (yields whether it patched).

    ``laplace/utils/matrix.py`` does ``from math import pow`` and scales the Kronecker
    factors by ``pow(1/σ², 1/2)`` (``Kron.__mul__``, ``KronDecomposed.__mul__``):
    ``math.pow`` turns the tensor into a float, so ``log_marginal_likelihood`` of a
    ``KronLaplace`` has the right value but loses the σ-dependence of ½ log det P in
    its gradient (yacht split 0: d log Z / d log σ = −269.0 by autograd, +3.02 by
    finite differences; Adam then stops at σ = 0.20 with log Z = −1094.5, where
    sklaplace finds σ = 1.24 with log Z = −876.9, and the patched laplace-torch the
    same).  For the duration the module's ``pow`` is ``**``, which keeps the graph.
    """
    try:
        import laplace.utils.matrix as matrix
    except ImportError:
        yield False
        return
    original = getattr(matrix, "pow", None)
    if original is not math.pow:  # another version: leave it alone
        yield False
        return
    matrix.pow = lambda base, exponent: base ** exponent
    try:
        yield True
    finally:
        matrix.pow = original


def _fit_peer(map_est, structure, delta, Xtr, ytr, Xte, yte, t0):
    """laplace-torch's post-hoc LA of the ``map`` net (the ``la_*_peer`` methods), results
    in the units of y (mean·s + m, std·s, log Z − N log s)."""
    try:
        import laplace  # noqa: F401
    except ImportError as exc:
        return {"error": f"laplace-torch is not installed ({exc}); pip install laplace-torch",
                "seconds": time.perf_counter() - t0}
    try:
        la, y_mean, y_std = peer_laplace(map_est, structure, Xtr, ytr)
        with differentiable_kron_scaling() as patched:
            trace = tune_peer(la, delta)
        with torch.no_grad():
            log_z = float(la.log_marginal_likelihood())
        mean, f_var, noise = peer_predict(la, Xte, y_mean, y_std)
    except Exception as exc:  # recorded and reported, never silently replaced
        return {"error": _describe(exc), "seconds": time.perf_counter() - t0}
    return {
        "nll": gaussian_nll(yte, mean, np.sqrt(f_var + noise)),
        "rmse": float(np.sqrt(np.mean((yte - mean) ** 2))),
        "prior_precision": la.prior_precision.numpy(),
        "sigma_noise": math.sqrt(noise),
        "log_evidence": log_z - len(Xtr) * math.log(y_std),
        # f_var alone (σ² left out): not a predictive of y, kept for comparison
        "nll_without_noise": gaussian_nll(yte, mean, np.sqrt(f_var)),
        "neg_log_evidence_last_steps": trace[-3:],
        "peer_kron_scaling_patched": patched,
        "seconds": time.perf_counter() - t0,
        "map_prior_precision": delta,
    }


def _structure_and_prior(method):
    """``la_kron`` → ("kron", "layerwise"); ``online_full_scalar`` → ("full", "scalar")."""
    parts = method.split("_")[1:]
    return parts[0], (parts[1] if len(parts) > 1 else "layerwise")


def _fit_and_score(est, Xtr, ytr, Xte, yte, t0, **extra):
    """Fit and score one Laplace regressor; a library error becomes an error record."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(Xtr, ytr)
        return _regression_result(est, Xte, yte, time.perf_counter() - t0, caught, **extra)
    except Exception as exc:  # recorded and reported, never silently replaced
        return {"error": _describe(exc), "seconds": time.perf_counter() - t0}


def _describe(exc):
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(frames)
                  if "sklaplace" in f.filename), "?")
    return f"{type(exc).__name__} at {where}: {str(exc).splitlines()[0][:200]}"


def _regression_result(est, Xte, yte, seconds, caught, **extra):
    mean, std = est.predict(Xte, return_std=True)
    return {
        "nll": gaussian_nll(yte, mean, std),
        "rmse": float(np.sqrt(np.mean((yte - mean) ** 2))),
        "prior_precision": est.prior_precision_,
        "sigma_noise": est.sigma_noise_,
        "log_evidence": est.log_evidence_,
        "warnings": sorted({str(w.message)[:120] for w in caught}),
        "seconds": seconds,
        **extra,
    }


# ----------------------------------------------------------------------------- classification


def load_classification(dataset, data_dir=None):
    """(X, integer labels) of a classification set; waveform with the paper's N = 1000."""
    if dataset == "waveform":
        X, y = make_waveform(n_samples=WAVEFORM_ROWS, random_state=0)
    else:
        X, y = load_uci_classification(dataset, data_dir=data_dir)
    return np.asarray(X, dtype=np.float64), LabelEncoder().fit_transform(y)


def run_classification_split(dataset, split, methods, cfg, data_dir=None, log=print,
                             data=None):
    """Results {method: {...}} of one 70/15/15 split of a classification set."""
    from sklaplace import LaplaceClassifier

    X, y = data if data is not None else load_classification(dataset, data_dir)
    n_all = max(PROTOCOL_SPLITS["classification"], split + 1)
    tr, va, te = list(classification_splits(y, n_all, random_state=cfg.seed))[split]
    scaler = StandardScaler().fit(X[tr])
    Xtr, Xva, Xte = scaler.transform(X[tr]), scaler.transform(X[va]), scaler.transform(X[te])
    ytr, yva, yte = y[tr], y[va], y[te]
    n_classes = int(y.max()) + 1
    seed = cfg.seed * 100_003 + 1_000 * split + dataset_seed(dataset)
    need_full = any(m in methods for m in ("glm", "bnn", "la_evidence"))
    common = dict(hyperparameter_tuning=None, subset_of_weights="all", random_state=seed)

    selected_by_val = [m for m in methods if m != "la_evidence" and m not in ELBO_METHODS
                       and not m.startswith("online_")]
    per_method = {m: [] for m in selected_by_val}  # (val nll, δ, test metrics)
    elbos = {m: [] for m in methods if m in ELBO_METHODS}  # (ELBO, δ, test metrics)
    variants = [m for m in GLM_VARIANTS
                if m in methods or any(ELBO_METHODS[e] == m for e in elbos)
                or any(MC_METHODS[e] == m for e in methods if e in MC_METHODS)]
    evidences = []  # (log evidence, δ, test metrics of glm)
    seconds = {m: 0.0 for m in methods}
    grid = cfg.deltas("classification", dataset) if per_method or elbos or need_full else []
    for delta in grid:
        delta = float(delta)
        t0 = time.perf_counter()
        net = make_net("classification", Xtr.shape[1], n_classes, len(Xtr), cfg)
        diag = LaplaceClassifier(net, prior_precision=delta, hessian_structure="diag",
                                 memory=MEMORY, **common).fit(Xtr, ytr)
        t_train = time.perf_counter() - t0
        for m in methods:
            seconds[m] += t_train
        if "map" in methods:
            per_method["map"].append(_score(delta, yva, yte, *(
                _map_proba(diag, Z) for Z in (Xva, Xte))))
        if "glm_diag" in methods:
            t0 = time.perf_counter()
            per_method["glm_diag"].append(_score(delta, yva, yte, diag.predict_proba(Xva),
                                                 diag.predict_proba(Xte)))
            seconds["glm_diag"] += time.perf_counter() - t0
        if need_full:
            t0 = time.perf_counter()
            full = LaplaceClassifier(FrozenEstimator(diag.net_), prior_precision=delta,
                                     hessian_structure="full", n_samples=cfg.bnn_samples,
                                     **common).fit(Xtr, ytr)
            t_full = time.perf_counter() - t0
            if "la_evidence" in methods:
                evidences.append((float(full.log_evidence_), delta,
                                  classification_metrics(yte, full.predict_proba(Xte))))
            if "glm" in methods:
                t0 = time.perf_counter()
                per_method["glm"].append(_score(delta, yva, yte, full.predict_proba(Xva),
                                                full.predict_proba(Xte)))
                seconds["glm"] += t_full + time.perf_counter() - t0
            if "bnn" in methods:
                t0 = time.perf_counter()
                full.set_params(pred_type="nn")  # same posterior, sampled-weights predictive
                per_method["bnn"].append(_score(delta, yva, yte, full.predict_proba(Xva),
                                                full.predict_proba(Xte)))
                seconds["bnn"] += t_full + time.perf_counter() - t0
            if "la_evidence" in methods:
                seconds["la_evidence"] += t_full
        for method in variants:
            t0 = time.perf_counter()
            est = LaplaceClassifier(FrozenEstimator(diag.net_), prior_precision=delta,
                                    **GLM_VARIANTS[method], **common).fit(Xtr, ytr)
            score = _score(delta, yva, yte, est.predict_proba(Xva), est.predict_proba(Xte))
            elapsed = time.perf_counter() - t0
            if method in per_method:
                per_method[method].append(score)
                seconds[method] += elapsed
            for elbo_method in [e for e in elbos if ELBO_METHODS[e] == method]:
                elbos[elbo_method].append((float(est.refine_objective_), delta, score[2]))
                seconds[elbo_method] += elapsed
            for mc_method in [e for e in per_method if MC_METHODS.get(e) == method]:
                t0 = time.perf_counter()
                est.set_params(link_approx="mc", n_samples=MC_SAMPLES)
                per_method[mc_method].append(_score(delta, yva, yte, est.predict_proba(Xva),
                                                    est.predict_proba(Xte)))
                seconds[mc_method] += elapsed + time.perf_counter() - t0

    results = {}
    for method in [m for m in methods if m.startswith("online_")]:
        t0 = time.perf_counter()
        net = make_net("classification", Xtr.shape[1], n_classes, len(Xtr), cfg)
        structure, prior = _structure_and_prior(method)
        est = LaplaceClassifier(
            net, prior_precision=1.0, prior_structure=prior, hyperparameter_tuning="online",
            hessian_structure=structure, subset_of_weights="all",
            online_frequency=max(1, net.max_epochs // cfg.online_updates),
            online_steps=cfg.online_steps, random_state=seed,
        ).fit(Xtr, ytr)
        results[method] = {**classification_metrics(yte, est.predict_proba(Xte)),
                           "prior_precision": est.prior_precision_,
                           "log_evidence": est.log_evidence_,
                           "seconds": time.perf_counter() - t0}
    for method, rows in per_method.items():
        results[method] = _selected(rows, "val_nll", min, seconds[method])
    for method, rows in elbos.items():
        results[method] = _selected(rows, "elbo", max, seconds[method])
    if "la_evidence" in methods:
        results["la_evidence"] = _selected(evidences, "log_evidence", max,
                                           seconds["la_evidence"])
    return results


def _selected(rows, criterion, pick, seconds):
    """The test metrics at the δ that ``pick`` (min / max) chooses by the rows'
    ``criterion`` value, rows being (value, δ, test metrics) per δ of the grid."""
    worst = math.inf if pick is min else -math.inf  # a NaN criterion is never chosen
    value, delta, test = pick(rows, key=lambda r: r[0] if np.isfinite(r[0]) else worst)
    return {**test, "prior_precision": delta, criterion: value,
            f"{criterion}_grid": [r[0] for r in rows],
            "test_nll_grid": [r[2]["nll"] for r in rows], "seconds": seconds}


def _map_proba(est, X):
    module = est.net_.module_
    module.eval()
    with torch.no_grad():
        logits = module(torch.as_tensor(X, dtype=torch.float32)).double()
    return torch.softmax(logits, -1).numpy()


def _score(delta, yva, yte, proba_val, proba_test):
    val = classification_metrics(yva, proba_val)["nll"]
    return val, delta, classification_metrics(yte, proba_test)


# ----------------------------------------------------------------------------- driver


class ETA:
    """Progress over a known number of (method, split) cells, with the time left
    extrapolated from the mean time of the cells done so far."""

    def __init__(self, total):
        self.total, self.finished, self.start = total, 0, time.perf_counter()

    def done(self, n):
        self.finished += n

    def __str__(self):
        if not self.finished:
            return f"0/{self.total} cells"
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.finished * (self.total - self.finished)
        return f"{self.finished}/{self.total} cells, ETA {left / 60:.1f} min"


def run(protocols, datasets, methods, splits, cfg, cache, resume=True, data_dir=None,
        log=print):
    """Run every missing (protocol, data set, split) — split-major, so that all data sets
    get their first splits before any gets more."""
    global MEMORY
    import joblib

    # per code version: joblib's key does not see the library code that trains the nets
    MEMORY = joblib.Memory(Path(cache.root) / "map_nets" / source_hash(), verbose=0)
    class_data = {}
    jobs = []
    for split in splits:
        for protocol in protocols:
            if split >= _n_splits(protocol, None, data_dir):
                continue
            for dataset in datasets[protocol]:
                if split >= _n_splits(protocol, dataset, data_dir):
                    continue
                todo = [m for m in methods[protocol]
                        if not (resume and cache.get(protocol, dataset, m, split))]
                if todo:
                    jobs.append((split, protocol, dataset, todo))
    eta = ETA(sum(len(todo) for *_, todo in jobs))
    for split, protocol, dataset, todo in jobs:
        log(f"[{protocol}] {dataset} split {split}: {', '.join(todo)} ... {eta}")
        t0 = time.perf_counter()
        try:
            if protocol == "regression":
                res = run_regression_split(dataset, split, todo, cfg, data_dir, log)
            else:
                if dataset not in class_data:
                    class_data[dataset] = load_classification(dataset, data_dir)
                res = run_classification_split(dataset, split, todo, cfg, data_dir,
                                               log, data=class_data[dataset])
        except Exception as exc:  # the whole split failed: record, go on
            res = {m: {"error": _describe(exc)} for m in todo}
        for method, result in res.items():
            if "error" in result:
                cache.put_error(protocol, dataset, method, split, result["error"])
                log(f"  ERROR {protocol}/{dataset}/{method}/split {split}: "
                    f"{result['error']}")
            else:
                cache.put(protocol, dataset, method, split, result)
                cache.clear_error(protocol, dataset, method, split)
        summary = "  ".join(f"{m}={r['nll']:.3f}" if "nll" in r else f"{m}=error"
                            for m, r in res.items())
        eta.done(len(todo))
        log(f"[{protocol}] {dataset} split {split}: NLL {summary} "
            f"({time.perf_counter() - t0:.1f} s; {eta})")


def _n_splits(protocol, dataset, data_dir):
    if protocol == "classification" or dataset is None:
        return PROTOCOL_SPLITS[protocol]
    return n_splits_uci_regression(dataset, data_dir)


# ----------------------------------------------------------------------------- tables


def _mean_se(values):
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan"), float("nan")
    se = values.std(ddof=1) / np.sqrt(values.size) if values.size > 1 else float("nan")
    return float(values.mean()), float(se)


def summarize(cache, protocol, datasets=None, methods=None):
    """Rows (dicts) of the comparison table built from the cache."""
    results = cache.results(protocol)
    datasets = datasets or DATASETS[protocol]
    methods = methods or METHODS[protocol]
    metrics = ("nll", "rmse") if protocol == "regression" else ("nll", "acc", "ece")
    rows = []
    for dataset in datasets:
        for method in methods:
            cell = [r for r in results if r["dataset"] == dataset and r["method"] == method]
            if not cell:
                continue
            row = {"protocol": protocol, "dataset": dataset, "method": method,
                   "n_splits": len(cell), "splits": " ".join(str(r["split"]) for r in cell)}
            note = (paper_tables.NOT_COMPARABLE.get(dataset)
                    if protocol == "classification" else None)
            for metric in metrics:
                mean, se = _mean_se([r[metric] for r in cell])
                row[f"{metric}_mean"], row[f"{metric}_se"] = mean, se
                column, paper = paper_tables.paper_value(protocol, dataset, method, metric)
                row["paper_column"] = row.get("paper_column") or column or ""
                if metric == "rmse":
                    continue
                if paper is None:
                    row[f"paper_{metric}_mean"] = row[f"paper_{metric}_se"] = float("nan")
                    row[f"{metric}_flag"] = ""
                    continue
                row[f"paper_{metric}_mean"], row[f"paper_{metric}_se"] = paper
                if note:
                    row[f"{metric}_flag"] = "not comparable"
                elif method.endswith("_scalar"):
                    # a variant of the row above compared with the same paper column: not
                    # counted twice
                    row[f"{metric}_flag"] = "(variant)"
                else:
                    row[f"{metric}_flag"] = compare_flag(metric, mean, se, *paper)
            rows.append(row)
    return rows


HIGHER_IS_BETTER = {"acc"}


def compare_flag(metric, mean, se, paper_mean, paper_se):
    """``ok`` within 2·sqrt(se² + se_paper²) of the paper, else ``better`` or ``worse``
    (lower NLL / ECE, higher accuracy is better). One split has no standard error (the
    spread between splits is several times the paper's s.e. of a 10-split mean):
    ``1 split``, no comparison; a missing value: ``—``."""
    if not np.isfinite(mean):
        return "—"
    if not np.isfinite(se):
        return "1 split"
    if abs(mean - paper_mean) <= 2.0 * math.sqrt(se**2 + paper_se**2):
        return "ok"
    higher = mean > paper_mean
    return "better" if higher == (metric in HIGHER_IS_BETTER) else "worse"


def _fmt(mean, se, digits=3):
    if not np.isfinite(mean):
        return "—"
    if not np.isfinite(se):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def markdown_table(rows, protocol):
    if not rows:
        return f"_(no cached {protocol} results)_\n"
    if protocol == "regression":
        head = ["data set", "method", "paper column", "n", "NLL ours", "NLL paper", "flag",
                "RMSE ours"]
        lines = []
        for r in rows:
            lines.append([r["dataset"], r["method"], r["paper_column"] or "—", str(r["n_splits"]),
                          _fmt(r["nll_mean"], r["nll_se"], 2 if abs(r["nll_mean"]) > 1 else 3),
                          _fmt(r["paper_nll_mean"], r["paper_nll_se"], 2),
                          r["nll_flag"], _fmt(r["rmse_mean"], r["rmse_se"])])
    else:
        head = ["data set", "method", "paper column", "n", "NLL ours", "NLL paper", "flag",
                "acc ours", "acc paper", "flag", "ECE ours", "ECE paper", "flag"]
        lines = []
        for r in rows:
            line = [r["dataset"], r["method"], r["paper_column"] or "—", str(r["n_splits"])]
            for metric in ("nll", "acc", "ece"):
                line += [_fmt(r[f"{metric}_mean"], r[f"{metric}_se"]),
                         _fmt(r[f"paper_{metric}_mean"], r[f"paper_{metric}_se"]),
                         r[f"{metric}_flag"]]
            lines.append(line)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return "\n".join(out) + "\n"


def _error_summary(errors):
    """Failed cells grouped by (method, message); ``--resume`` retries them."""
    groups = {}
    for e in errors:
        groups.setdefault((e["method"], e["error"]), {}).setdefault(e["dataset"], []).append(
            e["split"])
    lines = [f"Failed cells ({len(errors)}, not in the table above; `--resume` retries them):", ""]
    for (method, message), where in groups.items():
        cells = "; ".join(f"{d} {','.join(map(str, sorted(s)))}" for d, s in where.items())
        lines.append(f"- `{method}` on {cells}: {message}")
    return "\n".join(lines) + "\n"


def write_csv(rows, path):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def split_rows(cache, protocol, datasets=None, methods=None):
    """One row per cached (data set, method, split): the test metrics, the chosen prior
    precision (mean over groups for a layer-wise prior; the groups in ``prior_precision_all``),
    σ, the log evidence and the seconds of that cell (in classification, the whole δ grid
    with the MAP training each method needs counted in each; a MAP net loaded from the
    ``joblib.Memory`` cache counts its loading time only)."""
    metrics = ("nll", "rmse") if protocol == "regression" else ("nll", "acc", "ece")
    rows = []
    for r in cache.results(protocol):
        if (datasets and r["dataset"] not in datasets) or (methods and r["method"] not in methods):
            continue
        delta = np.atleast_1d(np.asarray(r.get("prior_precision", np.nan), dtype=float))
        row = {"protocol": protocol, "dataset": r["dataset"], "method": r["method"],
               "split": r["split"], **{m: r.get(m, float("nan")) for m in metrics},
               "prior_precision": float(delta.mean()),
               "prior_precision_all": " ".join(f"{d:.6g}" for d in delta),
               "sigma_noise": float(np.mean(r.get("sigma_noise", np.nan))),
               "log_evidence": r.get("log_evidence", float("nan")),
               "seconds": r.get("seconds", float("nan"))}
        rows.append(row)
    order = {m: i for i, m in enumerate(methods or METHODS[protocol])}
    rows.sort(key=lambda row: (row["dataset"], order.get(row["method"], 99), row["split"]))
    return rows


def plot_protocol(rows, protocol, path):
    """One panel per data set: each method's test NLL (mean ± 2 s.e. over splits) beside
    the paper's value (± 2 s.e.) where the paper has one.  Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if not datasets:
        return None
    ncols = min(4, len(datasets))
    nrows = -(-len(datasets) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 0.35 * 10 + 2.6 * nrows),
                             squeeze=False)
    for ax, dataset in zip(axes.flat, datasets):
        cell = [r for r in rows if r["dataset"] == dataset]
        ys = np.arange(len(cell))
        se = [2 * r["nll_se"] if np.isfinite(r["nll_se"]) else 0.0 for r in cell]
        ax.errorbar([r["nll_mean"] for r in cell], ys, xerr=se, fmt="o", color="C0",
                    label="sklaplace")
        paper = [(y, r["paper_nll_mean"], 2 * r["paper_nll_se"]) for y, r in zip(ys, cell)
                 if np.isfinite(r["paper_nll_mean"])]
        if paper:
            py, pm, pse = zip(*paper)
            ax.errorbar(pm, np.asarray(py) + 0.25, xerr=pse, fmt="s", color="C1",
                        label="paper")
        ax.set_yticks(ys, [f"{r['method']} (n={r['n_splits']})" for r in cell], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(dataset, fontsize=9)
        ax.set_xlabel("test NLL (± 2 s.e.)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(datasets):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"UCI {protocol}: sklaplace vs the paper (lower is better)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- CLI


def _split_list(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-")
            out += list(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    return out


def add_arguments(parser):
    parser.add_argument("--protocol", choices=(*PROTOCOLS, "all"), default="all",
                        help="which table(s) to run (default: all)")
    parser.add_argument("--datasets", nargs="+", metavar="NAME",
                        help="data sets (default: all of each protocol; quick: "
                             + ", ".join(sum(QUICK_DATASETS.values(), ())) + ")")
    parser.add_argument("--methods", nargs="+", metavar="NAME",
                        help="methods (regression: " + ", ".join(REGRESSION_METHODS)
                             + "; only when named: " + ", ".join(PEER_METHODS)
                             + "; classification: " + ", ".join(CLASSIFICATION_METHODS) + ")")
    parser.add_argument("--n-splits", type=int, metavar="N",
                        help="run splits 0..N-1 (default: the protocol's 20 / 10; quick: 1)")
    parser.add_argument("--splits", type=_split_list, metavar="LIST",
                        help="explicit splits, e.g. '0,1,5-7' (overrides --n-splits)")
    parser.add_argument("--quick", action="store_true",
                        help="small sets, 1 split, 150 steps, 3 prior precisions: a few seconds "
                             "per split, for smoke tests")
    parser.add_argument("--steps", type=int, help="optimizer steps per MAP training (default 2000)")
    parser.add_argument("--lr", type=float,
                        help="Adam learning rate, cosine-decayed (default 1e-2)")
    parser.add_argument("--batch-size", type=int, help="mini-batch cap (default 512; full batch "
                                                       "below)")
    parser.add_argument("--n-deltas", type=int,
                        help="size of the prior-precision grid (default 10)")
    parser.add_argument("--n-deltas-large", type=int,
                        help="grid size for digits and satellite (default 4, in [1e-1, 1e2])")
    parser.add_argument("--seed", type=int, default=0, help="global seed (default 0)")
    parser.add_argument("--cache-dir", default=".bench_cache",
                        help="per-split result cache (default .bench_cache/)")
    parser.add_argument("--resume", action="store_true",
                        help="skip (protocol, data set, method, split) results already cached")
    parser.add_argument("--report", action="store_true",
                        help="do not run anything: build the tables from the cache")
    parser.add_argument("--out", metavar="PATH",
                        help="write the table(s): .csv for CSV, anything else Markdown")
    parser.add_argument("--splits-csv", metavar="PATH",
                        help="write one row per (data set, method, split): metrics, chosen "
                             "prior precision, σ, log evidence, seconds")
    parser.add_argument("--figure", metavar="PATH",
                        help="save a PNG per protocol (test NLL vs the paper, ± 2 s.e.); with "
                             "--protocol all, the protocol name is appended to the file name")
    parser.add_argument("--from-splits-csv", nargs="+", metavar="PATH",
                        help="with --report: the cells of per-split CSVs (--splits-csv files) "
                             "instead of the cache; a cell in a later file replaces the same "
                             "(data set, method, split) of an earlier one")
    parser.add_argument("--cache-tag", metavar="TAG", action="append",
                        help="with --report: read the results under <cache-dir>/TAG (e.g. "
                             "classification-1a2b3c4d) instead of the current code's tag; "
                             "repeat for several protocols")
    parser.add_argument("--data-dir", help="data root (default: $SKLAPLACE_DATA or ../shared/data)")
    parser.add_argument("--quiet", action="store_true", help="no per-split progress lines")
    return parser


def config_from_args(args):
    values = dict(QUICK) if args.quick else {}
    for name in ("steps", "lr", "batch_size", "n_deltas", "n_deltas_large"):
        if getattr(args, name) is not None:
            values[name] = getattr(args, name)
    values["seed"] = args.seed
    return Config(**values)


def main(args):
    torch.set_num_threads(1)
    cfg = config_from_args(args)
    protocols = PROTOCOLS if args.protocol == "all" else (args.protocol,)
    datasets, methods = {}, {}
    for p in protocols:
        default = QUICK_DATASETS[p] if args.quick else DATASETS[p]
        datasets[p] = [d for d in (args.datasets or default) if d in DATASETS[p]]
        known = METHODS[p] + OPTIONAL_METHODS[p]
        methods[p] = [m for m in (args.methods or METHODS[p]) if m in known]
        if args.datasets and not datasets[p] and len(protocols) > 1:
            continue
        unknown = [d for d in (args.datasets or []) if not any(d in DATASETS[q] for q in protocols)]
        if unknown:
            raise SystemExit(f"unknown data set(s): {', '.join(unknown)}")
        bad = [m for m in (args.methods or [])
               if not any(m in METHODS[q] + OPTIONAL_METHODS[q] for q in protocols)]
        if bad:
            raise SystemExit(f"unknown method(s): {', '.join(bad)}")
    if args.splits is not None:
        splits = args.splits
    else:
        n = args.n_splits or (1 if args.quick else max(PROTOCOL_SPLITS[p] for p in protocols))
        splits = list(range(n))
    tags = {}
    for tag in args.cache_tag or []:
        protocol = tag.split("-")[0]
        if protocol not in PROTOCOLS:
            raise SystemExit(f"--cache-tag {tag!r}: must start with one of {PROTOCOLS}")
        tags[protocol] = tag
    if tags and not args.report:
        raise SystemExit("--cache-tag reads a cache written by other code: use it with --report")
    if args.from_splits_csv and not args.report:
        raise SystemExit("--from-splits-csv only reports: use it with --report")
    cache = SplitsCSV(args.from_splits_csv) if args.from_splits_csv else Cache(
        args.cache_dir, cfg, tags)

    def log(message):
        if not args.quiet:
            print(message, flush=True)

    if not args.report:
        log(f"config {dataclasses.asdict(cfg)}; cache {args.cache_dir}; splits {splits}")
        run(protocols, datasets, methods, splits, cfg, cache, resume=args.resume,
            data_dir=args.data_dir, log=log)
    all_rows, text, per_split = [], [], []
    for p in protocols:
        rows = summarize(cache, p, datasets[p], methods[p])
        all_rows += rows
        per_split += split_rows(cache, p, datasets[p], methods[p])
        text.append(f"### {p} ({cache.tag(p)})\n\n" + markdown_table(rows, p))
        if args.figure and rows:
            figure = Path(args.figure)
            if len(protocols) > 1:
                figure = figure.with_name(f"{figure.stem}_{p}{figure.suffix or '.png'}")
            figure.parent.mkdir(parents=True, exist_ok=True)
            plot_protocol(rows, p, figure)
        errors = [e for e in cache.errors(p) if e["dataset"] in datasets[p]
                  and e["method"] in methods[p]]
        if errors:
            text.append(_error_summary(errors))
    report = "\n".join(text)
    print(report)
    if args.splits_csv:
        Path(args.splits_csv).parent.mkdir(parents=True, exist_ok=True)
        write_csv(per_split, args.splits_csv)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".csv":
            write_csv(all_rows, out)
        else:
            out.write_text(report)
    return all_rows


if __name__ == "__main__":  # pragma: no cover
    parser = add_arguments(argparse.ArgumentParser(description=__doc__))
    main(parser.parse_args(sys.argv[1:]))
