"""4-bit weights by GPTQ (``int4_method="gptq"``): codes chosen with each layer's calibration inputs.

Every accuracy here is measured by onnxruntime running the quantized model against the float
model's outputs on held-out samples (not the calibration ones); nothing compared is computed by the
code under test.  Models: the ONNX corpus' small GPT-2 (``hf_gpt2-ts-dyn``, 2 layers of 64, its
Conv1D Gemms rewritten as MatMul + Add so that MatMulNBitsQuantizer covers the same layers) and the
quant corpus' 2-layer BERT masked LM (``bert_tiny``); GPT-2 and BERT-base in the benchmark.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

import graphwright as gw
from graphwright.quantize import quantize
from tests.models.build_quant_corpus import quant_model, samples

Feeds = list[dict[str, np.ndarray]]


def _run(path: Path, feeds: Feeds) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, feed)[0] for feed in feeds])


def _sqnr(reference: np.ndarray, got: np.ndarray) -> float:
    ref, out = reference.astype(np.float64), got.astype(np.float64)
    return float(10 * np.log10(np.sum(ref ** 2) / np.sum((ref - out) ** 2)))


def _ours(src: Path, dst: Path, method: str | None, calib: Feeds | None, **kwargs: object) -> int:
    """Quantize; returns the calibration samples the run used."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no report: nothing synthetic is drawn, but stay quiet anyway
        model, report = quantize(str(src), mode="weights", bits=4, block_size=128, report=False, int4_method=method,
                                 samples=calib, **kwargs)
    gw.save(model, dst)
    return report.calibration_samples


def _token_feeds(count: int, seed: int) -> Feeds:
    rng = np.random.default_rng(seed)
    return [{"input_ids": (ids := rng.integers(0, 1000, (1, 16), dtype=np.int64)), "attention_mask": np.ones_like(ids)}
            for _ in range(count)]


def test_gptq_beats_mse_and_matmulnbits_on_small_gpt2_at_full_coverage(tmp_path: Path) -> None:
    from tests.models.build_onnx_corpus import corpus_model
    from tests.transforms.quantize.test_quantize_weights_onnx import _gemms_as_matmuls

    src = tmp_path / "gpt2.onnx"
    _gemms_as_matmuls(corpus_model("hf_gpt2-ts-dyn").path, src)
    calib, evals = _token_feeds(32, 1), _token_feeds(16, 2)
    reference = _run(src, evals)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(tmp_path / "ort.onnx"), use_external_data_format=False)
    _ours(src, tmp_path / "mse.onnx", "mse", None, target="onnxruntime", minimum_size=0)
    _ours(src, tmp_path / "gptq.onnx", "gptq", calib, target="onnxruntime", minimum_size=0)
    anchor = _sqnr(reference, _run(tmp_path / "ort.onnx", evals))
    mse = _sqnr(reference, _run(tmp_path / "mse.onnx", evals))
    gptq = _sqnr(reference, _run(tmp_path / "gptq.onnx", evals))
    assert gptq > mse + 0.5 and gptq > anchor + 0.5, (gptq, mse, anchor)
    ops = lambda p: [n.op_type for n in onnx.load(str(p)).graph.node].count("MatMulNBits")  # noqa: E731
    assert ops(tmp_path / "gptq.onnx") == ops(tmp_path / "ort.onnx") >= 8  # the same layers in 4 bits


@pytest.fixture(scope="module")
def bert_tiny() -> tuple[Path, Feeds, Feeds, np.ndarray]:
    info = quant_model("onnx_bert_tiny")
    calib = samples(info.metadata, "calib", 32)
    evals = samples(info.metadata, "eval", 32, batch=8)
    return info.path, calib, evals, _run(info.path, evals)


def test_gptq_beats_mse_and_matmulnbits_on_held_out_samples(bert_tiny, tmp_path: Path) -> None:
    src, calib, evals, reference = bert_tiny
    quantizer = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=128, is_symmetric=True)
    quantizer.process()
    quantizer.model.save_model_to_file(str(tmp_path / "ort.onnx"), use_external_data_format=False)
    _ours(src, tmp_path / "mse.onnx", "mse", None, target="onnxruntime")
    _ours(src, tmp_path / "gptq.onnx", "gptq", calib, target="onnxruntime")
    anchor = _sqnr(reference, _run(tmp_path / "ort.onnx", evals))
    mse = _sqnr(reference, _run(tmp_path / "mse.onnx", evals))
    gptq = _sqnr(reference, _run(tmp_path / "gptq.onnx", evals))
    assert gptq > mse + 1.0 and gptq > anchor + 1.0, (gptq, mse, anchor)
    count = [n.op_type for n in onnx.load(str(tmp_path / "gptq.onnx")).graph.node].count("MatMulNBits")
    assert count == [n.op_type for n in quantizer.model.model.graph.node].count("MatMulNBits")  # same coverage


def test_gptq_is_the_default_with_data_and_both_forms_agree(bert_tiny, tmp_path: Path) -> None:
    src, calib, evals, reference = bert_tiny
    assert _ours(src, tmp_path / "nbits.onnx", None, calib, target="onnxruntime", accuracy_level=0) == len(calib)
    _ours(src, tmp_path / "dq.onnx", "gptq", calib, target="generic")
    dq_model = onnx.load(str(tmp_path / "dq.onnx"))
    blocks = [n for n in dq_model.graph.node if n.op_type == "DequantizeLinear"]
    assert blocks and all(any(a.name == "block_size" for a in n.attribute) for n in blocks)
    nbits, dq = _run(tmp_path / "nbits.onnx", evals), _run(tmp_path / "dq.onnx", evals)
    # the same weights, two kernels: they differ by float rounding (also with mse: ~38 dB on this model),
    # far below the quantization error
    assert _sqnr(dq, nbits) > _sqnr(reference, dq) + 10.0
    assert _sqnr(reference, dq) > 20.0


def _one_matmul(w: np.ndarray, path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", w.shape[0]])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", w.shape[1]])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))


def test_gptq_uint4_short_last_block_lowers_output_error_of_correlated_inputs(tmp_path: Path) -> None:
    """K = 200 (a short last block), uint4 with zero points, DequantizeLinear form: on inputs with
    correlated features GPTQ's output error, measured by onnxruntime, is below mse's."""
    rng = np.random.default_rng(0)
    k, n = 200, 64
    w = rng.standard_normal((k, n)).astype(np.float32)
    mix = rng.standard_normal((48, k))  # features driven by 48 factors, plus a little noise of their own
    feeds = [{"x": (rng.standard_normal((16, 48)) @ mix + 0.1 * rng.standard_normal((16, k))).astype(np.float32)}
             for _ in range(24)]
    _one_matmul(w, tmp_path / "f.onnx")
    calib, held = feeds[:16], feeds[16:]
    reference = _run(tmp_path / "f.onnx", held)
    errors = {}
    for method in ("mse", "gptq"):
        _ours(tmp_path / "f.onnx", tmp_path / f"{method}.onnx", method, calib if method == "gptq" else None,
              weight_type="uint4", target="generic")
        model = onnx.load(str(tmp_path / f"{method}.onnx"))
        assert [i.data_type for i in model.graph.initializer if i.name.endswith("_zero_points")] == [TensorProto.UINT4]
        errors[method] = _sqnr(reference, _run(tmp_path / f"{method}.onnx", held))
    assert errors["gptq"] > errors["mse"] + 1.0, errors
