"""``python -m benchmarks speed --sections sklearn``: the default fit against scikit-learn's MLP.

The comparison as a user makes it: each timing is a fresh Python process with the
threads a user has (no pinning), timing ``fit`` alone (imports and data loading excluded,
after one tiny warm-up fit of the same estimator in that process), the default
``LaplaceClassifier()`` / ``LaplaceRegressor()`` against ``MLPClassifier(max_iter=1000)`` /
``MLPRegressor(max_iter=1000)`` in the scoreboard's pipeline (``benchmarks.defaults``: the
ColumnTransformer standardizing the features, raw targets, sets above 2,000 rows cut to a
seeded subset) on the same 75 % of the rows, idle and beside one CPU-bound process; the five
sets bundled with scikit-learn by default, every scoreboard set with ``--sklearn-sets all``.
Cells: median over ``repeats``.
"""

import json
import statistics
import subprocess
import sys

from .threads import _neighbour

SETS = ("breast_cancer", "wine", "iris", "digits", "diabetes")  # bundled with scikit-learn

_CHILD = r"""
import json, sys, time, warnings
import numpy as np
from sklearn.model_selection import train_test_split
from benchmarks import defaults as d
name, which, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
X, y = d.load_dataset(name)
X, y = d.subsample(X, y, d.MAX_ROWS, d.name_seed(name))
X, _, y, _ = train_test_split(X, y, test_size=0.25, random_state=0)
regression = d.task_of(name) == "regression"
if which == "LA":
    from sklaplace import LaplaceClassifier, LaplaceRegressor
    make = (lambda: LaplaceRegressor(random_state=0, **params)) if regression else (
        lambda: LaplaceClassifier(random_state=0, **params))
    tiny = {"max_epochs": 2}
else:
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    make = (lambda: MLPRegressor(max_iter=1000, random_state=0)) if regression else (
        lambda: MLPClassifier(max_iter=1000, random_state=0))
    tiny = {"max_iter": 2}
warnings.simplefilter("ignore")
d.make_pipeline(make().set_params(**tiny)).fit(X[:40], y[:40])
pipe = d.make_pipeline(make())
t = time.perf_counter()
pipe.fit(X, y)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def _time(name, which, repeats, busy, params=None):
    times = []
    with _neighbour(busy):
        for _ in range(repeats):
            out = subprocess.run([sys.executable, "-c", _CHILD, name, which,
                                  json.dumps(params or {})], check=True,
                                 capture_output=True, text=True).stdout
            times.append(json.loads(out.strip().splitlines()[-1])["seconds"])
    return statistics.median(times)


def section_sklearn(repeats, out, sets=SETS, busy=True, params=None):
    """Append the table of default fit times, LA vs scikit-learn's MLP, idle and (``busy``)
    beside a CPU-bound process; without ``busy`` its columns read "–". ``params``: the
    LA's constructor parameters (None: the defaults)."""
    out += ["## Default fit against scikit-learn's MLP (fresh processes, default threads)", "",
            "| data set | LA idle (s) | MLP idle (s) | LA / MLP | LA busy (s) | MLP busy (s) "
            "| LA busy / idle |", "|---|---|---|---|---|---|---|"]
    for name in sets:
        cells = {(w, b): _time(name, w, repeats, b, params)
                 for b in ((False, True) if busy else (False,)) for w in ("LA", "MLP")}
        la, mlp = cells[("LA", False)], cells[("MLP", False)]
        busy_cells = (f"{cells[('LA', True)]:.2f} | {cells[('MLP', True)]:.2f} | "
                      f"{cells[('LA', True)] / la:.2f}") if busy else "– | – | –"
        out.append(f"| {name} | {la:.2f} | {mlp:.2f} | {la / mlp:.1f} | {busy_cells} |")
        print(out[-1], flush=True)
    out.append("")
