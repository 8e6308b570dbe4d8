"""Run jobs in child processes, one per model, at most ``workers`` at a time (:func:`run_local`).

Each job gets a fresh process (forked from a clean ``forkserver`` that has graphwright imported,
so starting one costs milliseconds, not an import).  The child runs :func:`~.work.run_job` and
sends its result back through a pipe.  A child that dies before sending one (a segfault in a
runtime, ``os._exit``, the OOM killer) is reported as ``crashed`` with the signal or exit code; a
child past ``timeout`` seconds is killed and reported as ``timeout``.  Either is retried up to
``retries`` times; a job's own errors are not retried (they would fail the same way).  Results
are handed to ``on_result`` as they finish and returned in job order.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from ..errors import GraphwrightError
from .jobs import Job
from .result import BatchResult
from .work import run_job

__all__ = ["run_local", "run_isolated", "crash_reason", "load_plugin"]

OnResult = Callable[[BatchResult], None]


def _context(preload: Sequence[str] = ()) -> Any:
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # Each child re-runs the parent's main module (multiprocessing's rule); with the module
        # and its imports already in the server, that re-run costs nothing (the command line's
        # modules cost 0.25 s a child otherwise).
        main = getattr(sys.modules.get("__main__"), "__spec__", None)
        extra = [main.name] if main is not None and main.name not in ("__main__", "") else []
        ctx.set_forkserver_preload(["graphwright.batch.warm", *extra, *preload])
    return ctx


def _child(job: dict[str, Any], plugins: Sequence[str], conn: Connection) -> None:
    try:
        for plugin in plugins:
            load_plugin(plugin)
        result = run_job(Job.from_dict(job))
    except Exception as e:  # a plugin that fails to import: this job's error, not the batch's
        result = BatchResult(name=job["name"], model=job["model"], output=job["output"], status="error",
                             error=f"{type(e).__name__}: {e}")
    conn.send(result.to_dict())
    conn.close()


def load_plugin(plugin: str) -> None:
    """Import a plugin: a module name, or the path of a ``.py`` file (imported under its stem)."""
    if plugin.endswith(".py"):
        path = Path(plugin)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise GraphwrightError(f"plugin {plugin}: no such Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(plugin)


def crash_reason(exitcode: int | None) -> str:
    """Why a worker process ended without a result, in words."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process killed by {name}"
    return f"worker process exited with code {exitcode} before reporting a result"


@dataclass
class _Running:
    index: int
    job: Job
    attempt: int
    process: Any
    conn: Connection
    started: float
    payload: dict[str, Any] | None = None


def run_local(jobs: Sequence[Job], *, workers: int = 1, retries: int = 0, timeout: float | None = None,
              plugins: Sequence[str] = (), on_result: OnResult | None = None,
              preload: Sequence[str] = ()) -> list[BatchResult]:
    """Run every job in a process of its own, ``workers`` at a time; results in job order.

    ``plugins`` are modules imported in each worker before its job (to register transforms);
    ``preload`` modules are imported once in the process workers are forked from (what the
    parent's main script imports: each worker re-runs that script, as multiprocessing does)."""
    if workers < 1:
        raise GraphwrightError(f"--jobs needs at least 1 worker, got {workers}")
    if retries < 0:
        raise GraphwrightError(f"--retries needs a count of at least 0, got {retries}")
    if timeout is not None and timeout <= 0:
        raise GraphwrightError(f"--timeout needs a positive number of seconds, got {timeout}")
    ctx = _context(preload)
    queue: deque[tuple[int, Job, int]] = deque((i, job, 1) for i, job in enumerate(jobs))
    running: list[_Running] = []
    results: list[BatchResult | None] = [None] * len(jobs)
    spent: dict[int, float] = {}

    def start(index: int, job: Job, attempt: int) -> None:
        receiver, sender = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_child, args=(job.to_dict(), list(plugins), sender),
                              name=f"graphwright-batch-{job.name}", daemon=True)
        process.start()
        sender.close()  # the child holds the only writer: its death shows as EOF here
        running.append(_Running(index, job, attempt, process, receiver, time.perf_counter()))

    def finish(run: _Running, status: str | None, error: str = "") -> None:
        running.remove(run)
        run.conn.close()
        run.process.join()
        spent[run.index] = spent.get(run.index, 0.0) + time.perf_counter() - run.started
        if run.payload is not None:
            result = BatchResult.from_dict(run.payload)
        else:
            status = status or "crashed"
            error = error or crash_reason(run.process.exitcode)
            if run.attempt <= retries:
                queue.append((run.index, run.job, run.attempt + 1))
                return
            result = BatchResult(name=run.job.name, model=run.job.model, output=run.job.output,
                                 status=status, error=error)
            result.seconds = round(spent[run.index], 4)
        result.attempts = run.attempt
        results[run.index] = result
        if on_result is not None:
            on_result(result)

    try:
        while queue or running:
            while queue and len(running) < workers:
                start(*queue.popleft())
            wait_for = None
            if timeout is not None:
                now = time.perf_counter()
                wait_for = max(0.0, min(r.started + timeout - now for r in running))
            ready = wait([r.conn for r in running] + [r.process.sentinel for r in running], timeout=wait_for)
            for run in list(running):
                if run.conn in ready and run.payload is None:
                    try:
                        run.payload = run.conn.recv()
                    except EOFError:  # died without a result
                        finish(run, None)
                        continue
                if run.payload is not None or run.process.sentinel in ready:
                    if run.payload is None and run.conn.poll():
                        try:
                            run.payload = run.conn.recv()
                        except EOFError:
                            pass
                    finish(run, None)
                elif timeout is not None and time.perf_counter() - run.started >= timeout:
                    run.process.kill()
                    finish(run, "timeout", f"stopped after {timeout:g} s")
    finally:
        for run in running:  # interrupted: leave no worker behind
            run.process.kill()
            run.process.join()
    return [r for r in results if r is not None]


def run_isolated(job: Job, *, retries: int = 0, timeout: float | None = None,
                 plugins: Sequence[str] = (), preload: Sequence[str] = ()) -> BatchResult:
    """One job in a child process of its own (what a Ray task runs): a crash becomes its result."""
    return run_local([job], workers=1, retries=retries, timeout=timeout, plugins=plugins, preload=preload)[0]
