"""sklaplace's post-hoc ``la_full`` against laplace-torch on the UCI runner's MAP nets.

    python -m benchmarks.peer --dataset yacht --splits 0-3

For every split: the runner's data and ``map`` net (:func:`benchmarks.uci.regression_map`,
the same nets as ``la_full``), then

* ``ours``: ``la_full`` exactly as the runner fits it (``FrozenEstimator`` of the net,
  full GGN, layer-wise δ and σ by the evidence, GLM predictive);
* ``ours, read as y``: the same with the net's outputs read in the units of y — what the
  runner computed from 856ec89 until the fix of ``FrozenEstimator(reg.net_)`` (25b2119);
* ``peer``: laplace-torch 0.3, ``Laplace(model, "regression", subset_of_weights="all",
  hessian_structure="full")`` on a float64 copy of the net and the standardized targets,
  layer-wise δ and σ by Adam on its log marginal likelihood (:func:`benchmarks.uci.tune_peer`);
* ``exact``: a brute-force log evidence, the GGN JᵀJ from ``torch.func.jacrev`` in float64.

It prints the log evidence of the three at the same (δ, σ) (ours' optimum), the tuned δ, σ
and log evidence of both, and the test NLL in the units of y — laplace-torch's with σ²
added to its functional variance, and without (what ``la(x)`` returns alone).
"""

import argparse
import copy
import math
import sys
import time

import numpy as np
import torch
from sklearn.frozen import FrozenEstimator

from . import uci


def exact_log_evidence(module, X, y, delta, sigma):
    """Laplace log evidence with the exact GGN (torch.func), float64, in the units of ``y``.

    ``delta``: one prior precision per parameter tensor (in ``module.parameters()`` order).
    """
    from torch.func import functional_call, jacrev

    module = copy.deepcopy(module).double()
    params = {k: v.detach() for k, v in module.named_parameters()}
    X = torch.as_tensor(X, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    jac = jacrev(lambda p: functional_call(module, p, (X,)).reshape(-1))(params)
    J = torch.cat([jac[k].reshape(len(X), -1) for k in params], 1)
    theta = torch.cat([v.reshape(-1) for v in params.values()])
    d = torch.cat([torch.full((v.numel(),), float(dk), dtype=torch.float64)
                   for v, dk in zip(params.values(), np.ravel(delta))])
    with torch.no_grad():
        f = functional_call(module, params, (X,)).reshape(-1)
    n = len(X)
    loglik = -0.5 * n * math.log(2 * math.pi * sigma**2) - 0.5 * ((y - f) ** 2).sum() / sigma**2
    precision = J.T @ J / sigma**2 + torch.diag(d)
    return float(loglik - 0.5 * (d * theta**2).sum() + 0.5 * torch.log(d).sum()
                 - 0.5 * torch.linalg.slogdet(precision)[1])


def compare_split(dataset, split, cfg, steps, log=print):
    from sklaplace import LaplaceRegressor

    Xtr, ytr, Xte, yte, seed = uci.regression_data(dataset, split, cfg)
    map_est, delta, _, _ = uci.regression_map(Xtr, ytr, seed, cfg, dataset)
    n = len(Xtr)
    row = {"split": split, "map_delta": delta}

    def ours_on(net):
        t0 = time.perf_counter()
        est = uci._regression_estimator(
            FrozenEstimator(net), prior_precision=delta, prior_structure="layerwise",
            hyperparameter_tuning="evidence", hessian_structure="full", random_state=seed,
        ).fit(Xtr, ytr)
        mean, std = est.predict(Xte, return_std=True)
        return est, uci.gaussian_nll(yte, mean, std), time.perf_counter() - t0

    ours, row["ours_nll"], row["ours_s"] = ours_on(map_est.net_)
    row["ours_rmse"] = float(np.sqrt(np.mean((yte - ours.predict(Xte)) ** 2)))
    bare = copy.deepcopy(map_est.net_)  # without the recorded standardization
    bare.__dict__.pop(LaplaceRegressor.TARGET_SCALING, None)
    _, row["ours_read_as_y_nll"], _ = ours_on(bare)
    row["ours_delta"] = np.round(np.ravel(ours.prior_precision_), 4).tolist()
    row["ours_sigma"] = float(ours.sigma_noise_)
    row["ours_logz"] = float(ours.log_evidence_)

    t0 = time.perf_counter()
    la, m, s = uci.peer_laplace(map_est, "full", Xtr, ytr)
    offset = -n * math.log(s)  # log p(y) = log p(y_std) − N log s

    def peer_logz(d, sigma):
        with torch.no_grad():
            return float(la.log_marginal_likelihood(
                torch.as_tensor(np.ravel(d), dtype=torch.float64).clone(),
                torch.tensor(sigma / s, dtype=torch.float64))) + offset

    ys = (ytr - m) / s
    points = [(np.asarray(ours.prior_precision_), ours.sigma_noise_), (np.full(4, 1.0), s),
              (np.full(4, 0.1), 0.3 * s)]
    row["logz_same_point"] = [
        {"delta": np.round(np.ravel(d), 4).tolist(), "sigma": float(sig),
         "ours": ours.log_evidence(prior_precision=d, sigma_noise=sig),
         "peer": peer_logz(d, sig),
         "exact": exact_log_evidence(map_est.net_.module_, Xtr, ys, d, sig / s) + offset}
        for d, sig in points]
    trace = uci.tune_peer(la, delta, steps=steps)
    row["peer_delta"] = np.round(la.prior_precision.numpy(), 4).tolist()
    row["peer_sigma"] = float(la.sigma_noise) * s
    row["peer_logz"] = peer_logz(la.prior_precision.numpy(), row["peer_sigma"])
    row["peer_trace_last"] = trace[-1] - offset
    mean, f_var, noise = uci.peer_predict(la, Xte, m, s)
    row["peer_nll"] = uci.gaussian_nll(yte, mean, np.sqrt(f_var + noise))
    row["peer_nll_without_noise"] = uci.gaussian_nll(yte, mean, np.sqrt(f_var))
    row["peer_s"] = time.perf_counter() - t0
    row["ours_logz_at_peer_optimum"] = ours.log_evidence(
        prior_precision=la.prior_precision.numpy(), sigma_noise=row["peer_sigma"])
    ours_mean, ours_std = ours.predict(Xte, return_std=True)
    row["max_abs_mean_diff"] = float(np.max(np.abs(ours_mean - mean)))
    row["max_rel_std_diff"] = float(np.max(np.abs(ours_std / np.sqrt(f_var + noise) - 1)))
    log(row)
    return row


def report(rows):
    out = ["| split | δ MAP | NLL ours | NLL ours, net read as y | NLL peer (f_var + σ²) | "
           "NLL peer (f_var only) | σ ours | σ peer | log Z ours | log Z peer | "
           "log Z at ours' optimum: ours / peer / exact |", "|" + "---|" * 11]
    for r in rows:
        same = r["logz_same_point"][0]
        out.append(
            f"| {r['split']} | {r['map_delta']:g} | {r['ours_nll']:.4f} | "
            f"{r['ours_read_as_y_nll']:.4f} | {r['peer_nll']:.4f} | "
            f"{r['peer_nll_without_noise']:.4f} | {r['ours_sigma']:.4f} | {r['peer_sigma']:.4f} | "
            f"{r['ours_logz']:.3f} | {r['peer_logz']:.3f} | "
            f"{same['ours']:.3f} / {same['peer']:.3f} / {same['exact']:.3f} |")
    means = {k: np.mean([r[k] for r in rows]) for k in
             ("ours_nll", "ours_read_as_y_nll", "peer_nll", "peer_nll_without_noise")}
    out.append(f"| mean | | {means['ours_nll']:.4f} | {means['ours_read_as_y_nll']:.4f} | "
               f"{means['peer_nll']:.4f} | {means['peer_nll_without_noise']:.4f} | | | | | |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="yacht")
    parser.add_argument("--splits", type=uci._split_list, default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=1000,
                        help="Adam steps of laplace-torch's tuning (default 1000)")
    parser.add_argument("--cache-dir", default="/tmp/peer_cache",
                        help="joblib cache of the MAP nets (as the runner's <cache-dir>/map_nets)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    import joblib

    torch.set_num_threads(1)
    uci.MEMORY = joblib.Memory(f"{args.cache_dir}/map_nets", verbose=0)
    cfg = uci.Config()
    rows = [compare_split(args.dataset, split, cfg, args.steps,
                          log=lambda r: print(r, flush=True)) for split in args.splits]
    print(report(rows))
    return rows


if __name__ == "__main__":  # pragma: no cover
    main()
