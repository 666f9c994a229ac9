"""The heteroscedastic regressor against the default on the regression board.

``python -m benchmarks.noise --hetero H.json ... --homo D.json ... [--gp G.json ...]`` reads
the ``--json`` records of ``python -m benchmarks defaults`` runs — one with
``--laplace-params '{"noise": "heteroscedastic"}'``, one at the defaults, optionally one
with ``--methods GP`` — and prints, per set, on the splits every file has: the LA's NLL,
RMSE and 90 % coverage of both noise models, the GP's NLL, the extrapolation NLL of both
(the PC 1 splits the runs share) and the LA's fit time of both, then the targets:
heteroscedastic NLL ≤ the default's on ≥ 2/3 of the sets, ≤ the GP's on ≥ half, its
extrapolation NLL ≤ the default's on ≥ 2/3, its fit time ≤ 2× the default's.
"""

import argparse
import json
from collections import defaultdict

import numpy as np


def _records(path):
    with open(path) as handle:
        data = json.load(handle)
    return data["records"] if isinstance(data, dict) else data


def _table(records, method, metric, protocol=None):
    """{(dataset, split): value} of one method's metric (in distribution or ``protocol``)."""
    return {(r["dataset"], r["split"]): r[metric] for r in records
            if r.get("method") == method and r.get("protocol") == protocol and metric in r}


def compare(hetero, homo, gp=()):
    """The per-set rows (dict) and the targets' lines."""
    cells = defaultdict(dict)
    for label, records, method in (("hetero", hetero, "LA"), ("homo", homo, "LA"),
                                   ("GP", gp, "GP")):
        for metric in ("nll", "rmse", "coverage90", "seconds"):
            cells[label, metric] = _table(records, method, metric)
        cells[label, "extrap_nll"] = _table(records, method, "extrap_nll", "extrapolation")
    rows = []
    for dataset in dict.fromkeys(d for d, _ in cells["hetero", "nll"]):
        row = {"dataset": dataset}
        for key, sources in (("nll", ("hetero", "homo", "GP")), ("rmse", ("hetero", "homo")),
                             ("coverage90", ("hetero", "homo")), ("seconds", ("hetero", "homo")),
                             ("extrap_nll", ("hetero", "homo"))):
            tables = [cells[s, key] for s in sources if cells[s, key]]
            shared = set.intersection(*[{k for k in t if k[0] == dataset} for t in tables])
            for source in sources:
                values = [cells[source, key][k] for k in sorted(shared)
                          if k in cells[source, key]]
                row[f"{source} {key}"] = float(np.mean(values)) if values else np.nan
            row[f"splits {key}"] = len(shared)
        rows.append(row)
    return rows, targets(rows)


def targets(rows):
    def count(ok):
        passed = [r["dataset"] for r in rows if ok(r)]
        return len(passed), [r["dataset"] for r in rows if r["dataset"] not in passed]

    n = len(rows)
    lines = []
    for text, ok, need in (
            ("NLL ≤ the default's", lambda r: r["hetero nll"] <= r["homo nll"], 2 / 3),
            ("NLL ≤ GaussianProcessRegressor's", lambda r: r["hetero nll"] <= r["GP nll"], 1 / 2),
            ("extrapolation NLL ≤ the default's",
             lambda r: r["hetero extrap_nll"] <= r["homo extrap_nll"], 2 / 3),
            ("fit time ≤ 2× the default's",
             lambda r: r["hetero seconds"] <= 2 * r["homo seconds"], 1.0)):
        passed, misses = count(ok)
        verdict = "PASS" if passed >= need * n - 1e-9 else "FAIL"
        lines.append(f"- {verdict} heteroscedastic {text}: {passed}/{n}"
                     + (f" — misses: {', '.join(misses)}" if misses else ""))
    return lines


def markdown(rows, lines):
    head = ("| data set | NLL hetero | NLL default | NLL GP | RMSE hetero | RMSE default "
            "| cov90 hetero | cov90 default | extrap NLL hetero | extrap NLL default "
            "| fit s hetero | fit s default |")
    out = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for r in rows:
        out.append("| " + " | ".join([r["dataset"]] + [
            f"{r[k]:.3f}" if np.isfinite(r[k]) else "–" for k in (
                "hetero nll", "homo nll", "GP nll", "hetero rmse", "homo rmse",
                "hetero coverage90", "homo coverage90", "hetero extrap_nll",
                "homo extrap_nll")] + [
            f"{r[k]:.1f}" for k in ("hetero seconds", "homo seconds")]) + " |")
    return "\n".join(out + [""] + lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noise",
                                     description="noise='heteroscedastic' against the default")
    parser.add_argument("--hetero", nargs="+", required=True, metavar="FILE.json")
    parser.add_argument("--homo", nargs="+", required=True, metavar="FILE.json")
    parser.add_argument("--gp", nargs="*", default=[], metavar="FILE.json")
    args = parser.parse_args(argv)
    load = lambda paths: [r for path in paths for r in _records(path)]  # noqa: E731
    print(markdown(*compare(load(args.hetero), load(args.homo), load(args.gp))))


if __name__ == "__main__":
    main()
