"""Shared rich consoles: results on stdout, progress and warnings on stderr."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape


def stdout() -> Console:
    return Console(highlight=False, soft_wrap=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def print_refusals(console: Console, step: str, refusals: Sequence[tuple[str, str, str, str]], *,
                   verbose: bool = False, limit: int = 3) -> None:
    """One line per step saying how many matches its rewrites left alone and the commonest
    reasons; with ``verbose`` every refusal (rule, node, op, reason) on its own line."""
    if not refusals:
        return
    counts = Counter(reason for _rule, _node, _op, reason in refusals)
    common = "; ".join(f"{n}x {escape(reason)}" if n > 1 else escape(reason) for reason, n in counts.most_common(limit))
    more = f" (+{len(counts) - limit} other reasons)" if len(counts) > limit and not verbose else ""
    noun = "match" if len(refusals) == 1 else "matches"
    console.print(f"{escape(step)}: {len(refusals)} {noun} left alone: {common}{more}", highlight=False)
    if verbose:
        for rule, node, op, reason in refusals:
            console.print(f"  {escape(rule)} at {escape(node)} ({escape(op)}): {escape(reason)}", highlight=False)
