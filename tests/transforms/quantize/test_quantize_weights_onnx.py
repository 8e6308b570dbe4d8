"""quantize_weights on ONNX: int8 initializers behind DequantizeLinear, checked on onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright.ir import DType, constant_value

from ._helpers import EXAMPLE


@pytest.mark.parametrize("source", ["example", "cnn"])
def test_onnx_initializers_become_int8_with_dequantize_linear(source: str, tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from graphwright.verify import compare

    if source == "example":
        path = EXAMPLE.with_suffix(".onnx")
    else:
        from tests.models import torch_onnx

        path = torch_onnx("cnn").path
    model = gw.load(path)
    report = gw.transform(model, "quantize_weights(minimum_size=1024)")
    stats = report.steps[0].stats
    assert report.changed and stats["initializers_quantized"] >= 1
    dq = [n for n in model.graph if n.op == "DequantizeLinear"]
    assert len(dq) == stats["initializers_quantized"]
    assert all(constant_value(n.inputs[0]).dtype is DType.INT8 for n in dq)
    out = tmp_path / "q.onnx"
    gw.save(model, out)
    onnx.checker.check_model(str(out))
    assert out.stat().st_size < 0.85 * path.stat().st_size
    result = compare(path, out, rtol=0.05, atol=0.01)  # onnxruntime runs both
    assert result.ok, [(o.name, o.max_abs) for o in result.outputs]


def test_onnx_symmetric_int8_error_is_half_a_step() -> None:
    from graphwright.transforms.quantize.quantize_weights_onnx import symmetric_int8

    w = np.random.default_rng(0).normal(0, 1, (8, 3, 3, 3)).astype(np.float32)
    codes, scale = symmetric_int8(w, 0)
    assert codes.dtype == np.int8 and scale.shape == (8,) and np.abs(codes).max() == 127
    restored = codes.astype(np.float32) * scale[:, None, None, None]
    assert np.all(np.abs(restored - w) <= scale[:, None, None, None] / 2 + 1e-7)


# -- 4-bit: int4/uint4 blocks along K, against onnxruntime's MatMulNBitsQuantizer ------------------------------

def _mlp_4bit(path, opset: int = 17, extra_op: str | None = None):
    """x[2, 72] -> MatMul(W1[72, 48]) -> Relu -> MatMul(W2[48, 16]) (+ an optional op that changes with the opset)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    rng = np.random.default_rng(4)
    w1 = rng.normal(0, 0.3, (72, 48)).astype(np.float32)
    w1[:32, 0] = 0.0  # an all-zero block: scale 0
    w1[32:64, 1] = np.abs(w1[32:64, 1])  # an all-positive block: the peak is positive, the scale negative
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"), oh.make_node("Relu", ["h"], ["r"], name="relu"),
             oh.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    outputs = [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])]
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 72])]
    if extra_op == "ReduceMean":
        nodes.append(oh.make_node("ReduceMean", ["y"], ["m"], axes=[1], name="mean"))
        outputs.append(oh.make_tensor_value_info("m", TensorProto.FLOAT, [2, 1]))
    if extra_op == "GridSample":  # its mode names changed at opset 20
        nodes.append(oh.make_node("GridSample", ["img", "grid"], ["s"], name="sample"))
        inputs += [oh.make_tensor_value_info("img", TensorProto.FLOAT, [1, 1, 4, 4]),
                   oh.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, 2, 2])]
        outputs.append(oh.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1, 2, 2]))
    graph = oh.make_graph(nodes, "mlp4", inputs, outputs,
                          [numpy_helper.from_array(w1, "w1"),
                           numpy_helper.from_array(rng.normal(0, 0.3, (48, 16)).astype(np.float32), "w2")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _bert():
    from tests.models.build_onnx_corpus import corpus_model

    return corpus_model("hf_bert-ts-dyn").path


def _feeds(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    if name == "mlp":
        return {"x": rng.normal(0, 1, (2, 72)).astype(np.float32)}
    ids = rng.integers(0, 1000, (2, 16), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def _options(symmetric: bool, target: str, block_size: int = 32, method: str = "rtn"):
    """rtn: onnxruntime's round-to-nearest blocks (the same bytes as MatMulNBitsQuantizer); mse: the default.
    MatMulNBits without accuracy_level (float32 compute, as MatMulNBitsQuantizer writes it): the same outputs."""
    from graphwright.transforms.quantize.options import QuantOptions

    return QuantOptions(weight_type="int4" if symmetric else "uint4", symmetric_weights=symmetric,
                        block_size=block_size, target=target, int4_method=method, accuracy_level=0)


def _run(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _raw_initializers(path) -> dict[str, tuple[int, list[int], bytes]]:
    import onnx
    from onnx import numpy_helper

    return {t.name: (t.data_type, list(t.dims), t.raw_data or numpy_helper.to_array(t).tobytes())
            for t in onnx.load(str(path)).graph.initializer}


@pytest.mark.parametrize("name", ["mlp", "bert"])
@pytest.mark.parametrize("target", ["onnxruntime", "generic"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_4bit_weights_are_byte_identical_to_matmul_nbits_quantizer(name: str, target: str, symmetric: bool,
                                                                   tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    src = _mlp_4bit(tmp_path / "mlp.onnx") if name == "mlp" else _bert()
    fmt = QuantFormat.QOperator if target == "onnxruntime" else QuantFormat.QDQ
    anchor = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=symmetric, quant_format=fmt)
    anchor.process()
    onnx.save(anchor.model.model, tmp_path / "ort.onnx")
    model = gw.load(src)
    result = quantize_onnx_initializers(model, minimum_size=0, options=_options(symmetric, target))
    gw.save(model, tmp_path / "gw.onnx")
    onnx.checker.check_model(str(tmp_path / "gw.onnx"))

    theirs, ours = _raw_initializers(tmp_path / "ort.onnx"), _raw_initializers(tmp_path / "gw.onnx")
    assert set(ours) == set(theirs)
    assert ours == theirs  # element type, dims and packed bytes of every weight, scale and zero point
    ops = {n.op_type for n in onnx.load(str(tmp_path / "gw.onnx")).graph.node}
    assert ("MatMulNBits" in ops) == (target == "onnxruntime") and result.stats["matmuls_quantized"] >= 2
    if target == "generic":
        assert onnx.load(str(tmp_path / "gw.onnx")).opset_import[0].version == 21

    feeds = _feeds(name)
    (flt,), (ref,), (out,) = _run(src, feeds)[:1], _run(tmp_path / "ort.onnx", feeds)[:1], _run(tmp_path / "gw.onnx",
                                                                                                   feeds)[:1]
    np.testing.assert_array_equal(out, ref)  # same weights, same kernels
    # sixteen levels per block: a coarse but bounded error (the per-element bound is tested below)
    assert np.abs(out - flt).max() <= 0.25 * np.abs(flt).max()


def _dequantized_by_hand(path, weight: str, symmetric: bool, target: str, k: int, n: int, block: int):
    """(dequantized W[K, N], |scale| broadcast to [K, N]) from the saved initializers, unpacked in NumPy."""
    import onnx
    from onnx import numpy_helper

    inits = {t.name: t for t in onnx.load(str(path)).graph.initializer}
    rows = np.arange(k) // block
    if target == "generic":
        codes = numpy_helper.to_array(inits[f"{weight}_DQ_Q4"]).astype(np.int32)
        scale = numpy_helper.to_array(inits[f"{weight}_DQ_scales"])[rows]
        zp = 0 if symmetric else numpy_helper.to_array(inits[f"{weight}_DQ_zero_points"]).astype(np.int32)[rows]
        return (codes - zp) * scale, np.abs(scale)
    packed = numpy_helper.to_array(inits[f"{weight}_Q4"])  # [N, kb, block/2]
    nibbles = np.stack([packed & 15, packed >> 4], axis=-1).reshape(n, -1)[:, :k].astype(np.int32).T
    scale = numpy_helper.to_array(inits[f"{weight}_scales"]).T[rows]  # [N, kb] -> [K, N]
    if symmetric:
        zp = 8
    else:
        zpp = numpy_helper.to_array(inits[f"{weight}_zero_points"])
        zp = np.stack([zpp & 15, zpp >> 4], axis=-1).reshape(n, -1).astype(np.int32).T[rows]
    return (nibbles - zp) * scale, np.abs(scale)


@pytest.mark.parametrize("target", ["onnxruntime", "generic"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_4bit_runs_on_onnxruntime_and_dequantizes_within_half_a_step(target: str, symmetric: bool, tmp_path) -> None:
    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    src = _mlp_4bit(tmp_path / "mlp.onnx")
    w1 = np.asarray(gw.load(src).graph.initializers[0].const.numpy())
    model = gw.load(src)
    quantize_onnx_initializers(model, minimum_size=0, options=_options(symmetric, target))
    # only the first MatMul: x = I gives its dequantized weight exactly as onnxruntime computes it
    model.graph.set_outputs([next(n for n in model.graph if n.name.startswith("mm1")).output])
    gw.save(model, tmp_path / "q.onnx")
    restored, step = _dequantized_by_hand(tmp_path / "q.onnx", "w1", symmetric, target, 72, 48, 32)
    error = np.abs(w1 - restored)
    within = error <= step / 2 + 1e-6  # the 4-bit bound, per element
    if symmetric:  # onnxruntime's symmetric blocks stop at 7|s| on the side opposite the peak (-8 -> the peak)
        clipped = ~within
        assert np.all(np.isclose(np.abs(restored[clipped]), 7 * step[clipped], rtol=1e-6))  # at the short end
        assert np.all(np.abs(w1[clipped]) > 7 * step[clipped]) and np.all(error[clipped] <= step[clipped] + 1e-6)
        assert clipped.mean() < 0.01
    else:
        assert within.all()
    assert error.max() > 0  # really quantized
    import onnx
    from onnx import helper as oh

    proto = onnx.load(str(tmp_path / "q.onnx"))
    proto.graph.input[0].CopyFrom(oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [72, 72]))
    proto.graph.output[0].CopyFrom(oh.make_tensor_value_info(proto.graph.output[0].name, onnx.TensorProto.FLOAT,
                                                             [72, 48]))
    onnx.save(proto, tmp_path / "eye.onnx")
    (ran,) = _run(tmp_path / "eye.onnx", {"x": np.eye(72, dtype=np.float32)})
    np.testing.assert_allclose(ran, restored, rtol=1e-6, atol=1e-7)


def test_4bit_opset_raise_moves_reduce_axes_to_an_input(tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    src = _mlp_4bit(tmp_path / "reduce.onnx", extra_op="ReduceMean")
    model = gw.load(src)
    result = quantize_onnx_initializers(model, minimum_size=0, options=_options(True, "generic"))
    assert result.notes == ["opset 17 -> 21: 1 reductions take their axes as an input"]
    gw.save(model, tmp_path / "q.onnx")
    onnx.checker.check_model(str(tmp_path / "q.onnx"), full_check=True)  # opset 21 schemas, with shapes
    mean = next(n for n in onnx.load(str(tmp_path / "q.onnx")).graph.node if n.op_type == "ReduceMean")
    assert len(mean.input) == 2 and not [a for a in mean.attribute if a.name == "axes"]
    y, m = _run(tmp_path / "q.onnx", _feeds("mlp"))
    np.testing.assert_allclose(m, y.mean(axis=1, keepdims=True), rtol=1e-6, atol=1e-6)


def test_4bit_opset_raise_is_refused_when_it_changes_meaning(tmp_path) -> None:
    from graphwright.errors import TransformError
    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    src = _mlp_4bit(tmp_path / "sample.onnx", extra_op="GridSample")
    model = gw.load(src)
    with pytest.raises(TransformError, match=r"would change GridSample.*target=onnxruntime"):
        quantize_onnx_initializers(model, minimum_size=0, options=_options(True, "generic"))
    assert not any(n.op == "DequantizeLinear" for n in model.graph)  # nothing touched
    old = _mlp_4bit(tmp_path / "old.onnx", opset=11)
    with pytest.raises(TransformError, match="too old"):
        quantize_onnx_initializers(gw.load(old), minimum_size=0, options=_options(True, "generic"))
    result = quantize_onnx_initializers(model, minimum_size=0, options=_options(True, "onnxruntime"))
    assert result.stats["matmuls_quantized"] == 2  # MatMulNBits needs no opset change
    gw.save(model, tmp_path / "nbits.onnx")
    rng = np.random.default_rng(7)
    feeds = {**_feeds("mlp"), "img": rng.normal(0, 1, (1, 1, 4, 4)).astype(np.float32),
             "grid": rng.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)}
    outs, floats = _run(tmp_path / "nbits.onnx", feeds), _run(src, feeds)
    np.testing.assert_array_equal(outs[1], floats[1])  # GridSample untouched, at its own opset


def test_4bit_through_the_pipeline_with_exclusions(tmp_path) -> None:
    src = _mlp_4bit(tmp_path / "mlp.onnx")
    model = gw.load(src)
    report = gw.transform(model, "quantize_weights(bits=4, block_size=16, minimum_size=0, target=onnxruntime, "
                                 "exclude_nodes=mm2)")
    step = report.steps[0]
    assert step.stats["matmuls_quantized"] == 1 and any("mm2" in note and "excluded" in note for note in step.notes)
    assert [n.op for n in model.graph if n.op in ("MatMul", "MatMulNBits")] == ["MatMulNBits", "MatMul"]
    nbits = next(n for n in model.graph if n.op == "MatMulNBits")
    assert (nbits.attr("K"), nbits.attr("N"), nbits.attr("bits"), nbits.attr("block_size")) == (72, 48, 4, 16)
    gw.save(model, tmp_path / "q.onnx")
    (flt,), (out,) = _run(src, _feeds("mlp")), _run(tmp_path / "q.onnx", _feeds("mlp"))
    assert 0 < np.abs(out - flt).max() <= 0.25 * np.abs(flt).max()


def test_onnx_weight_type_uint8_is_refused() -> None:
    from graphwright.errors import TransformError
    from graphwright.transforms.quantize.options import QuantOptions
    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    model = gw.load(EXAMPLE.with_suffix(".onnx"))
    with pytest.raises(TransformError, match="int8, int4 or uint4"):
        quantize_onnx_initializers(model, minimum_size=0, options=QuantOptions(weight_type="uint8"))


@pytest.mark.parametrize("symmetric", [True, False])
def test_4bit_odd_k_differs_only_in_the_unused_padding_nibble(symmetric: bool, tmp_path) -> None:
    """K = 45, block 16: the last block holds 13 rows, so its last byte has one unused high nibble.  onnxruntime
    leaves a stale code there (row K-2's, from its previous loop iteration); graphwright writes 0.  MatMulNBits
    never reads it: every other byte, the scales and zero points are identical, and so are the outputs."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    rng = np.random.default_rng(6)
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "odd",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 45])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])],
                          [numpy_helper.from_array(rng.normal(0, 1, (45, 10)).astype(np.float32), "w")])
    proto = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.save(proto, tmp_path / "float.onnx")  # before the anchor, which rewrites the proto it is given
    anchor = MatMulNBitsQuantizer(proto, block_size=16, is_symmetric=symmetric)
    anchor.process()
    onnx.save(anchor.model.model, tmp_path / "ort.onnx")
    model = gw.load(tmp_path / "float.onnx")
    quantize_onnx_initializers(model, minimum_size=0, options=_options(symmetric, "onnxruntime", block_size=16))
    gw.save(model, tmp_path / "gw.onnx")
    theirs, ours = _raw_initializers(tmp_path / "ort.onnx"), _raw_initializers(tmp_path / "gw.onnx")
    assert {k: v for k, v in ours.items() if k != "w_Q4"} == {k: v for k, v in theirs.items() if k != "w_Q4"}
    a = np.frombuffer(theirs["w_Q4"][2], np.uint8).reshape(10, 3, 8).copy()
    b = np.frombuffer(ours["w_Q4"][2], np.uint8).reshape(10, 3, 8).copy()
    assert (a[:, 2, 6] >> 4 != 0).any() and (b[:, 2, 6] >> 4 == 0).all()  # byte 6 of block 2: row 44 + padding
    a[:, 2, 6] &= 15
    np.testing.assert_array_equal(a, b)
    feeds = {"x": rng.normal(0, 1, (3, 45)).astype(np.float32)}
    np.testing.assert_array_equal(_run(tmp_path / "gw.onnx", feeds)[0], _run(tmp_path / "ort.onnx", feeds)[0])


def test_exclusions_and_notes_of_int8_and_4bit(tmp_path) -> None:
    src = _mlp_4bit(tmp_path / "mlp.onnx")
    model = gw.load(src)
    report = gw.transform(model, "quantize_weights(minimum_size=0, exclude_nodes=mm2)")
    step = report.steps[0]
    assert step.stats["initializers_quantized"] == 1 and step.notes == ["w2: left float (every reader is excluded)"]
    assert {v.name for v in model.graph.initializers if v.const.dtype is DType.FLOAT32} == {"w2", "w1_scale"}
    gw.save(model, tmp_path / "q8.onnx")
    (flt,), (out,) = _run(src, _feeds("mlp")), _run(tmp_path / "q8.onnx", _feeds("mlp"))
    assert 0 < np.abs(out - flt).max() <= 0.02 * np.abs(flt).max()

    from tests.models import torch_onnx

    path = torch_onnx("cnn").path
    cnn = gw.load(path)
    gemms = [n.name for n in cnn.graph if n.op == "Gemm"]
    assert gemms and all(n.attr("transB", 0) for n in cnn.graph if n.op == "Gemm")  # torch's Linear
    report = gw.transform(cnn, "quantize_weights(bits=4, minimum_size=64)")
    step = report.steps[0]
    assert report.changed and step.stats["matmuls_quantized"] == len(gemms)  # the classifier, transB=1
    assert any("Conv and others: use 8 bits" in note for note in step.notes)  # the convolutions stay float
    assert sum(n.op == "DequantizeLinear" for n in cnn.graph) == len(gemms)
    assert all(n.attr("axis") == 1 for n in cnn.graph if n.op == "DequantizeLinear")  # W[N, K]: blocks along K


def test_4bit_rounding_is_c_roundf() -> None:
    """onnxruntime's kernels round with C's roundf (halves away from zero); the largest float below 0.5 stays 0."""
    import ctypes
    import ctypes.util

    from graphwright.transforms.quantize._nbits_onnx import _roundf

    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.roundf.restype, libm.roundf.argtypes = ctypes.c_float, [ctypes.c_float]
    halves = np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)
    near = [np.nextafter(halves, np.float32(np.inf) * s) for s in (1, -1)]  # one ulp either side of each half
    x = np.concatenate([np.array([0.49999997, -0.49999997, 0.5, -2.5, 7.4999995, 8388607.5, 4194303.5, 1e-30],
                                 np.float32), halves, *near, np.nextafter(near[0], np.float32(np.inf)),
                        np.random.default_rng(0).uniform(-20, 20, 5000).astype(np.float32),
                        np.random.default_rng(1).uniform(-1, 1, 5000).astype(np.float32)])
    np.testing.assert_array_equal(_roundf(x), np.array([libm.roundf(float(v)) for v in x], np.float32))


def test_4bit_generic_on_llama_loads_where_the_anchors_model_does_not(tmp_path) -> None:
    """Llama's RMSNorm is ReduceMean(axes=[-1]) at opset 17.  MatMulNBitsQuantizer's QDQ form forces opset 21 and
    leaves the attribute: onnxruntime refuses the model.  graphwright writes the same 4-bit weights, moves the axes
    to an input, and the model runs."""
    onnx = pytest.importorskip("onnx")
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers
    from tests.models.build_onnx_corpus import corpus_model

    src = corpus_model("hf_llama_kv-ts-dyn").path
    anchor = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=16, is_symmetric=True, quant_format=QuantFormat.QDQ)
    anchor.process()
    onnx.save(anchor.model.model, tmp_path / "ort.onnx")
    with pytest.raises(Exception, match="ReduceMean"):
        ort.InferenceSession(str(tmp_path / "ort.onnx"), providers=["CPUExecutionProvider"])
    model = gw.load(src)
    quantize_onnx_initializers(model, minimum_size=0, options=_options(True, "generic", block_size=16))
    gw.save(model, tmp_path / "gw.onnx")
    theirs, ours = _raw_initializers(tmp_path / "ort.onnx"), _raw_initializers(tmp_path / "gw.onnx")
    four_bit = [k for k in theirs if k.endswith(("_DQ_Q4", "_DQ_scales"))]
    assert len(four_bit) == 30 and all(ours[k] == theirs[k] for k in four_bit)
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 1000, (1, 2), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, 7), np.int64),
             **{f"past_{kind}_{i}": rng.normal(0, 1, (1, 2, 5, 16)).astype(np.float32)
                for i in range(2) for kind in ("key", "value")}}
    flt, out = _run(src, feeds)[0], _run(tmp_path / "gw.onnx", feeds)[0]
    assert np.abs(out - flt).max() <= 0.25 * np.abs(flt).max()


@pytest.mark.wide
@pytest.mark.parametrize("name", ["hf_bert-dynamo-dyn", "hf_distilbert-ts-dyn", "hf_t5-ts-dyn", "hf_whisper_encoder-ts-dyn",
                                  "hf_llama_kv-ts-dyn", "hf_vit-ts-dyn", "tv_vit_b_16-ts-fixed"])
@pytest.mark.parametrize("target", ["onnxruntime", "generic"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_wide_4bit_same_bytes_as_matmul_nbits_quantizer(name: str, target: str, symmetric: bool, tmp_path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers
    from tests.models.build_onnx_corpus import corpus_model

    src = corpus_model(name).path
    fmt = QuantFormat.QOperator if target == "onnxruntime" else QuantFormat.QDQ
    anchor = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=16, is_symmetric=symmetric, quant_format=fmt)
    anchor.process()
    onnx.save(anchor.model.model, tmp_path / "ort.onnx")
    model = gw.load(src)
    result = quantize_onnx_initializers(model, minimum_size=0, options=_options(symmetric, target, block_size=16))
    gw.save(model, tmp_path / "gw.onnx")
    theirs, ours = _raw_initializers(tmp_path / "ort.onnx"), _raw_initializers(tmp_path / "gw.onnx")
    assert result.stats["matmuls_quantized"] > 0
    four_bit = [k for k in theirs if k.endswith(("_Q4", "_scales", "_zero_points"))]
    assert four_bit and all(ours[k] == theirs[k] for k in four_bit)


def _spread(w: np.ndarray, block: int) -> np.ndarray:
    """Per element of ``w[K, N]``: its block's ``max(hi, 0) - min(lo, 0)`` (blocks of ``block`` rows along K)."""
    k, n = w.shape
    kb = -(-k // block)
    padded = np.concatenate([w, np.repeat(w[-1:], kb * block - k, axis=0)]).reshape(kb, block, n)
    return np.repeat(np.maximum(padded.max(1), 0) - np.minimum(padded.min(1), 0), block, axis=0)[:k]


@pytest.mark.parametrize("target", ["generic", "onnxruntime"])
def test_4bit_gemm_forms_and_weight_first_matmul(tmp_path, target: str) -> None:
    """GPT-2's Conv1D (Gemm(x, W[K, N], b)), torch's Linear with alpha/beta (Gemm(x, W[N, K], c, transB=1,
    alpha=0.5, beta=2)) and a MatMul whose weight is its first input (W[M, K] @ x) all become 4-bit:
    generic as blocked DequantizeLinear along K (axis 0, 1, 1), onnxruntime as MatMulNBits (alpha folded into
    the scales, beta·c as the bias) — a weight-first MatMul stays float there, with a note.  Run by
    onnxruntime, every output stays within the asymmetric round-to-nearest bound sum_k |x_k|·spread_k/30
    (spread: the block's hi - lo, computed from the float weights)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    rng = np.random.default_rng(7)
    w, b = rng.normal(0, 0.3, (64, 24)).astype(np.float32), rng.normal(0, 1, 24).astype(np.float32)
    wt, c = rng.normal(0, 0.3, (24, 64)).astype(np.float32), rng.normal(0, 1, 24).astype(np.float32)
    wl = rng.normal(0, 0.3, (6, 40)).astype(np.float32)
    nodes = [oh.make_node("Gemm", ["x", "w", "b"], ["h"], name="conv1d"),
             oh.make_node("Gemm", ["x", "wt", "c"], ["y"], name="linear", transB=1, alpha=0.5, beta=2.0),
             oh.make_node("MatMul", ["wl", "xl"], ["z"], name="left")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64]),
                                       oh.make_tensor_value_info("xl", TensorProto.FLOAT, [40, 5])],
                          [oh.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("h", "y", "z")],
                          [numpy_helper.from_array(a, name) for a, name in ((w, "w"), (b, "b"), (wt, "wt"), (c, "c"),
                                                                            (wl, "wl"))])
    src = tmp_path / "gemm.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 21)]), src)
    model = gw.load(src)
    result = quantize_onnx_initializers(model, minimum_size=0, options=_options(False, target, method="rtn"))
    ops = [node.op for node in model.graph]
    if target == "generic":
        assert result.stats["matmuls_quantized"] == 3 and not result.notes
        assert ops.count("DequantizeLinear") == 3 and ops.count("Gemm") == 2 and ops.count("MatMul") == 1
        axes = {n.outputs[0].users()[0].name: n.attr("axis") for n in model.graph if n.op == "DequantizeLinear"}
        assert axes == {"conv1d": 0, "linear": 1, "left": 1}
    else:
        assert result.stats["matmuls_quantized"] == 2 and ops == ["MatMulNBits", "MatMulNBits", "MatMul"]
        assert any(note.startswith("left: MatMul left float (MatMulNBits takes the weight as B only")
                   for note in result.notes)
    gw.save(model, tmp_path / "q.onnx")
    x = rng.normal(0, 1, (3, 64)).astype(np.float32)
    xl = rng.normal(0, 1, (40, 5)).astype(np.float32)
    floats, outs = _run(src, {"x": x, "xl": xl}), _run(tmp_path / "q.onnx", {"x": x, "xl": xl})
    bounds = [np.abs(x) @ _spread(w, 32) / 30, 0.5 * np.abs(x) @ _spread(wt.T, 32) / 30,
              _spread(wl.T, 32).T @ np.abs(xl) / 30 if target == "generic" else np.zeros((6, 5), np.float32)]
    for name, flt, out, bound in zip("hyz", floats, outs, bounds):
        assert np.all(np.abs(out - flt) <= bound + 1e-5), name
        assert (np.abs(out - flt).max() > 0) == (name != "z" or target == "generic"), name


def _eye_dequantized(path, k: int) -> np.ndarray:
    """The first output of a model whose input is x[k, k] := I, run by onnxruntime: x @ W = W exactly."""
    import onnx
    from onnx import helper as oh

    proto = onnx.load(str(path))
    proto.graph.input[0].CopyFrom(oh.make_tensor_value_info(proto.graph.input[0].name, onnx.TensorProto.FLOAT, [k, k]))
    del proto.graph.output[1:]
    proto.graph.output[0].CopyFrom(oh.make_tensor_value_info(proto.graph.output[0].name, onnx.TensorProto.FLOAT, None))
    onnx.save(proto, str(path) + ".eye.onnx")
    import onnxruntime as ort

    options = ort.SessionOptions()  # DequantizeLinear as itself (not fused into MatMulNBits with int8 activations)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path) + ".eye.onnx", options, providers=["CPUExecutionProvider"])
    return session.run(None, {proto.graph.input[0].name: np.eye(k, dtype=np.float32)})[0]


def _awkward_weight(k: int = 200, n: int = 40) -> np.ndarray:
    """Gaussian columns, heavy-tailed (Student t, 3 dof) columns, an all-positive block, a zero block, one outlier."""
    rng = np.random.default_rng(11)
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    w[:, 20:30] = (rng.standard_t(3, (k, 10)) * 0.02).astype(np.float32)
    w[:64, 30] = np.abs(w[:64, 30])
    w[64:128, 31] = 0.0
    w[5, 32] = 1.0
    return w


@pytest.mark.parametrize("symmetric", [True, False])
def test_4bit_mse_blocks_never_worse_than_round_to_nearest(symmetric: bool, tmp_path) -> None:
    """The default ``mse`` scales: per block the squared error of the weight onnxruntime dequantizes is at
    most that of onnxruntime's round-to-nearest scales (MatMulNBitsQuantizer's bytes), clearly lower
    overall; and the generic (DequantizeLinear) and onnxruntime (MatMulNBits) files dequantize to the same
    weights.  K = 200 with blocks of 64: the last block is short."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers

    w = _awkward_weight()
    graph = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, [None, 200])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [None, 40])],
                          [numpy_helper.from_array(w, "w")])
    src = tmp_path / "w.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), src)
    got = {}
    for method in ("rtn", "mse"):
        for target in ("onnxruntime", "generic"):
            model = gw.load(src)
            quantize_onnx_initializers(model, minimum_size=0, options=_options(symmetric, target, 64, method))
            gw.save(model, tmp_path / f"{method}-{target}.onnx")
            got[method, target] = _eye_dequantized(tmp_path / f"{method}-{target}.onnx", 200)
    np.testing.assert_allclose(got["mse", "generic"], got["mse", "onnxruntime"], rtol=1e-6, atol=1e-9)

    def block_errors(d: np.ndarray) -> np.ndarray:
        e = np.concatenate([(w - d) ** 2, np.zeros((56, 40), np.float32)])
        return e.reshape(4, 64, 40).sum(1)

    rtn, mse = block_errors(got["rtn", "onnxruntime"]), block_errors(got["mse", "onnxruntime"])
    assert np.all(mse <= rtn * (1 + 1e-5) + 1e-12)
    assert mse[1, 31] == 0 and mse[0, 30] < rtn[0, 30]  # the zero block stays exact
    gain = 10 * np.log10(rtn[:, :20].sum() / mse[:, :20].sum())  # Gaussian columns
    assert gain > (0.4 if symmetric else 0.2)
    assert 10 * np.log10(rtn.sum() / mse.sum()) > 0.2


def _gemms_as_matmuls(src, dst) -> None:
    """Each Gemm(A, B, C) without trans/alpha/beta rewritten as MatMul(A, B) + C (what the anchor quantizes)."""
    import onnx
    from onnx import helper as oh

    proto = onnx.load(str(src))
    nodes = []
    for node in proto.graph.node:
        if node.op_type != "Gemm":
            nodes.append(node)
            continue
        assert not [a for a in node.attribute if a.name in ("transA", "transB") and a.i]
        nodes.append(oh.make_node("MatMul", node.input[:2], [node.output[0] + "_mm"], name=node.name + "_mm"))
        nodes.append(oh.make_node("Add", [node.output[0] + "_mm", node.input[2]], node.output, name=node.name + "_add"))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    onnx.save(proto, str(dst))


def _sqnr(ref: np.ndarray, out: np.ndarray) -> float:
    ref, out = ref.astype(np.float64), out.astype(np.float64)
    return float(10 * np.log10((ref ** 2).sum() / ((ref - out) ** 2).sum()))


@pytest.mark.parametrize("name", ["gpt2_small", "bert_tiny"])
def test_4bit_default_sqnr_at_least_matmul_nbits_quantizer(name: str, tmp_path) -> None:
    """On the same layers (every MatMul weight; the small GPT-2's Conv1D Gemms rewritten as MatMul + Add so
    that MatMulNBitsQuantizer quantizes them too), block 128 (the default), symmetric: graphwright's default 4-bit
    (``mse`` scales) gives a higher output SQNR than onnxruntime's MatMulNBitsQuantizer (RTN), both run by
    onnxruntime on the same held-out token ids."""
    onnx = pytest.importorskip("onnx")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.quantize import quantize

    if name == "gpt2_small":
        from tests.models.build_onnx_corpus import corpus_model

        src = tmp_path / "gpt2.onnx"
        _gemms_as_matmuls(corpus_model("hf_gpt2-ts-dyn").path, src)
        rng = np.random.default_rng(12)
        feeds = [{"input_ids": (ids := rng.integers(0, 1000, (1, 16), dtype=np.int64)), "attention_mask": np.ones_like(ids)}
                 for _ in range(8)]
    else:
        from tests.models.build_quant_corpus import quant_model, samples

        info = quant_model("onnx_bert_tiny")
        src, feeds = info.path, samples(info.metadata, "eval", 8)
    anchor = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True)
    anchor.process()
    anchor.model.save_model_to_file(str(tmp_path / "ort.onnx"), use_external_data_format=False)
    model, _ = quantize(str(src), mode="weights", bits=4, block_size=128, target="onnxruntime", minimum_size=0,
                        report=False)
    gw.save(model, tmp_path / "gw.onnx")
    ops = lambda p: sum(n.op_type == "MatMulNBits" for n in onnx.load(str(p)).graph.node)  # noqa: E731
    assert ops(tmp_path / "gw.onnx") == ops(tmp_path / "ort.onnx") >= 8  # the same layers in 4 bits

    def outputs(path):
        return np.concatenate([_run(path, f)[0] for f in feeds])

    ref = outputs(src)
    ours, theirs = _sqnr(ref, outputs(tmp_path / "gw.onnx")), _sqnr(ref, outputs(tmp_path / "ort.onnx"))
    assert ours >= theirs + 0.2, (ours, theirs)



def test_4bit_cli_int4_method_and_pipeline_option(tmp_path) -> None:
    """``graphwright quantize --mode weights --bits 4 --int4-method rtn`` writes MatMulNBitsQuantizer's bytes;
    the default (mse) does not, and neither does ``quantize_weights(bits=4, int4_method=mse)`` in a pipeline,
    while ``int4_method=rtn`` there does; a wrong method is one clear error."""
    onnx = pytest.importorskip("onnx")
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from graphwright.cli.main import main
    from graphwright.errors import TransformError

    src = _mlp_4bit(tmp_path / "mlp.onnx")
    anchor = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True)
    anchor.process()
    onnx.save(anchor.model.model, tmp_path / "ort.onnx")
    theirs = _raw_initializers(tmp_path / "ort.onnx")
    common = ["--mode", "weights", "--bits", "4", "--block-size", "32", "--minimum-size", "0", "--target",
              "onnxruntime", "--no-report", "--quiet"]
    assert main(["quantize", str(src), str(tmp_path / "rtn.onnx"), *common, "--int4-method", "rtn"]) == 0
    assert main(["quantize", str(src), str(tmp_path / "mse.onnx"), *common]) == 0
    assert _raw_initializers(tmp_path / "rtn.onnx") == theirs
    mse = _raw_initializers(tmp_path / "mse.onnx")
    assert set(mse) == set(theirs) and mse["w1_scales"] != theirs["w1_scales"]
    for method in ("rtn", "mse"):
        model = gw.load(src)
        gw.transform(model, f"quantize_weights(bits=4, block_size=32, minimum_size=0, target=onnxruntime, "
                            f"int4_method={method})")
        gw.save(model, tmp_path / f"p-{method}.onnx")
        assert (_raw_initializers(tmp_path / f"p-{method}.onnx") == theirs) == (method == "rtn")
    with pytest.raises(TransformError, match="int4_method must be rtn, mse or gptq"):
        gw.transform(gw.load(src), "quantize_weights(bits=4, int4_method=awq)")


def test_4bit_matmul_nbits_accuracy_level(tmp_path) -> None:
    """MatMulNBits carries accuracy_level 4 by default (onnxruntime computes with int8 activations) and none
    with accuracy_level=0 (float32 compute); on the small GPT-2 both run on onnxruntime and the int8 compute
    changes the output by far less than the 4-bit weights do."""
    onnx = pytest.importorskip("onnx")
    from graphwright.transforms.quantize.options import QuantOptions
    from graphwright.transforms.quantize.quantize_weights_onnx import quantize_onnx_initializers
    from tests.models.build_onnx_corpus import corpus_model

    src = corpus_model("hf_gpt2-ts-dyn").path
    rng = np.random.default_rng(13)
    ids = rng.integers(0, 1000, (2, 16), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    outs = {}
    for level in (4, 0):
        model = gw.load(src)
        quantize_onnx_initializers(model, minimum_size=0, options=QuantOptions(
            weight_type="int4", block_size=32, target="onnxruntime", accuracy_level=level))
        gw.save(model, tmp_path / f"q{level}.onnx")
        levels = [next((a.i for a in n.attribute if a.name == "accuracy_level"), None)
                  for n in onnx.load(str(tmp_path / f"q{level}.onnx")).graph.node if n.op_type == "MatMulNBits"]
        assert len(levels) == 8 and set(levels) == ({4} if level else {None})
        outs[level] = _run(tmp_path / f"q{level}.onnx", feeds)[0]
    flt = _run(src, feeds)[0]
    weights_db, compute_db = _sqnr(flt, outs[0]), _sqnr(outs[0], outs[4])
    assert compute_db > weights_db + 10 and not np.array_equal(outs[0], outs[4]), (weights_db, compute_db)
