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


# -- the pieces: factor, Hessian collection (pruned session, batching), model left as it was ---------------
def test_upper_factor_matches_lapack_and_its_panel_inverses_invert_the_blocks() -> None:
    from graphwright.transforms.quantize.gptq_onnx import upper_factor

    rng = np.random.default_rng(3)
    for n, panel in ((700, 256), (512, 128), (100, 256)):
        x = rng.standard_normal((2 * n, n))
        h = x.T @ x + np.eye(n)
        r, inverses = upper_factor(h.astype(np.float32), panel)
        # numpy's LAPACK, float64: the Cholesky factor of the reversed matrix, reversed
        want = np.linalg.cholesky(h[::-1, ::-1])[::-1, ::-1]
        assert np.array_equal(r, np.triu(r))
        assert np.max(np.abs(r - want)) < 1e-5 * np.max(np.abs(want))
        assert len(inverses) == -(-n // panel)
        for p, inv in zip(range(0, n, panel), inverses):
            block = want[p:p + panel, p:p + panel]
            assert np.allclose(inv @ block, np.eye(len(block)), atol=1e-4)


def _mixing_model(path: Path, k: int, n: int, mix_batch: bool, failing_head: bool = False) -> np.ndarray:
    """x[b, 4, k] -> Relu(x - mean over axis 0 (mix_batch) or x·x) -> MatMul(., W[k, n]) -> y -> MatMul(., head[n, 3])
    (``failing_head``: Reshape(y, [-1, 5]) instead, which fails at run time when 5 does not divide b·4·n)."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((k, n)).astype(np.float32)
    head = rng.standard_normal((n, 3)).astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1) if mix_batch
             else helper.make_node("Identity", ["x"], ["m0"]),
             helper.make_node("Sub", ["x", "m"], ["c"]) if mix_batch else helper.make_node("Mul", ["x", "m0"], ["c"]),
             helper.make_node("Relu", ["c"], ["a"]),
             helper.make_node("MatMul", ["a", "w"], ["y"]),
             helper.make_node("Reshape", ["y", "five"], ["logits"]) if failing_head
             else helper.make_node("MatMul", ["y", "head"], ["logits"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, k])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)
    constants = [numpy_helper.from_array(w, "w"),
                 numpy_helper.from_array(np.array([-1, 5], np.int64), "five") if failing_head
                 else numpy_helper.from_array(head, "head")]
    graph = helper.make_graph(nodes, "g", [x], [y], constants)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return w


def _reference_hessian(path: Path, feeds: Feeds, value: str) -> np.ndarray:
    """sum x^T x of ``value`` over the feeds, one onnxruntime run per feed, float64."""
    proto = onnx.load(str(path))
    proto.graph.output.append(onnx.ValueInfoProto(name=value))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    total = 0.0
    for feed in feeds:
        x = session.run([value], feed)[0].astype(np.float64)
        x = x.reshape(-1, x.shape[-1])
        total = total + x.T @ x
    return total


@pytest.mark.parametrize("mix_batch", [False, True])
def test_collect_hessians_batched_or_not_equals_onnxruntime_sample_by_sample(tmp_path: Path, mix_batch: bool) -> None:
    """Samples run batched only when that gives the same values: with a model that mixes the samples
    of a batch (a mean over axis 0), the Hessian must still be the sum of the single-sample ones."""
    from graphwright import formats
    from graphwright.transforms.quantize.gptq_onnx import collect_hessians, hessian_inputs
    from graphwright.transforms.quantize.options import QuantOptions

    k = 64
    src = tmp_path / "m.onnx"
    _mixing_model(src, k, 32, mix_batch)
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.standard_normal((2, 4, k)).astype(np.float32)} for _ in range(11)]
    model = gw.load(str(src))
    before = formats.serialize(model)
    options = QuantOptions.build(weight_type="int4", int4_method="gptq", target="onnxruntime")
    inputs = hessian_inputs(model, 0, options)
    assert inputs == {"w": ("a", k), "head": ("y", 32)}
    counts: list[int] = []
    hessians, count = collect_hessians(model, feeds, inputs, on_sample=counts.append)
    assert count == 11 and counts[-1] == 11
    assert len(counts) < 11 if not mix_batch else len(counts) == 11  # batches of samples, or one by one
    want = _reference_hessian(src, feeds, "a")
    assert np.allclose(hessians["w"], want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
    assert formats.serialize(model) == before  # the model is put back byte for byte


def test_collect_hessians_session_leaves_out_what_the_layers_do_not_need(tmp_path: Path) -> None:
    """Only the first layer's input is wanted: the session must not run what follows it (a Reshape
    that fails at run time on these samples); the model is unchanged after, that node included."""
    from graphwright import formats
    from graphwright.transforms.quantize.gptq_onnx import collect_hessians

    k = 16
    src = tmp_path / "m.onnx"
    _mixing_model(src, k, 8, False, failing_head=True)
    feeds = [{"x": np.full((1, 4, k), 2.0, np.float32)} for _ in range(3)]
    with pytest.raises(Exception, match=r"(?i)reshape"):  # the whole model does fail on them
        ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds[0])
    model = gw.load(str(src))
    before = formats.serialize(model)
    hessians, count = collect_hessians(model, feeds, {"w": ("a", k)})
    assert count == 3 and np.allclose(hessians["w"], 3 * 4 * 16.0)  # Relu(2·2) = 4: 3 samples x 4 rows of fours
    assert formats.serialize(model) == before
    assert [n.op for n in model.graph] == ["Identity", "Mul", "Relu", "MatMul", "Reshape"]
