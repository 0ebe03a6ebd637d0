"""The ``scar`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scar_core import __version__

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``scar`` command."""
    parser = argparse.ArgumentParser(
        prog="scar", description="Semantic Continuity-Aware Retrieval tools."
    )
    parser.add_argument("--version", action="version", version=f"scar {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Each subcommand module adds itself and sets a ``handler(args) -> int`` default.
    from scar_core.eval.command import register as register_eval

    register_eval(subparsers)
    from scar_core.demo.command import register as register_demo

    register_demo(subparsers)
    from scar_core.calibrate_command import register as register_calibrate

    register_calibrate(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``scar`` command and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    handler = getattr(args, "handler", None)
    return int(handler(args)) if handler is not None else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
