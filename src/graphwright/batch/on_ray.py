"""The same isolated work as Ray tasks (:func:`run_ray`; ``ray`` is the optional ``[ray]`` extra).

Each job is one Ray task, and the task runs the job exactly as the local runner does: in a child
process of its own (:func:`~.local.run_isolated`), so a model that crashes kills that child, not
the Ray worker, and comes back as the same ``crashed`` result with the same reason as locally.
Retries of crashes and time-outs happen inside the task the same way; Ray's own ``max_retries``
covers a lost node.  Results are handed to ``on_result`` as tasks finish (``ray.wait``).

Workers write the outputs themselves: on a multi-machine cluster the output paths must be on a
filesystem every node sees (and graphwright installed in the workers' environment).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import GraphwrightError
from .jobs import Job
from .local import run_isolated
from .ray_session import import_ray, ray_session
from .result import BatchResult

__all__ = ["run_ray", "import_ray"]

#: Ray's own retries of a task whose node or worker was lost (the job's crashes are retried inside).
NODE_RETRIES = 2


def _task(job: dict[str, Any], retries: int, timeout: float | None, plugins: list[str]) -> dict[str, Any]:
    # A Ray worker's main script imports ray: preloaded, each job's child re-runs it for free.
    return run_isolated(Job.from_dict(job), retries=retries, timeout=timeout, plugins=plugins,
                        preload=["ray"]).to_dict()


def run_ray(jobs: Sequence[Job], *, address: str | None = None, retries: int = 0, timeout: float | None = None,
            plugins: Sequence[str] = (), num_cpus: int | None = None,
            on_result: Callable[[BatchResult], None] | None = None) -> list[BatchResult]:
    """Run every job as a Ray task; results in job order.

    Uses the running Ray session when there is one; otherwise connects to ``address`` (``auto``,
    ``ray://host:port``) or, without one, starts a local cluster (of ``num_cpus`` CPUs) and stops it
    at the end."""
    if retries < 0:
        raise GraphwrightError(f"--retries needs a count of at least 0, got {retries}")
    with ray_session(address, num_cpus=num_cpus) as ray:
        task = ray.remote(num_cpus=1, max_retries=NODE_RETRIES)(_task)
        refs = {task.remote(job.to_dict(), retries, timeout, list(plugins)): i for i, job in enumerate(jobs)}
        results: list[BatchResult | None] = [None] * len(jobs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                i = refs[ref]
                try:
                    result = BatchResult.from_dict(ray.get(ref))
                except Exception as e:  # the task itself was lost past Ray's retries
                    job = jobs[i]
                    result = BatchResult(name=job.name, model=job.model, output=job.output, status="crashed",
                                         error=f"Ray task failed: {type(e).__name__}: {str(e).splitlines()[0]}")
                results[i] = result
                if on_result is not None:
                    on_result(result)
        return [r for r in results if r is not None]
