"""The ``tensorflow`` backend: frozen GraphDefs in a ``tf.compat.v1`` Session.

The GraphDef (binary or text) is imported with ``tf.import_graph_def(name="")``
so node names are unchanged.  Feeds and fetches use TF names: ``"node"``
(output 0) or ``"node:N"``; results are keyed exactly as requested.  Inputs are
the ``Placeholder`` ops; default outputs are the ops nothing consumes (by data
or control edge), leaving out constants, no-ops, placeholders, assignments
and checkpoint save/restore ops.

TensorFlow is optional: ``pip install 'graphwright[tf]'``.  This module is the only
one that imports it (:func:`import_tensorflow`); :class:`GraphDefEvaluator` computes
tensors of a GraphDef for ``fold_constants(backend=tensorflow)``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, VerificationError
from ..ir import DType
from .base import Backend, InputSpec, ModelSource, Session, check_feed, one_line

__all__ = [
    "NOT_OUTPUT_OPS",
    "GraphDefEvaluator",
    "GraphImportError",
    "CPU_DEVICE",
    "TensorFlowBackend",
    "UnknownTensorError",
    "grappler_optimize",
    "import_tensorflow",
    "in_tf_process",
    "is_output_candidate",
    "onednn_enabled",
    "run_batch",
    "run_graphdef",
    "session_config",
    "time_graphdef",
]

#: The device a local v1 Session places nodes on when no GPU is asked for.
CPU_DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"
_MISSING = BackendUnavailableError("TensorFlow is not installed: pip install 'graphwright[tf]'")

#: Op types never listed as default outputs (besides ``Assign*``, ``Save*`` and ``Restore*``).
NOT_OUTPUT_OPS = frozenset({
    "Const", "NoOp", "Placeholder", "PlaceholderV2", "PlaceholderWithDefault",
    "MergeV2Checkpoints", "ShardedFilename", "StringJoin",
})


def is_output_candidate(op_type: str) -> bool:
    """Whether an op nobody consumes counts as a model output (not a const/no-op/save op)."""
    if op_type in NOT_OUTPUT_OPS:
        return False
    return not op_type.startswith(("Assign", "Save", "Restore"))


def import_tensorflow(missing: BackendUnavailableError, *, log_level: str = "2") -> ModuleType:
    """The ``tensorflow`` module; raises ``missing`` (which names what to install) when it is not installed.

    ``TF_CPP_MIN_LOG_LEVEL`` is set to ``log_level`` unless the user set it (the first import
    in a process decides).  TensorFlow's C++ start-up chatter (oneDNN notices, absl pre-init
    warnings) would bury our report, and TF 2.21 prints it before honouring
    ``TF_CPP_MIN_LOG_LEVEL``: file descriptor 2 is silenced for the import only.  Import
    errors still arrive as Python exceptions.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", log_level)
    try:
        with _stderr_silenced():
            import tensorflow as tf  # type: ignore[import-untyped]  # lazy: optional, slow to import
    except ImportError:
        raise missing from None
    return tf


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    if "tensorflow" in sys.modules:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class TensorFlowBackend(Backend):
    name = "tensorflow"
    formats = ("graphdef",)
    install_hint = "pip install 'graphwright[tf]'"
    option_names = frozenset({"intra_op_parallelism_threads", "inter_op_parallelism_threads", "grappler"})

    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        self.check_options(options)
        tf = import_tensorflow(self.unavailable("TensorFlow"))
        graph_def = _parse(tf, source)
        graph = tf.Graph()
        try:
            with graph.as_default():
                tf.import_graph_def(graph_def, name="")
        except Exception as e:
            raise VerificationError(f"TensorFlow cannot import {source.label}: {one_line(e)}") from None
        config = session_config(
            tf,
            intra_op_parallelism_threads=int(options.get("intra_op_parallelism_threads", 0)),
            inter_op_parallelism_threads=int(options.get("inter_op_parallelism_threads", 0)),
            grappler=_flag(options.get("grappler", True)),
        )
        return TensorFlowSession(tf, graph, tf.compat.v1.Session(graph=graph, config=config), source)


def session_config(tf: ModuleType, *, intra_op_parallelism_threads: int = 0, inter_op_parallelism_threads: int = 0,
                   grappler: bool = True) -> Any:
    """A v1 ``ConfigProto``; ``grappler=False`` turns Grappler's meta-optimizer off (the graph runs as written).

    With Grappler off, TensorFlow's own graph passes still run (the oneDNN layout pass, which
    maps ``_FusedConv2D`` & co. to its kernels when oneDNN is on), but no remapper fusion.
    """
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra_op_parallelism_threads,
                                      inter_op_parallelism_threads=inter_op_parallelism_threads)
    if not grappler:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off")
    return bool(value)


def _parse(tf: ModuleType, source: ModelSource) -> Any:
    graph_def = tf.compat.v1.GraphDef()
    data = source.data
    try:
        if data[:1] in (b"\x0a", b"\x12", b"\x1a", b"\x22") or not data.strip():
            graph_def.ParseFromString(data)
        else:
            # lazy: text GraphDefs are rare, and protobuf stays out of `import graphwright`
            from google.protobuf import text_format  # type: ignore[import-untyped]

            text_format.Parse(data.decode("utf-8"), graph_def)
    except Exception as e:
        raise VerificationError(f"TensorFlow cannot parse {source.label} as a GraphDef: {one_line(e)}") from None
    return graph_def


class TensorFlowSession(Session):
    __slots__ = ("_graph", "_label", "_session", "_tf", "inputs", "outputs")

    def __init__(self, tf: ModuleType, graph: Any, session: Any, source: ModelSource) -> None:
        self._tf = tf
        self._graph = graph
        self._session = session
        self._label = source.label
        ops = graph.get_operations()
        self.inputs = [
            InputSpec(op.name, _dtype(op.get_attr("dtype")), _shape(tf.TensorShape(op.get_attr("shape"))))
            for op in ops
            if op.type == "Placeholder"
        ]
        consumed: set[str] = set()
        for op in ops:
            consumed.update(t.op.name for t in op.inputs)
            consumed.update(c.name for c in op.control_inputs)
        self.outputs = [
            op.name for op in ops if op.name not in consumed and op.outputs and is_output_candidate(op.type)
        ]

    def _tensor(self, name: str, what: str) -> Any:
        tensor_name = name if ":" in name else f"{name}:0"
        try:
            return self._graph.get_tensor_by_name(tensor_name)
        except (KeyError, ValueError) as e:
            raise VerificationError(f"{self._label}: no {what} tensor {name!r} ({one_line(e)})") from None

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else list(self.outputs)
        if not names:
            raise VerificationError(f"{self._label}: the graph has no outputs to fetch; name them explicitly")
        placeholders = {s.name: s for s in self.inputs}
        for key, array in feeds.items():
            spec = placeholders.get(_node(key))
            if spec is not None:
                check_feed(spec, np.asarray(array), label=self._label)
        fetches = [self._tensor(n, "output") for n in names]
        feed_dict = {self._tensor(k, "input"): np.asarray(v) for k, v in feeds.items()}
        try:
            results = self._session.run(fetches, feed_dict=feed_dict)
        except Exception as e:
            raise VerificationError(f"TensorFlow failed running {self._label}: {_tf_message(e)}") from None
        return {name: np.asarray(r) for name, r in zip(names, results)}

    def close(self) -> None:
        self._session.close()


class GraphImportError(ValueError):
    """TensorFlow refused to import the GraphDef; the message is the first line of its error."""


class UnknownTensorError(LookupError):
    """The graph has no tensor :attr:`name`; the message is TensorFlow's."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class GraphDefEvaluator:
    """Compute tensors of a serialized GraphDef with TensorFlow: one import, one session, many fetches.

    For constant folding with ``backend=tensorflow``: the caller decides which tensors to
    compute, this only runs TensorFlow.  Use it as a context manager (the session is closed
    on exit).  Raises ``missing`` when TensorFlow is not installed and
    :class:`GraphImportError` when TensorFlow cannot import the graph.  No feeds: the
    tensors asked for must depend on constants only.
    """

    def __init__(self, serialized_graph: bytes, *, missing: BackendUnavailableError) -> None:
        tf = import_tensorflow(missing, log_level="3")
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(serialized_graph)
        with tf.Graph().as_default() as graph:
            try:
                tf.import_graph_def(graph_def, name="")
            except Exception as e:  # TF raises ValueError or its own error types
                raise GraphImportError(_first_line(e)) from None
        self._tf = tf
        self._graph = graph
        self._session = tf.compat.v1.Session(graph=graph)

    def __enter__(self) -> GraphDefEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._session.close()

    def evaluate(self, tensor_names: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """The tensors named ``"node:index"``, fetched in one run; if that run fails, one at a time.

        Returns the arrays by name (as TensorFlow gives them, through ``np.asarray``) and,
        for each tensor TensorFlow failed to compute, the first line of its error.
        Raises :class:`UnknownTensorError` for a name the graph does not have.
        """
        if not tensor_names:
            return {}, {}
        errors = self._tf.errors
        try:
            arrays = self._session.run([self._tensor(n) for n in tensor_names])
        except errors.OpError:
            arrays = None
        if arrays is not None:
            return dict(zip(tensor_names, (np.asarray(a) for a in arrays))), {}
        values: dict[str, np.ndarray] = {}
        failures: dict[str, str] = {}
        for name in tensor_names:
            try:
                values[name] = np.asarray(self._session.run(self._tensor(name)))
            except errors.OpError as e:
                failures[name] = _first_line(e)
        return values, failures

    def _tensor(self, name: str) -> Any:
        try:
            return self._graph.get_tensor_by_name(name)
        except (KeyError, ValueError) as e:
            raise UnknownTensorError(name, str(e)) from None


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "message", None) or e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _node(name: str) -> str:
    node, _, port = name.partition(":")
    return node if port in ("", "0") else name


def _tf_message(error: BaseException) -> str:
    """The reason of a TF OpError, without its "Graph execution error" framing, plus the node."""
    message = str(getattr(error, "message", None) or error)
    framing = ("Graph execution error", "Detected at node", "Node:", "[[", "File ", "Traceback")
    reason = next(
        (ln.strip() for ln in message.splitlines() if ln.strip() and not ln.strip().startswith(framing)), ""
    )
    op = getattr(error, "op", None)
    node = getattr(op, "name", None) if op is not None else None
    text = reason or message
    return one_line(f"{one_line(text)} (node {node!r})" if node else text)


def _dtype(tf_dtype: Any) -> DType:
    name = getattr(tf_dtype, "name", str(tf_dtype))
    try:
        return DType({"half": "float16", "float": "float32", "double": "float64"}.get(name, name))
    except ValueError:
        return DType.UNDEFINED


def _shape(tf_shape: Any) -> tuple[int | None, ...] | None:
    if tf_shape.rank is None:
        return None
    return tuple(tf_shape.as_list())


# -- Grappler, running with Grappler off, and TensorFlow in a child process ------------------------
# TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported: which build's kernels and
# which remapper decisions apply is a property of the process.  in_tf_process runs one of the
# functions below in a fresh Python with the variable set, so one caller can compare both.


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs with oneDNN (``TF_ENABLE_ONEDNN_OPTS``, read at import)."""
    import_tensorflow(_MISSING, log_level="3")
    from tensorflow.python.util import _pywrap_util_port  # type: ignore[import-untyped]  # lazy: optional, slow

    return bool(_pywrap_util_port.IsMklEnabled())


def _graph_def(tf: ModuleType, graph_bytes: bytes) -> Any:
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(graph_bytes)
    return graph_def


def grappler_optimize(graph_bytes: bytes, fetches: Sequence[str], *, optimizers: Sequence[str] = ("remap",),
                      place_on: str | None = CPU_DEVICE) -> bytes:
    """The GraphDef after Grappler's meta-optimizer with only ``optimizers`` on, run once.

    ``optimizers`` are the meta-optimizer's own names (``remap`` is the remapper; ``constfold``,
    ``arithmetic``, ``layout``, ``dependency``, ``pruning``... the others).
    As a v1 Session would run it: nodes without a device are placed on ``place_on`` first
    (Grappler's remapper only fuses nodes it finds placed on a CPU or GPU), the ``fetches``
    (node names) are the nodes Grappler must preserve.  What the remapper emits depends on
    this process's oneDNN setting (:func:`onednn_enabled`).
    """
    tf = import_tensorflow(_MISSING, log_level="3")
    from tensorflow.core.protobuf import (  # type: ignore[import-untyped]  # lazy: TensorFlow is optional
        config_pb2,
        meta_graph_pb2,
        rewriter_config_pb2,
    )
    from tensorflow.python.grappler import tf_optimizer  # type: ignore[import-untyped]  # lazy: optional, slow

    graph_def = _graph_def(tf, graph_bytes)
    if place_on:
        for node in graph_def.node:
            if not node.device:
                node.device = place_on
    meta = meta_graph_pb2.MetaGraphDef()
    meta.graph_def.CopyFrom(graph_def)
    meta.collection_def["train_op"].node_list.value.extend(f.partition(":")[0] for f in fetches)
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.extend(optimizers)
    rewrite.min_graph_nodes = -1
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    optimized = tf_optimizer.OptimizeGraph(config, meta)
    return bytes(optimized.SerializeToString())


def run_graphdef(graph_bytes: bytes, feeds: Mapping[str, np.ndarray], fetches: Sequence[str], *,
                 grappler: bool = True, threads: int = 0) -> list[np.ndarray]:
    """Run a serialized GraphDef once in a v1 Session (``grappler=False``: as written, no remapper)."""
    tf = import_tensorflow(_MISSING, log_level="3")
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(_graph_def(tf, graph_bytes), name="")
    config = session_config(tf, intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads,
                            grappler=grappler)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        results = session.run([_tensor_name(f) for f in fetches], {_tensor_name(k): v for k, v in feeds.items()})
    return [np.asarray(r) for r in results]


def time_graphdef(graph_bytes: bytes, feeds: Mapping[str, np.ndarray], fetches: Sequence[str], *,
                  grappler: bool = True, threads: int = 1, repeat: int = 20, warmup: int = 3) -> float:
    """Best-of-``repeat`` seconds of one ``Session.run`` (after ``warmup`` runs), ``threads`` intra/inter-op."""
    tf = import_tensorflow(_MISSING, log_level="3")
    with tf.Graph().as_default() as graph:
        tf.import_graph_def(_graph_def(tf, graph_bytes), name="")
    config = session_config(tf, intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads,
                            grappler=grappler)
    fetch = [_tensor_name(f) for f in fetches]
    feed = {_tensor_name(k): v for k, v in feeds.items()}
    best = float("inf")
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        for _ in range(warmup):
            session.run(fetch, feed)
        for _ in range(repeat):
            start = time.perf_counter()
            session.run(fetch, feed)
            best = min(best, time.perf_counter() - start)
    return best


def run_batch(calls: Sequence[tuple[str, Sequence[Any], Mapping[str, Any]]]) -> list[Any]:
    """Several of this module's functions in one process: ``[(task, args, kwargs), ...]`` -> results."""
    return [_CHILD_TASKS[task](*args, **kwargs) for task, args, kwargs in calls]


_CHILD_TASKS: dict[str, Any] = {
    "batch": run_batch,
    "grappler_optimize": grappler_optimize,
    "run_graphdef": run_graphdef,
    "time_graphdef": time_graphdef,
    "onednn_enabled": onednn_enabled,
}


def in_tf_process(task: str, *args: Any, onednn: bool | None = None, timeout: float = 900, **kwargs: Any) -> Any:
    """Call one of this module's functions (by name) in a fresh Python; ``onednn`` sets ``TF_ENABLE_ONEDNN_OPTS``.

    ``task`` is ``grappler_optimize``, ``run_graphdef``, ``time_graphdef``, ``onednn_enabled`` or
    ``batch`` (a list of ``(task, args, kwargs)`` run in one process, see :func:`run_batch`);
    arguments and the result travel pickled through a temporary directory.  Raises
    :class:`VerificationError` with the child's last error line when it fails.
    """
    if task not in _CHILD_TASKS:
        raise ValueError(f"unknown task {task!r} (known: {', '.join(sorted(_CHILD_TASKS))})")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if onednn is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if onednn else "0"
    with tempfile.TemporaryDirectory(prefix="graphwright-tf-") as tmp:
        request, reply = os.path.join(tmp, "request.pkl"), os.path.join(tmp, "reply.pkl")
        with open(request, "wb") as f:
            pickle.dump((task, args, kwargs), f)
        code = f"from graphwright.runtime.tensorflow import _child_main; _child_main({request!r}, {reply!r})"
        try:
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise VerificationError(f"TensorFlow child process ({task}) took more than {timeout:g} s") from None
        if done.returncode != 0 or not os.path.exists(reply):
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            raise VerificationError(f"TensorFlow child process ({task}) failed: {lines[-1] if lines else done.returncode}")
        with open(reply, "rb") as f:
            ok, value = pickle.load(f)
    if not ok:
        raise VerificationError(f"TensorFlow child process ({task}): {value}")
    return value


def _child_main(request: str, reply: str) -> None:
    """The child side of :func:`in_tf_process` (pickles only our own parent's request file)."""
    with open(request, "rb") as f:
        task, args, kwargs = pickle.load(f)  # written by in_tf_process just before
    try:
        result: tuple[bool, Any] = (True, _CHILD_TASKS[task](*args, **kwargs))
    except Exception as e:  # reported to the parent as one line
        result = (False, _tf_message(e))
    with open(reply, "wb") as f:
        pickle.dump(result, f)


def _tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"
