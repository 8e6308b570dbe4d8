"""What the ONNX fusions share: targets, the ``com.microsoft`` opset import, constant checks, node building.

The fusions themselves live one per file (``fuse_layer_norm_onnx``, ``fuse_gelu_onnx``,
``fuse_ort_contrib_onnx``), each a set of rules run by :func:`graphwright.transforms.rules.apply_rules`
whose matches are checked with :func:`graphwright.patterns.predicates.why_not_closed`; the opset
look-up is :func:`graphwright.transforms._onnx.opset_version`.  Each takes ``target``:

``"standard"`` (default)
    emit only operators of the default ONNX domain (``LayerNormalization`` from
    opset 17, ``Gelu`` from opset 20); a fusion the model's opset cannot carry is
    skipped with a reason.
``"onnxruntime"``
    also emit onnxruntime's operators: ``LayerNormalization`` below opset 17 (onnxruntime's
    own, default domain), and from domain ``com.microsoft`` ``Gelu`` / ``FastGelu`` below
    opset 20, ``BiasGelu``, ``FastGelu`` with bias, ``FusedConv``, ``FusedMatMul``,
    ``SimplifiedLayerNormalization``, ``Attention`` / ``MultiHeadAttention``, and on request
    only (``fuse_skip_layer_norm``: slower than what it replaces on onnxruntime's CPU kernels)
    ``Skip(Simplified)LayerNormalization``.  The model gains the ``com.microsoft`` opset
    import (version 1) when one is emitted.

Everything here is O(1) per call.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import EllipsisType

import numpy as np

from ...errors import TransformError
from ...ir import Attr, Graph, Model, Node, Value, constant_value
from ...patterns import P, Pattern, drop_if_unread
from .._onnx import OPSET_IMPORT

__all__ = [
    "TARGETS", "STANDARD", "ONNXRUNTIME", "MS_DOMAIN", "check_target", "require_ms_domain", "scalar", "near",
    "new_node", "drop_unused_constants", "std_op",
]

STANDARD = "standard"
ONNXRUNTIME = "onnxruntime"
TARGETS = (STANDARD, ONNXRUNTIME)
#: onnxruntime's contrib operator domain, and the version its operators are registered under.
MS_DOMAIN = "com.microsoft"
MS_DOMAIN_VERSION = 1


def std_op(op: str, *inputs: Pattern | EllipsisType, commutative: bool = False, name: str | None = None) -> P:
    """``P`` restricted to the standard domain: a custom-domain ``Mul`` is not ours to fuse."""
    return P(op, *inputs, commutative=commutative, name=name, domain="")


def check_target(transform: str, target: str) -> str:
    """``target`` if it is one of :data:`TARGETS`, else a :class:`TransformError` naming the choices."""
    if target not in TARGETS:
        raise TransformError(
            f"{transform}: target must be one of {', '.join(TARGETS)}, got {target!r}")
    return target


def require_ms_domain(model: Model) -> None:
    """Add the ``com.microsoft`` opset import if the model lacks it (kept in file order)."""
    imports = dict(model.meta.get(OPSET_IMPORT) or {})
    if MS_DOMAIN not in imports:
        imports[MS_DOMAIN] = MS_DOMAIN_VERSION
        model.meta[OPSET_IMPORT] = imports


def scalar(value: Value | None) -> float | None:
    """The single element of a one-element constant, or None."""
    tensor = constant_value(value) if value is not None else None
    if tensor is None or tensor.size != 1:
        return None
    array = tensor.numpy()
    if array.dtype.kind not in "fiu":
        return None
    return float(array.reshape(-1)[0])


def near(value: Value | None, expected: float, rtol: float = 1e-3) -> bool:
    """A one-element constant within ``rtol`` of ``expected``."""
    got = scalar(value)
    return got is not None and bool(np.isclose(got, expected, rtol=rtol, atol=0.0))


def new_node(op: str, inputs: list[Value | None], like: Node, *, domain: str = "",
             attrs: dict[str, Attr] | None = None, outputs: int = 1) -> Node:
    """An ONNX node named after ``like`` whose first output copies ``like``'s first output's name, dtype, shape."""
    first = like.outputs[0]
    values = [Value(first.name, first.dtype, first.shape)]
    values += [Value(f"{first.name}__{op}_{i}") for i in range(1, outputs)]
    node = Node(op, inputs, dialect="onnx", name=like.name, domain=domain, attrs=attrs or {},
                outputs=values)
    return node


def drop_unused_constants(graph: Graph, values: Iterable[Value]) -> int:
    """Remove those of ``values`` (initializers or ``Constant`` outputs) nobody reads any more.

    For constants a fusion stopped reading without capturing them in its
    pattern (a ReduceMean's ``axes`` input).  O(len(values)).
    """
    return sum(drop_if_unread(graph, value) for value in dict.fromkeys(values))
