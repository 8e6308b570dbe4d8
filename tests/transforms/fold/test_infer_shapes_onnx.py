"""infer_shapes on hostile models: bounded memory and time, a warning naming the node and the limit.

The bombs run through the CLI in a child process limited to 2 GiB of address space (before the
fix each grew past 8 GiB in 12-24 s); see docs/reliability.md for the measurements.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphwright as gw
from graphwright.formats.onnx.inference import InferenceOverBudget, infer_types
from graphwright.transforms import StepRunner
from graphwright.transforms.fold.infer_shapes_onnx import size_bombs

from .._onnx_build import F, apply, init, model, vi
from ._bombs import CAP_SECONDS, node_names, onnx_bomb, run_capped

SHAPE_MAKING_BOMBS = {"tile": "Tile", "range": "Range", "constant_of_shape": "ConstantOfShape", "expand": "Expand"}


@pytest.mark.parametrize("kind", sorted(SHAPE_MAKING_BOMBS))
def test_shape_making_bomb_is_cut_before_onnx_runs(kind: str, tmp_path: Path) -> None:
    src, dst = tmp_path / "bomb.onnx", tmp_path / "out.onnx"
    onnx.save(onnx_bomb(kind), src)
    result, seconds = run_capped("simplify", src, dst)
    assert result.returncode == 0, result.stderr[-2000:]
    assert seconds < CAP_SECONDS
    op = SHAPE_MAKING_BOMBS[kind]
    lines = [line for line in result.stdout.splitlines() if "infer_shapes:" in line]
    assert any(f"'bomb' ({op})" in line and "--size-limit" in line for line in lines), result.stdout
    assert "bomb" in node_names(dst)  # left in place; the rest of the model is simplified


def test_size_computed_by_data_propagation_is_caught_by_the_address_space_limit(tmp_path: Path) -> None:
    src, dst = tmp_path / "chain.onnx", tmp_path / "out.onnx"
    onnx.save(onnx_bomb("chain"), src)
    result, seconds = run_capped("simplify", src, dst)
    assert result.returncode == 0, result.stderr[-2000:]
    assert seconds < CAP_SECONDS
    assert "data propagation needed more than 256.0 MB (--fold-budget" in result.stdout
    # once fold_symbolic_shapes has computed the size (Shape of a ConstantOfShape is its shape input),
    # the next inference names the node that would make it; the ConstantOfShape, read only through
    # its shape, is gone without ever being made
    assert any("'bomb_expand' (Expand)" in line and "--size-limit" in line
               for line in result.stdout.splitlines()), result.stdout
    names = node_names(dst)
    assert "bomb_expand" in names and "bomb_cos" not in names


def test_scan_sizes_from_constants_without_allocating() -> None:
    model = gw.formats.onnx.load(Path("bomb.onnx"), onnx_bomb("tile").SerializeToString())
    (found,) = size_bombs(model, size_limit=1 << 30, budget=256 << 20)
    node, message = found
    assert node.name == "bomb"
    assert message == "'bomb' (Tile) would make a tensor of 37.3 GB, larger than 1.0 GB (--size-limit / size_limit)"
    assert size_bombs(model, size_limit=1 << 40, budget=1 << 40) == []


def test_a_long_one_d_result_is_cut_against_the_budget() -> None:
    model = gw.formats.onnx.load(Path("bomb.onnx"), onnx_bomb("value_info").SerializeToString())
    found = size_bombs(model, size_limit=1 << 30, budget=256 << 20)
    assert [node.name for node, _ in found] == [f"bomb{i}" for i in range(6)]
    assert "1-D tensor of 250000000 elements" in found[0][1] and "--fold-budget" in found[0][1]


def _declared_vector(length: int) -> onnx.ModelProto:
    """A graph input declared 1-D of ``length``, read by Add: ONNX's data propagation spends per element."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [length])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_address_space_limit_turns_onnx_allocation_into_an_error_and_is_restored() -> None:
    import resource

    before = resource.getrlimit(resource.RLIMIT_AS)
    model = gw.formats.onnx.load(Path("v.onnx"), _declared_vector(10**10).SerializeToString())
    with pytest.raises(InferenceOverBudget):
        infer_types(model, memory_limit=64 << 20)
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    types = infer_types(model, data_prop=False, memory_limit=64 << 20)  # bounded without data propagation
    assert types[next(iter(model.graph)).output][1] == (10**10,)
    ok = gw.formats.onnx.load(Path("v.onnx"), _declared_vector(4).SerializeToString())
    assert infer_types(ok, memory_limit=64 << 20)[next(iter(ok.graph)).output][1] == (4,)


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_transform_falls_back_to_inference_without_data_propagation() -> None:
    model = gw.formats.onnx.load(Path("v.onnx"), _declared_vector(10**10).SerializeToString())
    runner = StepRunner(model)
    step = runner.run("infer_shapes", {"fold_budget": 64 << 20})
    assert next(iter(model.graph)).output.shape == (10**10,)
    (note,) = step.notes
    assert note.startswith("ONNX's data propagation needed more than 64.0 MB (--fold-budget / fold_budget), "
                           "shapes inferred without it: 'add' (Add) makes a 1-D tensor of 10000000000 elements")


def test_cut_keeps_the_rest_of_the_model_inferred() -> None:
    proto = onnx_bomb("tile")
    model = gw.formats.onnx.load(Path("bomb.onnx"), proto.SerializeToString())
    tile, add = list(model.graph)
    types = infer_types(model, cut=[(tile, 1)])
    dtype, shape = types[tile.output]
    assert dtype is gw.ir.DType.FLOAT32 and len(shape) == 1 and not isinstance(shape[0], int)  # length hidden
    assert types[add.output][0] is gw.ir.DType.FLOAT32
    full = infer_types(gw.formats.onnx.load(Path("ok.onnx"), _small_tile().SerializeToString()))
    assert sorted(shape for _, shape in full.values()) == [(3,), (3,)]


def _small_tile() -> onnx.ModelProto:
    proto = onnx_bomb("tile")
    proto.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(np.array([3], np.int64), "r"))
    return proto


# a hand-built graph

mk = helper.make_node


def test_infer_shapes_types_every_value() -> None:
    nodes = [mk("MatMul", ["x", "w"], ["h"]), mk("Relu", ["h"], ["y"])]
    m, _ = model(nodes, [vi("x", F, ["N", 4])], [vi("y", F, None)], [init("w", np.ones([4, 8], np.float32))])
    result = apply(m, "infer_shapes")
    assert result.changed
    assert m.graph.outputs[0].shape == ("N", 8)
    assert next(iter(m.graph)).output.shape == ("N", 8)


def test_only_models_that_could_explode_pay_for_an_isolated_inference(tmp_path: Path) -> None:
    """Data propagation runs in a capped child process only when it could make a long vector of
    concrete length; an ordinary export (sizes from Shape of its inputs) infers in-process, so a
    caller's other threads never share an address-space limit."""
    from graphwright.formats.onnx.inference import _could_explode
    from tests.models import get_model

    from ._bombs import onnx_bomb

    bert = gw.load(get_model("torch_onnx", "bert").path)
    assert not _could_explode(bert, set())
    chain = gw.formats.onnx.load(Path("c.onnx"), onnx_bomb("chain").SerializeToString())
    assert _could_explode(chain, set())
    declared = gw.formats.onnx.load(Path("v.onnx"), _declared_vector(10**10).SerializeToString())
    assert _could_explode(declared, set())


def test_a_kept_dim_never_keeps_an_earlier_runs_generated_symbol() -> None:
    from graphwright.transforms.fold.infer_shapes_onnx import merge_shape

    # ONNX said nothing this run: what was known stays, but an old run's unk__N is forgotten
    assert merge_shape((1, "unk__3", "batch"), None) == (1, None, "batch")
    assert merge_shape(("unk__0", 4), (None, 4)) == (None, 4)
    assert merge_shape(("batch", None), ("unk__1", 8)) == ("unk__1", 8)
