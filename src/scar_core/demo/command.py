"""The ``scar demo`` subcommand.

Importing this module loads only argparse and numpy; the model, the splitter and tiktoken are
imported when the command runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

__all__ = ["register", "run_demo_command"]

_DESCRIPTION = """\
Run SCAR offline on the sample that ships with the package: three documents (a payments API
reference, a data-retention policy, a services contract) and 15 questions whose evidence mostly
crosses chunk boundaries. Uses the bundled all-MiniLM-L6-v2 model; no network is needed.

For every question it prints what plain top-k, top-k at SCAR's chunk budget, the static window
and SCAR return (chunks, tokens, recall of gold chunks and of evidence characters), and why SCAR
accepted or refused each neighbour. A summary table ends the run.
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand to the ``scar`` command's subparsers.

    Args:
        subparsers: What ``ArgumentParser.add_subparsers`` returned.

    Returns:
        The subcommand's parser; its ``handler`` default is :func:`run_demo_command`.
    """
    from scar_core.demo.runner import DEMO_DEFAULTS

    defaults = DEMO_DEFAULTS

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run SCAR offline on the bundled sample and show what it adds and why",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--chunk-size",
        metavar="N",
        type=int,
        default=defaults.chunk_size,
        help=f"characters per chunk, no overlap (default {defaults.chunk_size})",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=defaults.k,
        help=f"chunks retrieved per question (default {defaults.k})",
    )
    parser.add_argument(
        "--lambda",
        dest="lambda_",
        metavar="LAMBDA",
        type=float,
        default=defaults.lambda_,
        help=f"SCAR's boundary-penalty weight λ (default {defaults.lambda_:g})",
    )
    parser.add_argument(
        "--gamma",
        type=float,
        default=defaults.gamma,
        help=f"SCAR's relative threshold γ in (0, 1] (default {defaults.gamma:g}; the paper's is 0.8)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=defaults.window,
        help=f"neighbours considered on each side, for SCAR and the static window "
        f"(default {defaults.window})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the results as JSON instead of tables"
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar (it goes to stderr)"
    )
    parser.set_defaults(handler=run_demo_command)
    return parser


def run_demo_command(args: argparse.Namespace) -> int:
    """Run ``scar demo`` with parsed arguments; returns the exit status.

    Errors the user can fix (bad settings, a missing extra) are printed on stderr without a
    traceback, with exit status 2.
    """
    # The bundled model is a local folder; never let a library reach for the Hub. Keep the
    # libraries' own loading bars and load reports out of the demo's output (set these variables
    # yourself to see them).
    for variable, value in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("TRANSFORMERS_VERBOSITY", "error"),
    ):
        os.environ.setdefault(variable, value)
    from scar_core.demo.report import format_report
    from scar_core.demo.runner import DemoSettings, run_demo
    from scar_core.errors import ScarError

    started = time.perf_counter()
    try:
        settings = DemoSettings(
            chunk_size=args.chunk_size,
            k=args.k,
            lambda_=args.lambda_,
            gamma=args.gamma,
            window=args.window,
        )
        result = run_demo(
            settings,
            progress=not args.no_progress,
            status=lambda message: print(message, file=sys.stderr, flush=True),
        )
    except ScarError as exc:
        print(f"scar demo: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
    else:
        print(format_report(result))
        print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0
