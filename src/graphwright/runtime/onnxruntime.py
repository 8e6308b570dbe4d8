"""The ``onnxruntime`` backend: ONNX models on onnxruntime's CPU provider.

The model is handed to onnxruntime as bytes.  External data is only read from
a directory graphwright has checked: first the session is built with an empty
directory for external data; if the model turns out to reference external
files, the file is read through the ONNX reader (which refuses ``..``,
absolute paths, symlinks and hard links) and the session is rebuilt with the
model's own directory.

Options: ``graph_optimization_level`` (``"disable"``, ``"basic"``,
``"extended"`` or ``"all"``, default ``"all"``), ``intra_op_num_threads``
(int, default: onnxruntime's choice).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .. import formats
from ..errors import VerificationError
from ..ir import DType
from .base import Backend, InputSpec, ModelSource, Session, check_feeds, one_line

__all__ = ["OPTIMIZATION_LEVELS", "OnnxRuntimeBackend"]

#: Accepted ``graph_optimization_level`` values, mapped to onnxruntime's enum names.
OPTIMIZATION_LEVELS: Mapping[str, str] = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
DEFAULT_OPTIMIZATION = "all"
_EXTERNAL_FOLDER_KEY = "session.model_external_initializers_file_folder_path"

_TYPE_STRINGS: Mapping[str, DType] = {
    "tensor(float)": DType.FLOAT32,
    "tensor(double)": DType.FLOAT64,
    "tensor(float16)": DType.FLOAT16,
    "tensor(bfloat16)": DType.BFLOAT16,
    "tensor(int8)": DType.INT8,
    "tensor(int16)": DType.INT16,
    "tensor(int32)": DType.INT32,
    "tensor(int64)": DType.INT64,
    "tensor(uint8)": DType.UINT8,
    "tensor(uint16)": DType.UINT16,
    "tensor(uint32)": DType.UINT32,
    "tensor(uint64)": DType.UINT64,
    "tensor(bool)": DType.BOOL,
    "tensor(string)": DType.STRING,
    "tensor(complex64)": DType.COMPLEX64,
    "tensor(complex128)": DType.COMPLEX128,
    "tensor(float8e4m3fn)": DType.FLOAT8E4M3FN,
    "tensor(float8e4m3fnuz)": DType.FLOAT8E4M3FNUZ,
    "tensor(float8e5m2)": DType.FLOAT8E5M2,
    "tensor(float8e5m2fnuz)": DType.FLOAT8E5M2FNUZ,
    "tensor(int4)": DType.INT4,
    "tensor(uint4)": DType.UINT4,
}


def _import_ort(backend: Backend) -> ModuleType:
    try:
        import onnxruntime  # type: ignore[import-untyped]  # lazy: slow to import, needed to run only
    except ImportError:
        raise backend.unavailable("onnxruntime") from None
    return onnxruntime


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    formats = ("onnx",)
    install_hint = "pip install onnxruntime"
    option_names = frozenset({"graph_optimization_level", "intra_op_num_threads"})

    def prepare(self, source: ModelSource, options: Mapping[str, Any]) -> Session:
        self.check_options(options)
        ort = _import_ort(self)
        level = str(options.get("graph_optimization_level", DEFAULT_OPTIMIZATION))
        if level not in OPTIMIZATION_LEVELS:
            raise VerificationError(
                f"graph_optimization_level must be one of {', '.join(OPTIMIZATION_LEVELS)}, not {level!r}"
            )
        threads = options.get("intra_op_num_threads")

        def session_options(folder: Path) -> Any:
            so = ort.SessionOptions()
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level])
            so.log_severity_level = 3
            if threads is not None:
                so.intra_op_num_threads = int(threads)
            so.add_session_config_entry(_EXTERNAL_FOLDER_KEY, str(folder))
            return so

        data = source.data
        if source.external_dir is not None:
            return OnnxRuntimeSession(self._create(ort, data, session_options(source.external_dir), source), source)
        with tempfile.TemporaryDirectory(prefix="graphwright-ort-") as empty:
            try:
                sess = ort.InferenceSession(data, session_options(Path(empty)), providers=["CPUExecutionProvider"])
                return OnnxRuntimeSession(sess, source)
            except Exception as e:  # onnxruntime raises its own exception classes
                if "external data" not in str(e).lower() or source.path is None:
                    raise VerificationError(f"onnxruntime cannot load {source.label}: {one_line(e)}") from None
        # The file references external data: let the ONNX reader vet every location first.
        formats.load(source.path)
        folder = source.path.resolve().parent
        return OnnxRuntimeSession(self._create(ort, data, session_options(folder), source), source)

    @staticmethod
    def _create(ort: ModuleType, data: bytes, so: Any, source: ModelSource) -> Any:
        try:
            return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception classes
            raise VerificationError(f"onnxruntime cannot load {source.label}: {one_line(e)}") from None


class OnnxRuntimeSession(Session):
    __slots__ = ("_label", "_session", "inputs", "outputs")

    def __init__(self, session: Any, source: ModelSource) -> None:
        self._session = session
        self._label = source.label
        self.inputs = [
            InputSpec(i.name, _TYPE_STRINGS.get(i.type, DType.UNDEFINED), _shape(i.shape))
            for i in session.get_inputs()
        ]
        self.outputs = [o.name for o in session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        check_feeds(self.inputs, feeds, label=self._label)
        names = list(outputs) if outputs is not None else list(self.outputs)
        unknown = [n for n in names if n not in self.outputs]
        if unknown:
            raise VerificationError(
                f"{self._label}: no output named {unknown[0]!r}; its outputs are {', '.join(map(repr, self.outputs))}"
            )
        try:
            results = self._session.run(names, {k: np.asarray(v) for k, v in feeds.items()})
        except Exception as e:  # onnxruntime raises its own exception classes
            raise VerificationError(f"onnxruntime failed running {self._label}: {one_line(e)}") from None
        return {name: np.asarray(r) for name, r in zip(names, results)}


def _shape(dims: Any) -> tuple[int | str | None, ...] | None:
    if dims is None:
        return None
    return tuple(d if isinstance(d, (int, str)) else None for d in dims)
