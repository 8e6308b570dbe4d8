"""A Ray session for sharded work (calibration, comparison): reuse, connect or start, then stop.

``with ray_session(address) as ray:`` yields the ``ray`` module with a session running: the one
already running in this process, else one connected to ``address`` (``auto``, ``ray://host:port``),
else a local cluster started here; a session started here is shut down on leaving.  A task that
raised a graphwright error comes back from :func:`gather` as that error with its one line, not
as Ray's wrapper with a remote traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import GraphwrightError

__all__ = ["ray_session", "gather", "import_ray"]


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray  # lazy: an optional extra, and a slow import only --ray needs
    except ImportError as e:
        raise GraphwrightError('--ray needs Ray: pip install "graphwright[ray]" (or "ray[default]")') from e
    return ray


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Any]:
    """The ``ray`` module with a running session (see the module docstring)."""
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise GraphwrightError(f"cannot start or reach the Ray cluster {address or '(local)'}: {e}") from e
        started = True
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def gather(ray: Any, refs: Sequence[Any], on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """The tasks' results in ``refs`` order; ``on_done(index, result)`` as each finishes."""
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                results[index[ref]] = ray.get(ref)
            except Exception as e:
                cause = getattr(e, "cause", None)
                if isinstance(cause, GraphwrightError):
                    raise type(cause)(str(cause)) from None
                raise
            if on_done is not None:
                on_done(index[ref], results[index[ref]])
    return results
