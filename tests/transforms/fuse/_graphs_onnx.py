"""Builders of the small hand-made ONNX graphs the fusion tests run on (one per pattern variant)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper

from ._helpers_onnx import build, init, node, vi

SHAPE = (2, 3, 8)


def _rng() -> np.random.Generator:
    return np.random.default_rng(1)


def layer_norm(opset: int = 17, *, square: str = "pow", divide: bool = True, axes: Sequence[int] = (-1,),
               var_axes: Sequence[int] | None = None, gamma: Sequence[int] | None = (8,),
               beta: Sequence[int] | None = (8,), shape: Sequence[int] = SHAPE, leak: str | None = None,
               constant_nodes: bool = False, eps: float = 1e-5) -> onnx.ModelProto:
    """A decomposed LayerNorm; ``leak`` names an intermediate also exposed as a second graph output."""
    rng = _rng()
    var_axes = axes if var_axes is None else var_axes
    inits = [init("eps", np.float32(eps))] + ([init("two", np.float32(2.0))] if square == "pow" else [])
    nodes = []

    def reduce(src: str, dst: str, ax: Sequence[int]) -> None:
        if opset >= 18:
            inits.append(init(f"{dst}_axes", np.array(ax, np.int64)))
            nodes.append(node("ReduceMean", [src, f"{dst}_axes"], [dst]))
        else:
            nodes.append(node("ReduceMean", [src], [dst], axes=list(ax)))

    reduce("x", "mean", axes)
    nodes.append(node("Sub", ["x", "mean"], ["d"]))
    nodes.append(node("Pow", ["d", "two"], ["sq"]) if square == "pow" else node("Mul", ["d", "d"], ["sq"]))
    reduce("sq", "var", var_axes)
    nodes += [node("Add", ["var", "eps"], ["ve"]), node("Sqrt", ["ve"], ["std"])]
    if divide:
        nodes.append(node("Div", ["d", "std"], ["n"]))
    else:
        nodes += [node("Reciprocal", ["std"], ["r"]), node("Mul", ["r", "d"], ["n"])]
    last = "n"
    if gamma is not None:
        inits.append(init("g", rng.standard_normal(gamma).astype(np.float32)))
        nodes.append(node("Mul", [last, "g"], ["s"]))
        last = "s"
    if beta is not None:
        inits.append(init("b", rng.standard_normal(beta).astype(np.float32)))
        nodes.append(node("Add", ["b", last], ["y"]))
        last = "y"
    nodes.append(node("Identity", [last], ["out"]))
    outputs = [vi("out", list(shape))]
    if leak is not None:
        nodes.append(node("Identity", [leak], ["leak"]))
        outputs.append(vi("leak", None if leak in ("mean", "var") else list(shape)))
    if constant_nodes:
        consts = [helper.make_node("Constant", [], [t.name], value=t, name=f"{t.name}_const") for t in inits]
        nodes, inits = consts + nodes, []
    return build(nodes, [vi("x", list(shape))], outputs, inits, opset=opset)


def gelu(opset: int = 20, *, form: int = 0, tanh: bool = False, divide: bool = True, swap: bool = False,
         cube: str = "pow", half: float = 0.5, leak: str | None = None, shape: Sequence[int] = (2, 5)) -> onnx.ModelProto:
    """A decomposed GELU; ``form`` picks the grouping of 0.5·x·(1+t)."""
    inits = [init("one", np.float32(1.0)), init("half", np.float32(half))]
    nodes = []
    if tanh:
        inits += [init("k", np.float32(0.044715)), init("s", np.float32(np.sqrt(2 / np.pi)))]
        if cube == "pow":
            inits.append(init("three", np.float32(3.0)))
            nodes.append(node("Pow", ["x", "three"], ["cube"]))
        else:
            nodes += [node("Mul", ["x", "x"], ["sq"]), node("Mul", ["sq", "x"], ["cube"])]
        nodes += [node("Mul", ["k", "cube"], ["kc"]), node("Add", ["x", "kc"], ["inner"]),
                  node("Mul", ["inner", "s"], ["targ"]), node("Tanh", ["targ"], ["t"])]
    else:
        if divide:
            inits.append(init("c", np.float32(np.sqrt(2))))
            nodes.append(node("Div", ["x", "c"], ["targ"]))
        else:
            inits.append(init("c", np.float32(1 / np.sqrt(2))))
            nodes.append(node("Mul", ["c", "x"], ["targ"]))
        nodes.append(node("Erf", ["targ"], ["t"]))
    nodes.append(node("Add", ["one", "t"] if swap else ["t", "one"], ["op"]))
    if form == 0:
        nodes += [node("Mul", ["x", "op"], ["a"]), node("Mul", ["a", "half"], ["y"])]
    elif form == 1:
        nodes += [node("Mul", ["op", "half"], ["a"]), node("Mul", ["a", "x"], ["y"])]
    else:
        nodes += [node("Mul", ["half", "x"], ["a"]), node("Mul", ["op", "a"], ["y"])]
    outputs = [vi("y", list(shape))]
    if leak is not None:
        nodes.append(node("Identity", [leak], ["leak"]))
        outputs.append(vi("leak", list(shape)))
    return build(nodes, [vi("x", list(shape))], outputs, inits, opset=opset)
