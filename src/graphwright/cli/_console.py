"""Shared rich consoles: results on stdout, progress and warnings on stderr."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..diff.html import human_bytes  # noqa: F401  (re-exported: the commands import it from here)
from ..transforms.runner import observe_steps


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


#: ``on_progress(done, total, what)``: the callback long work takes to report how far it is.
ProgressCallback = Callable[[int, int, str], None]


def progress_bar(*, quiet: bool = False, console: Console | None = None) -> Progress:
    """A rich progress bar with an ETA on stderr, drawn only when stderr is a terminal: in a pipe,
    a file or with ``quiet`` it prints nothing at all.  Use it as a context manager."""
    err = console if console is not None else stderr()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
                    disable=quiet or not err.is_terminal)


@contextmanager
def progress_callback(description: str, *, quiet: bool = False,
                      console: Console | None = None) -> Iterator[ProgressCallback]:
    """A :data:`ProgressCallback` that moves one bar of :func:`progress_bar` (nothing off a terminal)."""
    with progress_bar(quiet=quiet, console=console) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=f"{description}: {what}"[:70])

        yield update


@contextmanager
def step_progress(description: str, *, quiet: bool = False, console: Console | None = None) -> Iterator[None]:
    """A bar counting the transform steps run inside the block (simplify's fixed point has no
    known total: steps done, the current step and the model's size, elapsed time), on a terminal only."""
    with progress_bar(quiet=quiet, console=console) as bar:
        task = bar.add_task(description, total=None)
        count = 0

        def on_step(label: str, nodes: int) -> None:
            nonlocal count
            count += 1
            bar.update(task, completed=count, description=f"{description}: step {count} {label} ({nodes} nodes)"[:80])

        with observe_steps(on_step):
            yield
