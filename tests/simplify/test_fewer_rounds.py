"""What keeps simplify's fixed point short: PyTorch's pad-order idiom and Pad shapes known to the
shape lattice (Swin's windows resolve in one round, not one outer iteration per stage), a shape
inference that only renumbered ONNX's generated symbols counting as no change, and no provenance
recorded unless asked.  Outputs are compared on onnxruntime at two sizes of each dynamic dim."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphwright.formats import onnx as onnx_format
from graphwright.simplify import simplify
from graphwright.transforms.runner import PROVENANCE_KEY
from tests.transforms._onnx_build import F, apply, init, model, ops, same_outputs, vi

mk = helper.make_node


def _i(name: str, *values: int, scalar: bool = False):
    return init(name, np.array(values[0] if scalar else list(values), np.int64))


def _windowed(width: int = 10, window: int = 4):
    """x[B, 7, width, 4]: pad W up to a multiple of ``window`` with the pads computed at run time in
    PyTorch's order (last axis first, pairs reversed by Reshape [-1, 2] / Slice step -1 / Transpose /
    Reshape [-1]), then Reshape by Shape(padded) into windows of ``window`` columns."""
    nodes = [
        mk("Shape", ["x"], ["s"]), mk("Gather", ["s", "two_s"], ["w"], axis=0),
        mk("Mod", ["w", "win_s"], ["wm"]), mk("Sub", ["win_s", "wm"], ["rest"]), mk("Mod", ["rest", "win_s"], ["pw"]),
        mk("Unsqueeze", ["pw", "ax"], ["pwu"]),
        # torch order: (C_begin, C_end, W_begin, W_end, H_begin, H_end, B_begin, B_end)
        mk("Concat", ["z2", "z1", "pwu", "z4"], ["torch_pads"], axis=0),
        mk("Reshape", ["torch_pads", "m1_2"], ["pairs"]),
        mk("Slice", ["pairs", "m1", "big_neg", "ax", "m1"], ["reversed"]),
        mk("Transpose", ["reversed"], ["cols"], perm=[1, 0]),
        mk("Reshape", ["cols", "m1"], ["flat"]), mk("Cast", ["flat"], ["pads"], to=7),
        mk("Pad", ["x", "pads"], ["xp"]),
        mk("Shape", ["xp"], ["sp"]), mk("Gather", ["sp", "zero_s"], ["b"], axis=0),
        mk("Gather", ["sp", "two_s"], ["wp"], axis=0), mk("Div", ["wp", "win_s"], ["nw"]),
        mk("Unsqueeze", ["b", "ax"], ["bu"]), mk("Unsqueeze", ["nw", "ax"], ["nwu"]),
        mk("Concat", ["bu", "seven", "nwu", "win", "four"], ["target"], axis=0),
        mk("Reshape", ["xp", "target"], ["y"]),
    ]
    inits = [_i("two_s", 2, scalar=True), _i("zero_s", 0, scalar=True), _i("win_s", window, scalar=True),
             _i("ax", 0), _i("z2", 0, 0), _i("z1", 0), _i("z4", 0, 0, 0, 0), _i("m1_2", -1, 2), _i("m1", -1),
             _i("big_neg", -(2**63) + 1), _i("seven", 7), _i("win", window), _i("four", 4)]
    return model(nodes, [vi("x", F, ["B", 7, width, 4])], [vi("y", F, None)], inits)


def test_torch_pad_order_idiom_and_the_padded_shape_fold_in_one_sweep() -> None:
    m, p = _windowed()
    apply(m, "infer_shapes")
    result = apply(m, "fold_symbolic_shapes")
    apply(m, "eliminate_dead_code")
    assert result.changed
    pad = next(n for n in m.graph if n.op == "Pad")
    assert pad.inputs[1].const is not None
    assert pad.inputs[1].const.numpy().tolist() == [0, 0, 0, 0, 0, 0, 2, 0]  # W padded 10 -> 12 at the end
    reshape = next(n for n in m.graph if n.op == "Reshape")
    # the padded width (12) is known in the same sweep: 3 windows of 4 (batch kept dynamic)
    assert reshape.inputs[1].const is not None
    assert reshape.inputs[1].const.numpy().tolist() in ([0, 7, 3, 4, 4], [-1, 7, 3, 4, 4])
    assert not {"Shape", "Gather", "Mod", "Transpose", "Slice"} & set(ops(m))
    for seed, dims in enumerate(({"B": 1}, {"B": 3})):
        same_outputs(p, m, dims=dims, seed=seed)


def test_simplify_of_the_padded_windows_is_short_idempotent_and_exact(tmp_path) -> None:
    _, p = _windowed(width=9, window=4)
    src = tmp_path / "windows.onnx"
    src.write_bytes(p.SerializeToString())
    m, report = simplify(src, provenance=False)
    assert report.converged and report.iterations <= 2
    assert report.after.nodes == 2  # Pad and Reshape, both with constant inputs
    for seed, dims in enumerate(({"B": 1}, {"B": 4})):
        same_outputs(p, m, dims=dims, seed=seed)
    out = tmp_path / "once.onnx"
    onnx_format.save(m, out)
    again, _ = simplify(out, provenance=False)
    out2 = tmp_path / "twice.onnx"
    onnx_format.save(again, out2)
    assert out2.read_bytes() == out.read_bytes()


def test_a_pad_of_unknown_amounts_keeps_its_shape_unknown() -> None:
    """Pads read from an input: the lattice may not invent the padded size (nothing folds)."""
    nodes = [mk("Pad", ["x", "pads"], ["xp"]), mk("Shape", ["xp"], ["s"]), mk("Gather", ["s", "one_s"], ["h"]),
             mk("Unsqueeze", ["h", "ax"], ["hu"]), mk("Concat", ["hu", "m1"], ["t"], axis=0),
             mk("Reshape", ["xp", "t"], ["y"])]
    m, _p = model(nodes, [vi("x", F, [2, 3]), vi("pads", 7, [4])], [vi("y", F, None)],
                 [_i("one_s", 1, scalar=True), _i("ax", 0), _i("m1", -1)])
    apply(m, "infer_shapes")
    apply(m, "fold_symbolic_shapes")
    reshape = next(n for n in m.graph if n.op == "Reshape")
    assert reshape.inputs[1].const is None and "Shape" in ops(m)


def test_renumbered_symbols_alone_are_no_change_but_a_learned_dim_is() -> None:
    """Removing a node renumbers ONNX's unk__N symbols of everything after it; that alone is no change."""
    from graphwright.transforms.fold.infer_shapes_onnx import _Renaming

    r = _Renaming()
    r.note(F, ("unk__3", 4), F, ("unk__1", 4))
    r.note(F, ("unk__3", "unk__5"), F, ("unk__1", "unk__2"))
    assert not r.real
    r.note(F, ("unk__5",), F, ("unk__1",))  # two old symbols become one: dims now known equal
    assert r.real
    r = _Renaming()
    r.note(F, ("unk__3", 4), F, (7, 4))  # a dim learned
    assert r.real
    r = _Renaming()
    r.note(F, ("unk__0",), F, ("unk__0",))  # unchanged value keeps unk__0 ...
    r.note(F, ("unk__2",), F, ("unk__0",))  # ... so another symbol cannot become unk__0 too
    assert r.real


def test_no_provenance_unless_asked(tmp_path) -> None:
    _m, p = _windowed()
    src = tmp_path / "w.onnx"
    src.write_bytes(p.SerializeToString())
    plain, _ = simplify(src, provenance=False)
    assert PROVENANCE_KEY not in plain.meta
    recorded, _ = simplify(src)
    assert PROVENANCE_KEY in recorded.meta
    assert onnx_format.serialize(plain) == onnx_format.serialize(recorded)
