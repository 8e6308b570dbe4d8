"""fuse_consecutive_slices: Slice(Slice(x)) over disjoint axes on hand-built graphs, checked on
onnxruntime at two sizes of every dynamic dim; the pairs it must leave alone, with their reasons."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node
I64 = np.int64


def _pair(first: dict[str, list[int]], second: dict[str, list[int]], *, extra_reader: bool = False):
    inits, nodes = [], []
    for tag, spec, src, dst in (("a", first, "x", "mid"), ("b", second, "mid", "y")):
        names = []
        for key in ("starts", "ends", "axes", "steps"):
            if key in spec:
                inits.append(init(f"{tag}_{key}", np.array(spec[key], I64)))
                names.append(f"{tag}_{key}")
            else:
                names.append("")
        while names and names[-1] == "":
            names.pop()
        nodes.append(mk("Slice", [src, *names], [dst], name=f"slice_{tag}"))
    outputs = [vi("y", F, None)]
    if extra_reader:
        nodes.append(mk("Relu", ["mid"], ["z"], name="relu"))
        outputs.append(vi("z", F, None))
    return model(nodes, [vi("x", F, ["N", 9, 10, 4])], outputs, inits)


def test_slices_of_disjoint_axes_become_one_slice() -> None:
    # Swin's crop of a padded window map, x[:, :7, :6, :], written as two Slices (one negative axis)
    m, p = _pair({"starts": [0], "ends": [7], "axes": [1]}, {"starts": [0], "ends": [6], "axes": [-2]})
    apply(m, "infer_shapes")
    result = apply(m, "fuse_consecutive_slices")
    apply(m, "eliminate_dead_code")
    assert result.stats["slices_fused"] == 1 and ops(m) == ["Slice"]
    (node,) = list(m.graph)
    assert node.name == "slice_b" and node.output.name == "y" and node.inputs[0].name == "x"
    same_outputs(p, m, dims={"N": 2})
    same_outputs(p, m, dims={"N": 5}, seed=1)


def test_steps_and_negative_bounds_carry_over() -> None:
    m, p = _pair({"starts": [-1], "ends": [-10], "axes": [2], "steps": [-2]},
                 {"starts": [1, 0], "ends": [8, 3], "axes": [1, 3], "steps": [3, 1]})
    apply(m, "infer_shapes")
    assert apply(m, "fuse_consecutive_slices").stats["slices_fused"] == 1
    apply(m, "eliminate_dead_code")
    assert ops(m) == ["Slice"]
    same_outputs(p, m, dims={"N": 3})
    same_outputs(p, m, dims={"N": 1}, seed=2)


def test_cuts_of_the_same_axis_compose() -> None:
    """Negative and overshooting bounds on both sides, a shared axis and a second one; each axis cut
    twice is a known size (9 and 10), the batch axis is dynamic."""
    for seed, (first, second) in enumerate([
        ({"starts": [1, -8], "ends": [8, 100], "axes": [1, 2]}, {"starts": [2, -3], "ends": [-1, 5], "axes": [1, 3]}),
        ({"starts": [-7], "ends": [-2], "axes": [2]}, {"starts": [-100, 0], "ends": [3, 2], "axes": [-2, 0]}),
        ({"starts": [6], "ends": [3], "axes": [1]}, {"starts": [0], "ends": [1], "axes": [1]}),  # empty
    ]):
        m, p = _pair(first, second)
        apply(m, "infer_shapes")
        assert apply(m, "fuse_consecutive_slices").stats["slices_fused"] == 1, (first, second)
        apply(m, "eliminate_dead_code")
        assert ops(m) == ["Slice"]
        same_outputs(p, m, dims={"N": 3}, seed=seed)
        same_outputs(p, m, dims={"N": 6}, seed=seed + 10)


def test_pairs_left_alone_say_why() -> None:
    stepped, _ = _pair({"starts": [1], "ends": [8], "axes": [1], "steps": [2]},
                       {"starts": [2], "ends": [5], "axes": [1]})
    apply(stepped, "infer_shapes")
    result = apply(stepped, "fuse_consecutive_slices")
    assert result.stats["slices_fused"] == 0 and ops(stepped) == ["Slice", "Slice"]
    assert any("both slice axis [1]" in r for *_, r in result.refusals)

    dynamic, _ = _pair({"starts": [1], "ends": [8], "axes": [0]}, {"starts": [0], "ends": [2], "axes": [0]})
    apply(dynamic, "infer_shapes")
    result = apply(dynamic, "fuse_consecutive_slices")  # the batch axis's size is not known
    assert result.stats["slices_fused"] == 0 and any("both slice axis [0]" in r for *_, r in result.refusals)

    shared, _ = _pair({"starts": [0], "ends": [7], "axes": [1]}, {"starts": [0], "ends": [6], "axes": [2]},
                      extra_reader=True)
    result = apply(shared, "fuse_consecutive_slices")
    assert result.stats["slices_fused"] == 0
    assert any("also read by 'relu' (Relu)" in r for *_, r in result.refusals)


def _patch_merging(x3_axis: str = "ax2"):
    """Swin's patch merging: x[:, 0::2] and x[:, 1::2], each cut again along W into 0::2 and 1::2."""
    inits = [init(k, np.array(v, I64)) for k, v in
             {"z": [0], "one": [1], "big": [2**63 - 1], "ax1": [1], "ax2": [2], "two": [2]}.items()]
    nodes = [mk("Slice", ["x", "z", "big", "ax1", "two"], ["even"], name="rows_even"),
             mk("Slice", ["x", "one", "big", "ax1", "two"], ["odd"], name="rows_odd"),
             mk("Slice", ["even", "z", "big", "ax2", "two"], ["x0"], name="x0"),
             mk("Slice", ["odd", "z", "big", "ax2", "two"], ["x1"], name="x1"),
             mk("Slice", ["even", "one", "big", "ax2", "two"], ["x2"], name="x2"),
             mk("Slice", ["odd", "one", "big", x3_axis, "two"], ["x3"], name="x3"),
             *(mk("Neg", [f"x{k}"], [f"y{k}"]) for k in range(4))]
    return model(nodes, [vi("x", F, ["N", 8, 8, 3])], [vi(f"y{k}", F, None) for k in range(4)], inits)


def test_a_slice_read_by_several_slices_merges_into_each() -> None:
    m, p = _patch_merging()
    apply(m, "infer_shapes")
    result = apply(m, "fuse_consecutive_slices")
    apply(m, "eliminate_dead_code")
    assert result.stats["slices_fused"] == 4 and ops(m).count("Slice") == 4
    assert all(n.inputs[0].name == "x" for n in m.graph if n.op == "Slice")
    same_outputs(p, m, dims={"N": 1})
    same_outputs(p, m, dims={"N": 3}, seed=1)
    assert not apply(m, "fuse_consecutive_slices").changed


def test_a_shared_slice_stays_whole_when_one_reader_cannot_take_it() -> None:
    # x3 cuts axis 1 again with step 2 after rows_odd's step 2: not composed, so x1 is not rewritten either
    m, p = _patch_merging(x3_axis="ax1")
    apply(m, "infer_shapes")
    result = apply(m, "fuse_consecutive_slices")
    apply(m, "eliminate_dead_code")
    assert result.stats["slices_fused"] == 2 and ops(m).count("Slice") == 5
    assert {n.name: n.inputs[0].name for n in m.graph if n.op == "Slice"}["x1"] == "odd"
    assert any("both slice axis [1]" in r for *_, r in result.refusals)
    same_outputs(p, m, dims={"N": 2})
    same_outputs(p, m, dims={"N": 4}, seed=3)
