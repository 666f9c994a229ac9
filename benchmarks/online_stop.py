"""The convergence rule under online tuning, both ways, on the scoreboard's regression sets.

``python -m benchmarks defaults`` per data set for each of ``--rules``, in the same process
and conditions (the order alternating from set to set): ``loss``, the per-epoch loss rule
(re-based at each update of δ and σ, the default); ``evidence``, the loss rule and beside it
the rule on the log evidence of the updates
(:data:`sklaplace._laplace.convergence.EVIDENCE_RULE`) with a patience of
``n_iter_no_change`` updates; ``evidence-epochs``, the same with ⌈n_iter_no_change /
frequency⌉ updates (``PATIENCE_UNIT``).  Per set and rule: the default ``LaplaceRegressor``'s
in-distribution test NLL (mean ± standard error over splits), its extrapolation NLL (the
PC 1 fits of ``--shift-splits``, both directions), the epochs of MAP training (mean over
the in-distribution fits: each architecture candidate of ``hidden_layer_sizes="auto"`` and
the refit) and the median over splits of its fit time over ``MLPRegressor``'s.

    OMP_NUM_THREADS=1 python -m benchmarks online_stop --datasets boston concrete energy \\
        yacht kin8nm wine_quality diabetes --splits 3 --shift-splits 1 --max-rows 800 \\
        --json /tmp/online_stop.json
"""

import json
import time

import numpy as np

HELP = "the loss rule against the evidence rule of convergence under online tuning"

#: rule → (EVIDENCE_RULE, PATIENCE_UNIT)
RULES = {"loss": (False, "updates"), "evidence": (True, "updates"),
         "evidence-epochs": (True, "epochs")}


def add_arguments(parser):
    parser.add_argument("--datasets", nargs="+", required=True)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--shift-splits", type=int, default=1)
    parser.add_argument("--max-rows", type=int, default=800)
    parser.add_argument("--rules", nargs="+", default=["loss", "evidence"],
                        choices=list(RULES))
    parser.add_argument("--json", metavar="FILE.json", help="also save the records")


class EpochLog:
    """Epochs of every MAP training (``fit_net``) while ``tag`` is set."""

    def __init__(self):
        self.tag, self.rows = None, []

    def install(self):
        from sklaplace._laplace import nets

        fit_net = nets.fit_net

        def recorded(net, *args, **kwargs):
            n0 = len(net.history)
            try:
                return fit_net(net, *args, **kwargs)
            finally:
                if self.tag is not None:
                    self.rows.append((*self.tag, len(net.history) - n0))

        nets.fit_net = recorded


def run_rule(name, rule, args, log):
    from sklaplace._laplace import convergence

    from . import defaults

    epochs = EpochLog()
    epochs.install()
    fit_and_score = defaults.fit_and_score

    def tagged(task, method, *rest, **kwargs):  # the in-distribution fits' epochs
        epochs.tag = (method, time.perf_counter()) if method == "LA" else None
        try:
            return fit_and_score(task, method, *rest, **kwargs)
        finally:
            epochs.tag = None

    saved = convergence.EVIDENCE_RULE, convergence.PATIENCE_UNIT
    (convergence.EVIDENCE_RULE, convergence.PATIENCE_UNIT), defaults.fit_and_score = (
        RULES[rule], tagged)
    try:
        records, _ = defaults.run_dataset(name, args.splits, args.max_rows, methods=["LA", "MLP"],
                                          shift_splits=args.shift_splits, log=log)
    finally:
        (convergence.EVIDENCE_RULE, convergence.PATIENCE_UNIT), defaults.fit_and_score = (
            saved, fit_and_score)
        from sklaplace._laplace import nets
        nets.fit_net = convergence.fit_net
    fits = {}
    for _, started, n in epochs.rows:
        fits.setdefault(started, []).append(n)
    return records, [fits[k] for k in sorted(fits)]


def summary(records, fits):
    def rows(method, key, protocol=None):
        return np.array([r[key] for r in records if r["method"] == method and key in r
                         and r.get("protocol") == protocol], dtype=float)

    nll, extrap = rows("LA", "nll"), rows("LA", "extrap_nll", "extrapolation")
    ratio = rows("LA", "seconds") / rows("MLP", "seconds")
    width = max(map(len, fits)) if fits else 0
    per_stage = [np.mean([f[i] for f in fits if len(f) == width]) for i in range(width)]
    return {"nll": float(nll.mean()),
            "nll_se": float(nll.std(ddof=1) / np.sqrt(len(nll))) if len(nll) > 1 else 0.0,
            "extrap_nll": float(extrap.mean()) if len(extrap) else float("nan"),
            "epochs": [round(float(e), 1) for e in per_stage],
            "time_ratio": float(np.median(ratio))}


def main(args):
    from . import defaults

    defaults._warm_up()
    out, lines = {}, []
    for i, name in enumerate(args.datasets):
        order = args.rules if i % 2 == 0 else args.rules[::-1]
        for rule in order:
            records, fits = run_rule(name, rule, args, print)
            out.setdefault(name, {})[rule] = {"summary": summary(records, fits),
                                              "records": records, "fits": fits}
            s = out[name][rule]["summary"]
            line = (f"{name:13s} {rule:8s} NLL {s['nll']:.3f} ± {s['nll_se']:.3f}  extrap "
                    f"{s['extrap_nll']:.3f}  epochs {s['epochs']}  LA/MLP time "
                    f"{s['time_ratio']:.1f}×")
            print(line, flush=True)
            lines.append(line)
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(out, fh, default=str)
    print("\n".join(lines))
