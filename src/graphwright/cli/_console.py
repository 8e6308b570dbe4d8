"""Shared rich consoles: results on stdout, progress and warnings on stderr."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape


class _Console(Console):
    """A rich console that lets a closed pipe reach ``main`` (rich would exit with 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


#: Width of tables when stdout is not a terminal: wide enough that nothing is cut or wrapped.
PIPE_WIDTH = 100_000


def stdout() -> Console:
    """Results.  In a terminal, tables fit its width (long names shortened, ``--json`` has them
    whole); in a pipe or a file nothing is ever cut: every line is as long as its content."""
    console = _Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = _Console(highlight=False, soft_wrap=False, width=PIPE_WIDTH)
    return console


def stderr() -> Console:
    return _Console(stderr=True, highlight=False)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


_QUOTED = re.compile(r"'[^']*'")


def print_refusals(console: Console, step: str, refusals: Sequence[tuple[str, str, str, str]], *,
                   verbose: bool = False, limit: int = 3) -> None:
    """One line per step saying how many matches its rewrites left alone and the commonest
    reasons; with ``verbose`` every refusal (rule, node, op, reason) on its own line."""
    if not refusals:
        return
    # alike reasons group: the names they quote ('conv1', 'x:0') are left out of the summary
    counts = Counter(_QUOTED.sub("'…'", reason) for _rule, _node, _op, reason in refusals)
    common = "; ".join(f"{n}x {escape(reason)}" if n > 1 else escape(reason) for reason, n in counts.most_common(limit))
    more = f" (+{len(counts) - limit} other reasons)" if len(counts) > limit and not verbose else ""
    noun = "match" if len(refusals) == 1 else "matches"
    console.print(f"{escape(step)}: {len(refusals)} {noun} left alone: {common}{more}", highlight=False)
    if verbose:
        for rule, node, op, reason in refusals:
            console.print(f"  {escape(rule)} at {escape(node)} ({escape(op)}): {escape(reason)}", highlight=False)
