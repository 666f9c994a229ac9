"""Command line of the benchmarks: ``python -m benchmarks <subcommand> ...``.

Each subcommand is a module with ``HELP`` (one line), ``add_arguments(parser)``
and ``main(args)``; add a new one (e.g. ``speed``) to :data:`SUBCOMMANDS`.
"""

import argparse
import importlib
import sys

#: subcommand name → module (relative to this package), imported when the parser is built.
SUBCOMMANDS = {
    "uci": ".uci",
    "speed": ".speed",
    "defaults": ".defaults",
    "convergence": ".convergence",
    "multilabel": ".multilabel",
    "multilabel_levers": ".multilabel_levers",
    "coldstart": ".cold_start",
    "selection": ".selection",
    "all": ".all",
    "decisions": ".decisions",
}


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Reproduce the seed papers' benchmark tables with sklaplace.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name, __package__)
        p = sub.add_parser(name, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv=None):
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return args._main(args)


if __name__ == "__main__":
    main()
