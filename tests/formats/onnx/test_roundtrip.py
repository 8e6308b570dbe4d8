"""load -> save round trips of real and hand-built ONNX models: equal protos, equal bytes,
identical onnxruntime outputs, and onnx.checker on the result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphwright import formats
from graphwright.formats.onnx import from_proto, save, serialize, to_proto
from graphwright.ir import Node, Tensor, Value
from tests.formats.onnx import onnx_cases as cases

try:
    from tests.models import ModelBuildError, torch_onnx
except ImportError:  # pragma: no cover - the model helper is part of the repo
    torch_onnx = None


def _session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    source = str(model) if isinstance(model, Path) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def _feeds(session: ort.InferenceSession, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 2 for d in arg.shape]
        if arg.type == "tensor(float)":
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
        elif arg.type == "tensor(bool)":
            feeds[arg.name] = np.array(rng.random() < 0.5).reshape(shape)
        elif arg.type == "tensor(int64)":
            feeds[arg.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            raise AssertionError(f"no feed for {arg.type}")
    return feeds


def _same_outputs(a: onnx.ModelProto | Path, b: onnx.ModelProto | Path, feeds_list: list[dict] | None = None) -> None:
    sa, sb = _session(a), _session(b)
    for feeds in feeds_list or [_feeds(sa, seed) for seed in range(3)]:
        for x, y in zip(sa.run(None, feeds), sb.run(None, feeds), strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.array_equal(x, y, equal_nan=True)


# -- real models exported from torch ------------------------------------------------

@pytest.fixture(scope="module", params=["cnn", "bert"])
def torch_model(request: pytest.FixtureRequest):
    if torch_onnx is None:
        pytest.skip("tests.models is not available")
    try:
        return torch_onnx(request.param)
    except ModelBuildError as e:
        pytest.skip(f"cannot build torch_onnx:{request.param}: {e}")


@pytest.mark.slow
def test_torch_model_round_trip_is_byte_identical(torch_model, tmp_path: Path) -> None:
    model = formats.load(torch_model.path)
    assert model.format == "onnx" and len(model.graph) > 10
    out = tmp_path / "out.onnx"
    formats.save(model, out)
    original = onnx.load(str(torch_model.path))
    written = onnx.load(str(out))
    assert written == original  # field by field
    assert written.SerializeToString() == original.SerializeToString()
    assert out.read_bytes() == torch_model.path.read_bytes()
    onnx.checker.check_model(str(out), full_check=True)
    feeds = [torch_model.sample_inputs(seed) for seed in range(3)]
    _same_outputs(torch_model.path, out, feeds)
    # the stored reference outputs (recorded at export time) still hold
    ref_in, ref_out = torch_model.reference_data()
    got = _session(out).run(None, ref_in)
    for name, value in zip(torch_model.outputs, got, strict=True):
        np.testing.assert_allclose(value, ref_out[name], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_torch_model_keeps_weights_lazy(torch_model) -> None:
    model = formats.load(torch_model.path)
    tensors = [v.const for v in model.graph.initializers]
    assert tensors and not any(t.is_loaded for t in tensors)
    proto = onnx.load(str(torch_model.path))
    by_name = {t.name: t for t in proto.graph.initializer}
    first = model.graph.initializers[0]
    assert first.const.source is not None  # a TensorProto, or a MappedTensor for large weights left in the file
    np.testing.assert_array_equal(first.const.numpy(), onnx.numpy_helper.to_array(by_name[first.name]))
    assert first.const.is_loaded and not model.graph.initializers[-1].const.is_loaded


# -- hand-built models ---------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(cases.ALL))
def test_hand_built_round_trip(name: str, tmp_path: Path) -> None:
    original = cases.ALL[name]()
    path = tmp_path / "in.onnx"
    path.write_bytes(original.SerializeToString())
    model = formats.load(path)
    out = tmp_path / "out.onnx"
    formats.save(model, out)
    assert out.read_bytes() == path.read_bytes()
    assert onnx.load(str(out)) == original
    assert serialize(model) == original.SerializeToString()
    assert to_proto(model) == original
    if name not in ("typed_tensors", "unsorted"):  # both break checker rules on purpose
        onnx.checker.check_model(str(out), full_check=True)
    _same_outputs(original, out)


def test_control_flow_model_carries_everything_through(tmp_path: Path) -> None:
    original = cases.control_flow()
    model = from_proto(original)
    meta = model.meta
    assert meta["onnx.ir_version"] == 8
    assert meta["onnx.opset_import"] == {"": cases.OPSET, "local.fns": 1}
    assert meta["onnx.producer_name"] == "graphwright-tests" and meta["onnx.model_version"] == 7
    assert meta["onnx.metadata_props"] == {"author": "tests", "license": "none"}
    assert [f.name for f in meta["onnx.functions"]] == ["Scaled"]
    assert model.graph.meta["onnx.graph_shell"].metadata_props[0].key == "graph_key"
    branch = next(n for n in model.graph if n.op == "If")
    assert branch.meta["onnx.node_shell"].metadata_props[0].value == "test"
    # edit the mirrors: the writer applies them, leaving the rest alone
    meta["onnx.producer_name"] = "graphwright"
    meta["onnx.metadata_props"]["stage"] = "optimized"
    meta["onnx.opset_import"]["com.example"] = 2
    written = to_proto(model)
    assert written.producer_name == "graphwright"
    assert {p.key: p.value for p in written.metadata_props} == {"author": "tests", "license": "none",
                                                                "stage": "optimized"}
    assert [(o.domain, o.version) for o in written.opset_import][-1] == ("com.example", 2)
    assert written.graph == original.graph and written.functions == original.functions


def test_edited_model_gets_unique_names_and_still_runs(tmp_path: Path) -> None:
    original = cases.conv_net()
    model = from_proto(original)
    g = model.graph
    by_name = {v.name: v for n in g for v in n.outputs}
    by_name["c"].name = "r"  # now two values are called "r"
    relu = next(n for n in g if n.op == "Relu")
    relu.name = "conv"  # and two nodes "conv"
    # rewrite a weight: new tensor (no source), same values
    w = next(v for v in g.initializers if v.name == "fc.w")
    w.const = Tensor.from_numpy(np.array(w.const.numpy()))
    # insert an Identity producing an unnamed value in front of the output
    y = g.outputs[0]
    ident = Node("Identity", [y], dialect="onnx", outputs=[Value("", y.dtype, y.shape)])
    g.append(ident)
    g.set_outputs([ident.output])
    out = tmp_path / "edited.onnx"
    save(model, out)
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    outputs = [o for n in written.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))
    assert sorted(n.name for n in written.graph.node if n.name) == sorted(
        ["conv", "conv_1", "bn", "pool", "flatten", "fc"])
    assert "r_1" in outputs and "r" in outputs and written.graph.output[0].name == "Identity_out0"
    # the value_info of the renamed value follows it; the new weight is written from numpy
    assert {vi.name for vi in written.graph.value_info} == {"r", "r_1", "p"}
    fc_w = next(t for t in written.graph.initializer if t.name == "fc.w")
    assert fc_w.HasField("raw_data")
    feeds = [{"x": np.random.default_rng(s).standard_normal((2, 3, 8, 8)).astype(np.float32)} for s in range(3)]
    sa, sb = _session(original), _session(out)
    for feeds_ in feeds:
        np.testing.assert_array_equal(sa.run(None, feeds_)[0], sb.run(None, feeds_)[0])
    # the IR itself was not renamed by the writer
    assert by_name["c"].name == "r" and ident.output.name == ""


def test_changed_value_type_is_regenerated_and_removed_values_drop_their_value_info() -> None:
    model = from_proto(cases.conv_net())
    g = model.graph
    x = g.inputs[0]
    x.shape = ("batch", 3, 8, 8)
    pool = next(n for n in g if n.op == "GlobalAveragePool")
    flatten = next(n for n in g if n.op == "Flatten")
    flatten.replace_input(0, pool.inputs[0])  # bypass the pool ...
    g.remove(pool)  # ... and drop it: its value_info ("p") must go too
    written = to_proto(model)
    dims = written.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, 8, 8]
    assert [vi.name for vi in written.graph.value_info] == ["c", "r"]
    assert "pool" not in [n.name for n in written.graph.node]


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "small_cnn.onnx"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/small_cnn.onnx not built")
def test_bundled_example_round_trip(tmp_path: Path) -> None:
    model = formats.load(EXAMPLE)
    out = tmp_path / "small_cnn.onnx"
    formats.save(model, out)
    assert out.read_bytes() == EXAMPLE.read_bytes()
    _same_outputs(EXAMPLE, out)
