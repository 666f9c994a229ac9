"""The ``scale`` section of the speed benchmark: the LA at the size of real tabular data.

Synthetic classification (``make_classification``: 50 features, 10 classes; N training
rows, 10,000 test rows), two skorch ReLU MLPs trained on the benchmark's device for a
few epochs (their training is not timed): 2×256 (P = 81,418) and 2×48 (P = 5,290).
Both libraries get the same trained module: sklaplace as ``FrozenEstimator(net)``
(evidence tuning of a scalar prior), laplace-torch as a float64 copy on the same
device (``fit`` on a DataLoader, ``optimize_prior_precision(method="marglik")``).
*fit* = LA + scalar prior tuning, one run after a small warm-up (CUDA kernels,
allocator); *predict* = the probit GLM predictive of the test rows, the faster of two
calls for both libraries (laplace-torch in batches of ``PEER_PREDICT_BATCH`` rows on
CUDA, and on the CPU of as many rows as keep its (n, C, P) Jacobians within 1 GiB: with
500 rows of the 2×256 net its all-weights predictive took the 24 GiB machine into the
OOM killer). On CUDA the clock stops after a synchronize. A cell that fails
(memory, an unsupported combination) shows the error's type and first words.
"""

import copy
import time
import warnings

import numpy as np
import torch

#: (hidden sizes, subset, structure) of the table, in order.
CONFIGS = [((256, 256), "last_layer", "kron"), ((256, 256), "last_layer", "full"),
           ((256, 256), "all", "kron"), ((256, 256), "all", "diag"),
           ((48, 48), "all", "full")]
N_FEATURES, N_CLASSES, N_TEST = 50, 10, 10_000
PEER_FIT_BATCH = 512
PEER_PREDICT_BATCH = 500
PREDICT_REPEATS = 2


def make_data(n_train, seed=0):
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler

    X, y = make_classification(n_samples=n_train + N_TEST, n_features=N_FEATURES,
                               n_informative=30, n_redundant=10, n_classes=N_CLASSES,
                               n_clusters_per_class=2, class_sep=1.5, random_state=seed)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def train_net(hidden, X, y, device, epochs=5, seed=0):
    from skorch import NeuralNetClassifier
    from torch import nn

    torch.manual_seed(seed)
    layers, d = [], X.shape[1]
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    module = nn.Sequential(*layers, nn.Linear(d, N_CLASSES))
    net = NeuralNetClassifier(module, criterion=nn.CrossEntropyLoss, optimizer=torch.optim.Adam,
                              lr=1e-3, max_epochs=epochs, batch_size=1024, train_split=None,
                              device=device, verbose=0)
    return net.fit(X, y.astype(np.int64))


def _sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _clock(fn, device):
    _sync(device)
    start = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - start, out


def _best_of(repeats, fn, device):
    """The fastest of ``repeats`` timed calls (first-call kernel and allocator warm-up of a
    shape is not the predictive's cost), and the last result."""
    times = []
    for _ in range(repeats):
        t, out = _clock(fn, device)
        times.append(t)
    return min(times), out


def _failed(error):
    words = " ".join(str(error).split()[:12])
    return f"fails ({type(error).__name__}: {words})"


def run_sklaplace(net, X, y, X_test, subset, structure, device):
    from sklearn.frozen import FrozenEstimator

    from sklaplace import LaplaceClassifier

    est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights=subset,
                            hessian_structure=structure, hyperparameter_tuning="evidence",
                            random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_fit, _ = _clock(lambda: est.fit(X, y), device)
        t_pred, proba = _best_of(PREDICT_REPEATS, lambda: est.predict_proba(X_test), device)
    return t_fit, t_pred, proba


def run_laplace_torch(net, X, y, X_test, subset, structure, device):
    from laplace import Laplace

    model = copy.deepcopy(net.module_).to(device, torch.float64).eval()
    data = torch.utils.data.TensorDataset(torch.tensor(X, dtype=torch.float64, device=device),
                                          torch.tensor(y, dtype=torch.long, device=device))
    loader = torch.utils.data.DataLoader(data, batch_size=PEER_FIT_BATCH)
    X_test = torch.tensor(X_test, dtype=torch.float64, device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def fit():
            la = Laplace(model, "classification", subset_of_weights=subset,
                         hessian_structure=structure)
            la.fit(loader)
            la.optimize_prior_precision(method="marglik", prior_structure="scalar")
            return la

        t_fit, la = _clock(fit, device)

        batch = PEER_PREDICT_BATCH
        if torch.device(device).type == "cpu":
            n_params = sum(p.numel() for p in model.parameters())
            batch = max(1, min(batch, 2**30 // (8 * N_CLASSES * n_params)))

        def predict():
            return torch.cat([la(X_test[s:s + batch], pred_type="glm", link_approx="probit")
                              for s in range(0, len(X_test), batch)])

        t_pred, proba = _best_of(PREDICT_REPEATS, predict, device)
    return t_fit, t_pred, proba.cpu().numpy()


def _warm_up(device):
    """CUDA context, cuBLAS / cuSOLVER handles and the allocator, before any timing."""
    X, y, X_test, _ = make_data(500, seed=1)
    net = train_net((8,), X, y, device, epochs=1)
    run_sklaplace(net, X, y, X_test[:100], "all", "full", device)


def device_description(device):
    if torch.device(device).type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (f"{props.name} ({props.total_memory / 2**30:.0f} GiB), torch "
                f"{torch.__version__}, CUDA {torch.version.cuda}")
    return f"CPU, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}"


def section_scale(out, n_train, device, configs=None, peer=True):
    """Append the scale table for ``n_train`` rows on ``device`` to ``out`` (markdown lines)."""
    configs = CONFIGS if configs is None else configs
    out.append(f"## Scale: N = {n_train:,} training rows, {N_TEST:,} test rows, "
               f"{N_FEATURES} features, {N_CLASSES} classes, on {device}\n")
    out.append(f"Device: {device_description(device)}\n")
    out.append("| net | P | subset/structure | sklaplace fit | sklaplace predict "
               "| laplace-torch fit | laplace-torch predict | max |Δ proba| |")
    out.append("|---|---|---|---|---|---|---|---|")
    _warm_up(device)
    X, y, X_test, y_test = make_data(n_train)
    nets = {}
    for hidden, subset, structure in configs:
        if hidden not in nets:
            nets[hidden] = train_net(hidden, X, y, device)
        net = nets[hidden]
        n_params = sum(p.numel() for p in net.module_.parameters())
        row = ["×".join(map(str, hidden)), f"{n_params:,}", f"{subset}/{structure}"]
        proba_sk = None
        try:
            t_fit, t_pred, proba_sk = run_sklaplace(net, X, y, X_test, subset, structure, device)
            row += [f"{t_fit:.2f} s", f"{t_pred:.2f} s"]
        except Exception as error:  # noqa: BLE001 - report the cell, keep the table
            row += [_failed(error), "–"]
        if peer:
            try:
                t_fit, t_pred, proba_lt = run_laplace_torch(net, X, y, X_test, subset,
                                                            structure, device)
                row += [f"{t_fit:.2f} s", f"{t_pred:.2f} s"]
                row.append("–" if proba_sk is None else f"{np.abs(proba_sk - proba_lt).max():.3g}")
            except Exception as error:  # noqa: BLE001
                row += [_failed(error), "–", "–"]
        else:
            row += ["–", "–", "–"]
        out.append("| " + " | ".join(row) + " |")
        print(out[-1], flush=True)
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    out.append("")
    out.append("Fit: one run per cell after a warm-up, LA + scalar prior tuning by the evidence "
               "(sklaplace: L-BFGS-B; laplace-torch: its marglik optimizer). Predict: the "
               "faster of two calls of the probit GLM predictive of the test rows. Δ proba "
               "compares the two predictives (they differ where the tuned priors differ).\n")
