"""Run one TF op two ways: our NumPy kernel, and TensorFlow eager (``tf.raw_ops``), then compare.

Imported only by tests marked ``tf``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from graphwright.ir import Attr, DType, Node
from graphwright.runtime import numpy_tf

tf = pytest.importorskip("tensorflow", reason="TensorFlow is the [tf] extra")

Arg = np.ndarray | Sequence[np.ndarray]
#: NodeDef attribute names that tf.raw_ops spells differently.
_RAW_NAMES = {"squeeze_dims": "axis"}


def _ir_attr(value: Any, key: str = "") -> Attr:
    if isinstance(value, Attr):
        return value
    if key == "shape":
        return Attr.shape(value)
    if isinstance(value, bool):
        return Attr.bool(value)
    if isinstance(value, int):
        return Attr.int(value)
    if isinstance(value, float):
        return Attr.float(value)
    if isinstance(value, DType):
        return Attr.dtype(value)
    if isinstance(value, (str, bytes)):
        return Attr.string(value)
    return Attr.ints(value)


def _raw_attr(value: Any) -> Any:
    if isinstance(value, DType):
        return tf.as_dtype(value.value)
    if isinstance(value, bytes):
        return value.decode()
    return value


def node_for(op: str, attrs: Mapping[str, Any] | None = None) -> Node:
    return Node(op, [], dialect="tf", name="n", attrs={k: _ir_attr(v, k) for k, v in (attrs or {}).items()})


def ours(op: str, args: Sequence[Arg], attrs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
    """Our kernel's outputs (raises KernelError like TF raises)."""
    flat: list[np.ndarray] = []
    for a in args:
        flat.extend(a) if isinstance(a, (list, tuple)) else flat.append(a)
    return numpy_tf.evaluate(node_for(op, attrs), flat)


def theirs(op: str, args: Sequence[Arg], attrs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
    """TensorFlow's outputs (raises TF's error)."""
    fn = getattr(tf.raw_ops, op)
    names = list(inspect.signature(fn).parameters)
    kwargs: dict[str, Any] = {}
    for name, a in zip(names, args):
        kwargs[name] = [tf.constant(x) for x in a] if isinstance(a, (list, tuple)) else tf.constant(a)
    kwargs.update({_RAW_NAMES.get(k, k): _raw_attr(v) for k, v in (attrs or {}).items()})
    with tf.device("/CPU:0"):
        out = fn(**kwargs)
    if out is None or (hasattr(out, "type") and out.type == "NoOp"):
        return []
    if isinstance(out, (list, tuple)):
        return [np.asarray(t.numpy()) for t in out]
    return [np.asarray(out.numpy())]


def same(op: str, args: Sequence[Arg], attrs: Mapping[str, Any] | None = None, *,
         rtol: float = 0.0, atol: float = 0.0) -> list[np.ndarray]:
    """Assert both agree: same outputs (type, shape, values; NaN equal to NaN), or both refuse.

    Exact unless ``rtol``/``atol`` are given.  Returns our outputs.
    """
    try:
        expected = theirs(op, args, attrs)
    except (tf.errors.OpError, ValueError, TypeError) as e:
        with pytest.raises(numpy_tf.KernelError):
            got = ours(op, args, attrs)
            print(f"{op}: TensorFlow refused ({str(e).splitlines()[0][:200]}) but we returned {got}")
        return []
    got = ours(op, args, attrs)
    assert len(got) == len(expected), f"{op}: {len(got)} outputs, TensorFlow has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        where = f"{op} output {i} with attrs {attrs} on {[getattr(a, 'dtype', None) for a in args]}"
        assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, TensorFlow {e.dtype}"
        assert g.shape == e.shape, f"{where}: shape {g.shape}, TensorFlow {e.shape}"
        if g.dtype == object:
            assert g.tolist() == e.tolist(), where
        elif rtol or atol:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=where)
        else:
            np.testing.assert_array_equal(g, e, err_msg=where)
    return got
