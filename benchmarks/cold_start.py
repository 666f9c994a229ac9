"""Cold start: ``import sklaplace`` and the first fit in a fresh process, beside later fits.

Each run is a new Python process that times, in order: ``import torch, sklearn, skorch``
(what any user of sklaplace imports anyway), ``import sklaplace`` on top of it, then three
fits of ``LaplaceClassifier(random_state=0)`` on scikit-learn's wine data (standardized), and
``MLPClassifier`` on the same data; it also says whether ``torch._dynamo`` was imported.
The table gives the median over ``--runs`` processes.

    python -m benchmarks coldstart --runs 3

The child processes import the installed sklaplace (or the one on ``PYTHONPATH``), so two
checkouts compare as ``PYTHONPATH=<checkout> python -m benchmarks coldstart``.
"""

import json
import statistics
import subprocess
import sys
import tempfile

HELP = "import time and the first fit in a fresh process against later fits"

CHILD = r"""
import json, sys, time, warnings
t0 = time.perf_counter()
import torch, sklearn.base, skorch  # noqa: E401
t1 = time.perf_counter()
import sklaplace
t2 = time.perf_counter()
from sklearn.datasets import load_wine
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler
X, y = load_wine(return_X_y=True)
X = StandardScaler().fit_transform(X)
warnings.simplefilter("ignore")
fits = []
for _ in range(3):
    start = time.perf_counter()
    sklaplace.LaplaceClassifier(random_state=0).fit(X, y)
    fits.append(time.perf_counter() - start)
start = time.perf_counter()
MLPClassifier(random_state=0, max_iter=200).fit(X, y)
mlp = time.perf_counter() - start
print(json.dumps({"import torch, sklearn, skorch": t1 - t0, "import sklaplace (after)": t2 - t1,
                  "first fit": fits[0], "second fit": fits[1], "third fit": fits[2],
                  "MLPClassifier fit": mlp, "dynamo": "torch._dynamo" in sys.modules}))
"""


def add_arguments(parser):
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (median)")


def run_once():
    # run outside the repository: the sklaplace imported is the installed one (or
    # PYTHONPATH's), never the working directory's by accident
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                             check=True, cwd=cwd)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(args):
    runs = [run_once() for _ in range(args.runs)]
    print(f"median of {args.runs} fresh processes; torch._dynamo imported: "
          f"{sorted({r['dynamo'] for r in runs})}")
    print("| step | seconds |\n|---|---|")
    for key in runs[0]:
        if key != "dynamo":
            print(f"| {key} | {statistics.median(r[key] for r in runs):.3f} |")
    return runs
