"""Entry point: argument parsing, dispatch, and the one place errors become exit codes.

Exit codes: 0 success; 1 a check failed (e.g. ``compare`` beyond tolerance);
2 bad input or usage (one line on stderr, no traceback); 3 an internal error
(a bug: one line, the traceback with ``--debug``); 130 interrupted; 141 the reader
of stdout went away (``| head``), silently.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from ..errors import GraphwrightError
from . import (
    batch_cmd,
    calibrate_cmd,
    compare_cmd,
    diff_cmd,
    extract_cmd,
    inspect_cmd,
    quantize_cmd,
    run_cmd,
    simplify_cmd,
    transform_cmd,
    view_cmd,
)

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: stdout closed by its reader (``| head``): 128 + SIGPIPE, what a shell reports for such a tool.
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"graphwright: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="graphwright",
        description="Inspect, transform and verify TensorFlow GraphDef, ONNX and TFLite models for deployment.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    parser.add_argument("--version", action="version", version=f"graphwright {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    transform_cmd.add_parser(sub)
    simplify_cmd.add_parser(sub)
    inspect_cmd.add_parsers(sub)
    compare_cmd.add_parser(sub)
    calibrate_cmd.add_parser(sub)
    run_cmd.add_parser(sub)
    extract_cmd.add_parser(sub)
    diff_cmd.add_parser(sub)
    view_cmd.add_parser(sub)
    batch_cmd.add_parser(sub)
    quantize_cmd.add_parser(sub)
    return parser


def _version() -> str:
    try:
        return metadata.version("graphwright")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; arguments left over are reported by the subcommand's parser (its --help is the one
    that helps), with a hint for the usual cause: a pipeline given without quotes."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(args, "command", None)
        sub = _subparsers(parser).get(command or "")
        hint = ""
        if command == "transform" and not any(e.startswith("-") for e in extra):
            hint = f"; quote the whole pipeline: --transforms '{getattr(args, 'transforms', '')} {' '.join(extra)}'"
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    return args


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a name that is not UTF-8 prints escaped, never fails
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = _parse(parser, argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as other command-line tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except GraphwrightError as e:
        print(f"graphwright: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("graphwright: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: say so in one line; the traceback only on request
        if args.debug:
            raise
        print(
            f"graphwright: internal error: {type(e).__name__}: {e} "
            "(this is a bug in graphwright; rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
