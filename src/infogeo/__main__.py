"""Command line: ``python -m infogeo demo [--out DIR] [--quick]`` (also the ``infogeo`` console script)."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="infogeo", description="infogeo: geometry-first Riemannian optimization.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser(
        "demo", help="run the end-to-end demo and write figures and a report",
        description="Fit a Gaussian by natural gradient, compare gradient descent, output-space descent and "
                    "Gauss-Newton on Rosenbrock, compare vanilla and natural gradient on the independence model, "
                    "draw KL balls and geodesics; write PNGs and report.md.")
    demo.add_argument("--out", default="infogeo-demo", metavar="DIR",
                      help="folder for the PNG figures and report.md (created if missing; default: ./infogeo-demo)")
    demo.add_argument("--quick", action="store_true",
                      help="fewer iterations and coarser figures (a few seconds; used by the tests)")
    bar = demo.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_const", const=True, default=None,
                     help="show the progress bar even when stderr is not a terminal")
    bar.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                     help="hide the progress bar (default: shown only when stderr is a terminal)")
    demo.add_argument("-v", "--verbose", action="store_true", help="log each step (logger 'infogeo')")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if args.command == "demo":
        import matplotlib
        matplotlib.use("Agg")  # never open a window
        from .demo import run_demo
        path = run_demo(args.out, quick=args.quick, progress=args.progress)
        print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
