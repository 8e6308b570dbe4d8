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
from importlib import import_module

from ..errors import GraphwrightError

#: Each command and the module defining it, in the order ``--help`` lists them.  Only the module of
#: the command being run is imported (all of them for ``--help`` or an unknown command): each pulls
#: in its own dependencies (the TFLite schema, the quantizer, ...), ~0.6 s of imports in all, which
#: ``graphwright simplify`` should not pay.
COMMANDS = {
    "transform": "transform_cmd", "simplify": "simplify_cmd", "summarize": "inspect_cmd",
    "list-transforms": "inspect_cmd", "compare": "compare_cmd", "calibrate": "calibrate_cmd", "run": "run_cmd",
    "extract": "extract_cmd", "diff": "diff_cmd", "view": "view_cmd", "batch": "batch_cmd",
    "quantize": "quantize_cmd",
}

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: stdout closed by its reader (``| head``): 128 + SIGPIPE, what a shell reports for such a tool.
EXIT_BROKEN_PIPE = 141


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"graphwright: error: {message} (see '{self.prog} --help')\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, with the subcommand it names only (when it names one)."""
    parser = _Parser(
        prog="graphwright",
        description="Inspect, transform and verify TensorFlow GraphDef, ONNX and TFLite models for deployment.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    command = _command(argv)
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        module = import_module(f".{name}", __package__)
        adder = getattr(module, "add_parsers", None) or module.add_parser
        adder(sub)
    return parser


def _command(argv: Sequence[str] | None) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level options
    take no value)."""
    if argv is None:
        return None
    return next((word for word in argv if not word.startswith("-")), None)


class _Version(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from importlib import metadata  # lazy: scanning the installed distributions, for --version only

        try:
            version = metadata.version("graphwright")
        except metadata.PackageNotFoundError:  # running from a source tree that is not installed
            version = "unknown"
        print(f"graphwright {version}")
        parser.exit()


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
    parser = build_parser(sys.argv[1:] if argv is None else argv)
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
