"""Every table and figure of the benchmarks page, in one command: ``python -m benchmarks all``.

Runs, in this order, into ``--out-dir`` (default ``results/``, a folder git ignores):

1. ``defaults``: the two-sided scoreboard (in distribution, and where the data change)
   with its figures — about two hours on two cores;
2. ``uci``: the papers' UCI protocols beside their tables — many hours; it resumes from
   its cache in ``.bench_cache/``, so an interrupted run continues where it stopped;
3. ``speed``: the default fit against scikit-learn's MLP, in fresh processes.

Each step is the subcommand run with the arguments that :data:`STEPS` lists (the ones the
benchmarks page gives); ``--dry-run`` prints them as command lines, and ``--steps`` runs a
subset. Each subcommand's ``--help`` describes its protocol.
"""

import os
import shlex

HELP = "every table and figure of the benchmarks page (defaults, uci, speed) in one run"

#: (subcommand, arguments with {out} for the output folder), in the order they run
STEPS = [
    ("defaults", "--splits 3 --shift-splits 1 --max-rows 800 --json {out}/defaults.json "
                 "--out {out}/defaults.md --figure {out}/defaults_two_sided"),
    ("uci", "--protocol all --out {out}/uci.md --splits-csv {out}/uci_splits.csv "
            "--figure {out}/uci.png"),
    ("speed", "--sections sklearn --sklearn-sets all --repeats 3 --out {out}/speed.md"),
]


def commands(out_dir, steps=None):
    """The argument lists of the steps to run (all, or those named in ``steps``)."""
    return [[name, *shlex.split(args.format(out=out_dir))] for name, args in STEPS
            if steps is None or name in steps]


def add_arguments(parser):
    parser.add_argument("--out-dir", default="results", metavar="DIR",
                        help="folder of every table, record and figure (default: results)")
    parser.add_argument("--steps", nargs="+", choices=[name for name, _ in STEPS],
                        metavar="NAME", help="run only these steps: " +
                        ", ".join(name for name, _ in STEPS))
    parser.add_argument("--dry-run", action="store_true",
                        help="print the command of each step, run nothing")
    return parser


def main(args):
    from .__main__ import build_parser

    parser = build_parser()
    todo = commands(args.out_dir, args.steps)
    parsed = [parser.parse_args(argv) for argv in todo]  # every step's arguments are valid
    for argv, step in zip(todo, parsed):
        print("python -m benchmarks " + shlex.join(argv), flush=True)
        if not args.dry_run:
            os.makedirs(args.out_dir, exist_ok=True)
            step._main(step)
