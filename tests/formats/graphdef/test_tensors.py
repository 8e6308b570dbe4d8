"""TensorProto decoding/encoding, checked against TensorFlow's own ``tf.make_ndarray``."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from tensorboard.compat.proto import tensor_pb2, types_pb2

from graphwright.formats.graphdef import decode_tensor_proto, tensor_from_proto, tensor_to_proto
from graphwright.formats.graphdef.dtypes import GraphDefFormatError, dtype_from_tf, dtype_to_tf
from graphwright.ir import DType, Tensor

TP = tensor_pb2.TensorProto


@pytest.fixture(scope="module")
def tf():  # type: ignore[no-untyped-def]
    return pytest.importorskip("tensorflow")


def proto(dtype: int, shape: tuple[int, ...], **fields: object) -> TP:
    tp = TP(dtype=dtype)
    for d in shape:
        tp.tensor_shape.dim.add(size=d)
    for name, value in fields.items():
        if name == "tensor_content":
            tp.tensor_content = value  # type: ignore[assignment]
        else:
            getattr(tp, name).extend(value)  # type: ignore[arg-type]
    return tp


def plain(array: np.ndarray) -> np.ndarray:
    """TF returns quantized types as one-field structured arrays; take the field."""
    return array[array.dtype.names[0]] if array.dtype.names else array


def half_bits(values: list[float]) -> list[int]:
    return [int(b) for b in np.asarray(values, dtype=np.float16).view(np.uint16)]


D = types_pb2
# (id, proto) cases covering every typed field, splats (fewer values than elements), empties, scalars.
FIELD_CASES = [
    ("f32_full", proto(D.DT_FLOAT, (2, 3), float_val=[1, 2, 3, 4, 5, 6.5])),
    ("f32_splat1", proto(D.DT_FLOAT, (2, 3), float_val=[-1.25])),
    ("f32_splat_partial", proto(D.DT_FLOAT, (7,), float_val=[1.0, 2.0, 3.0])),
    ("f32_none", proto(D.DT_FLOAT, (2, 2))),
    ("f32_scalar", proto(D.DT_FLOAT, (), float_val=[3.5])),
    ("f32_empty", proto(D.DT_FLOAT, (0, 4))),
    ("f64_partial", proto(D.DT_DOUBLE, (5,), double_val=[1e300, -2.5])),
    ("i32", proto(D.DT_INT32, (4,), int_val=[-2147483648, 2147483647, 0, 7])),
    ("i32_splat", proto(D.DT_INT32, (3, 3), int_val=[5, -9])),
    ("i16", proto(D.DT_INT16, (3,), int_val=[-32768, 32767, 1])),
    ("i8", proto(D.DT_INT8, (4,), int_val=[-128, 127, -1])),
    ("u8", proto(D.DT_UINT8, (3,), int_val=[0, 255, 128])),
    ("u16", proto(D.DT_UINT16, (2, 2), int_val=[65535, 1])),
    ("qint8", proto(D.DT_QINT8, (3,), int_val=[-128, 5, 127])),
    ("quint8", proto(D.DT_QUINT8, (4,), int_val=[255, 0])),
    ("qint32", proto(D.DT_QINT32, (2,), int_val=[-7, 1 << 30])),
    ("qint16", proto(D.DT_QINT16, (3,), int_val=[-300])),
    ("quint16", proto(D.DT_QUINT16, (2,), int_val=[60000, 2])),
    ("i64", proto(D.DT_INT64, (3,), int64_val=[-(1 << 63), (1 << 63) - 1, 0])),
    ("i64_splat", proto(D.DT_INT64, (2, 2), int64_val=[1 << 40])),
    ("u32", proto(D.DT_UINT32, (3,), uint32_val=[4294967295, 0, 12])),
    ("u64", proto(D.DT_UINT64, (2,), uint64_val=[(1 << 64) - 1])),
    ("bool", proto(D.DT_BOOL, (5,), bool_val=[True, False, True])),
    ("bool_none", proto(D.DT_BOOL, (2,))),
    ("half", proto(D.DT_HALF, (4,), half_val=half_bits([1.5, -0.25, 65504.0, 0.0]))),
    ("half_splat", proto(D.DT_HALF, (2, 3), half_val=half_bits([0.1, 7.0]))),
    ("c64", proto(D.DT_COMPLEX64, (2,), scomplex_val=[1, 2, 3, 4])),
    ("c64_splat", proto(D.DT_COMPLEX64, (3,), scomplex_val=[1, -1])),
    ("c128", proto(D.DT_COMPLEX128, (2,), dcomplex_val=[1.5, 2, -3, 4e100])),
    ("str", proto(D.DT_STRING, (3,), string_val=[b"a", b"\xff\x00bytes", b""])),
    ("str_splat", proto(D.DT_STRING, (2, 2), string_val=[b"x", b"yz"])),
    ("str_none", proto(D.DT_STRING, (2,))),
]

RNG = np.random.default_rng(0)
CONTENT_CASES = [
    (D.DT_FLOAT, RNG.standard_normal((3, 4)).astype(np.float32)),
    (D.DT_DOUBLE, RNG.standard_normal((5,))),
    (D.DT_HALF, RNG.standard_normal((2, 2, 2)).astype(np.float16)),
    (D.DT_INT8, RNG.integers(-128, 128, (6,), dtype=np.int8)),
    (D.DT_UINT8, RNG.integers(0, 256, (2, 3), dtype=np.uint8)),
    (D.DT_INT16, RNG.integers(-30000, 30000, (4,), dtype=np.int16)),
    (D.DT_UINT16, RNG.integers(0, 65535, (4,), dtype=np.uint16)),
    (D.DT_INT32, RNG.integers(-(2**31), 2**31 - 1, (3, 1), dtype=np.int32)),
    (D.DT_INT64, RNG.integers(-(2**62), 2**62, (4,), dtype=np.int64)),
    (D.DT_UINT32, RNG.integers(0, 2**32 - 1, (4,), dtype=np.uint32)),
    (D.DT_UINT64, RNG.integers(0, 2**63, (2,), dtype=np.uint64)),
    (D.DT_BOOL, RNG.integers(0, 2, (7,)).astype(np.bool_)),
    (D.DT_COMPLEX64, (RNG.standard_normal(3) + 1j * RNG.standard_normal(3)).astype(np.complex64)),
    (D.DT_COMPLEX128, RNG.standard_normal(2) + 1j * RNG.standard_normal(2)),
    (D.DT_QINT8, RNG.integers(-128, 128, (5,), dtype=np.int8)),
    (D.DT_QUINT8, RNG.integers(0, 256, (5,), dtype=np.uint8)),
    (D.DT_QINT32, RNG.integers(-1000, 1000, (2, 2), dtype=np.int32)),
]


@pytest.mark.tf
@pytest.mark.parametrize("case", FIELD_CASES, ids=[c[0] for c in FIELD_CASES])
def test_typed_fields_decode_like_tensorflow(tf, case) -> None:  # type: ignore[no-untyped-def]
    _, tp = case
    tf_proto = tf.make_tensor_proto(0).__class__.FromString(tp.SerializeToString())
    expected = plain(tf.make_ndarray(tf_proto))
    tensor = tensor_from_proto(tp)
    assert not tensor.is_loaded  # lazy: nothing decoded yet
    got = tensor.numpy()
    assert got.shape == expected.shape == tensor.shape
    if expected.dtype == object:
        # TF's Python fills a string tensor that stores no values with str "" (C++ uses empty bytes).
        want = [x.encode() if isinstance(x, str) else x for x in expected.ravel().tolist()]
        assert got.ravel().tolist() == want
    else:
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.tf
@pytest.mark.parametrize("dtype,array", CONTENT_CASES, ids=[D.DataType.Name(c[0]) for c in CONTENT_CASES])
def test_tensor_content_decodes_like_tensorflow(tf, dtype, array) -> None:  # type: ignore[no-untyped-def]
    tp = proto(dtype, array.shape, tensor_content=array.tobytes())
    expected = plain(tf.make_ndarray(tf.make_tensor_proto(0).__class__.FromString(tp.SerializeToString())))
    got = tensor_from_proto(tp).numpy()
    assert got.dtype == expected.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, array)
    assert not got.flags.writeable


@pytest.mark.tf
@pytest.mark.parametrize("dtype,array", CONTENT_CASES, ids=[D.DataType.Name(c[0]) for c in CONTENT_CASES])
def test_new_tensors_encode_for_tensorflow(tf, dtype, array) -> None:  # type: ignore[no-untyped-def]
    ir_dtype, _ = dtype_from_tf(dtype)
    tensor = Tensor.from_numpy(array, dtype=ir_dtype)
    tp = tensor_to_proto(tensor)
    assert tp.dtype == dtype and tp.tensor_content  # numeric tensors go to tensor_content
    back = plain(tf.make_ndarray(tf.make_tensor_proto(0).__class__.FromString(tp.SerializeToString())))
    np.testing.assert_array_equal(back, array)


@pytest.mark.tf
def test_tensorflow_made_protos_decode(tf) -> None:  # type: ignore[no-untyped-def]
    values = [
        np.float32(2.5), np.arange(12, dtype=np.float32).reshape(3, 4), np.array([b"ab", b"c"]),
        np.array([[True, False]]), np.arange(6, dtype=np.float16), np.array([3, 4], dtype=np.int64),
        np.zeros((0, 2), np.int32), np.full((4, 4), 7, np.uint8),
    ]
    for value in values:
        tf_proto = tf.make_tensor_proto(value)
        ours = tensor_from_proto(TP.FromString(tf_proto.SerializeToString())).numpy()
        expected = tf.make_ndarray(tf_proto)
        assert ours.shape == expected.shape
        assert ours.tolist() == expected.tolist()
    # A splat made by TF itself: tf.make_tensor_proto with a shape and one value.
    splat = tf.make_tensor_proto(1.5, shape=[3, 2])
    np.testing.assert_array_equal(tensor_from_proto(TP.FromString(splat.SerializeToString())).numpy(),
                                  np.full((3, 2), 1.5, np.float32))


def test_source_is_reused_and_new_strings_encode() -> None:
    tp = proto(D.DT_FLOAT, (2,), float_val=[1.0])
    tensor = tensor_from_proto(tp)
    assert tensor_to_proto(tensor) is tp  # unchanged tensor: written exactly as read
    strings = Tensor.from_numpy(np.array([b"a", b"bc", b""], dtype=object), dtype=DType.STRING)
    out = tensor_to_proto(strings)
    assert list(out.string_val) == [b"a", b"bc", b""] and not out.tensor_content
    assert tensor_from_proto(out).numpy().tolist() == [b"a", b"bc", b""]
    empty = tensor_to_proto(Tensor.from_numpy(np.zeros((0, 3), np.float32)))
    assert [d.size for d in empty.tensor_shape.dim] == [0, 3] and not empty.tensor_content


def test_types_without_numpy_are_carried_not_decoded() -> None:
    bf16 = proto(D.DT_BFLOAT16, (2,), half_val=[0x3F80, 0x4000])
    tensor = tensor_from_proto(bf16)
    assert tensor.dtype is DType.BFLOAT16 and tensor_to_proto(tensor) is bf16
    with pytest.raises(TypeError, match="bfloat16"):
        tensor.numpy()
    int2 = proto(D.DT_INT2, (3,), int_val=[1])
    assert tensor_from_proto(int2).dtype is DType.UNDEFINED
    with pytest.raises(GraphDefFormatError):
        tensor_to_proto(Tensor(DType.BFLOAT16, (1,), loader=lambda: np.zeros(1)))


@pytest.mark.parametrize(
    "tp,message",
    [
        (proto(D.DT_FLOAT, (2, 3), tensor_content=b"\0" * 20), "needs 24 bytes"),
        (proto(D.DT_INT32, (2,), int_val=[1, 2, 3]), "stores 3 values"),
        (proto(D.DT_COMPLEX64, (2,), scomplex_val=[1, 2, 3]), "odd number"),
        (proto(D.DT_FLOAT, (-1, 2)), "negative dimension"),
        (proto(D.DT_FLOAT, (1 << 30, 1 << 30, 4)), "more than 2\\*\\*40"),
    ],
)
def test_malformed_protos_are_refused_when_read(tp: TP, message: str) -> None:
    with pytest.raises(GraphDefFormatError, match=message):
        tensor_from_proto(tp)
    unknown_rank = TP(dtype=D.DT_FLOAT)
    unknown_rank.tensor_shape.unknown_rank = True
    with pytest.raises(GraphDefFormatError, match="unknown rank"):
        tensor_from_proto(unknown_rank)


def test_dtype_enum_mapping_round_trips_with_ref_flag() -> None:
    for dtype in DType:
        enum = dtype_to_tf(dtype)
        assert dtype_from_tf(enum) == (dtype, False)
        if enum:
            assert dtype_from_tf(dtype_to_tf(dtype, ref=True)) == (dtype, True)
    assert dtype_from_tf(D.DT_FLOAT_REF) == (DType.FLOAT32, True)
    assert dtype_from_tf(D.DT_HALF) == (DType.FLOAT16, False)
    assert dtype_from_tf(D.DT_UINT2)[0] is None


def test_decoding_does_not_import_tensorflow() -> None:
    import subprocess

    code = (
        "import sys; from graphwright.formats import graphdef as g;"
        "from tensorboard.compat.proto import tensor_pb2 as t;"
        "p = t.TensorProto(dtype=1); p.tensor_shape.dim.add(size=2); p.float_val.append(3.0);"
        "assert g.tensor_from_proto(p).numpy().tolist() == [3.0, 3.0];"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert decode_tensor_proto(proto(D.DT_INT8, (2,), int_val=[-3])).tolist() == [-3, -3]
