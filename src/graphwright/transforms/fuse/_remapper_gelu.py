"""fuse_remapper's GELU rule: MatMul + BiasAdd + a decomposed GELU -> _FusedMatMul [BiasAdd, Gelu*].

The decomposition is recognised by what it computes, not by one spelling: from a root ``Mul``, the
region back to ``BiasAdd(MatMul)`` (elementwise ops with scalar constants only, at most
``MAX_REGION`` nodes, every node read only inside the region) is evaluated in float64 on probe
points and compared with the exact (``0.5·x·(1 + erf(x/√2))``) and the tanh
(``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``) forms, which differ by up to ~5e-4; a match
within 1e-5 decides ``GeluExact`` or ``GeluApproximate``.  So TensorFlow's ``tf.nn.gelu``
(``Erfc`` form, ``Pow`` form), BERT's ``Erf`` form and ``x*x*x`` spellings all fuse.
TF 2.21's own remapper matches none of these spellings of ``tf.nn.gelu``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...ir import Attr, Node, constant_value
from ...patterns import ANY, Match, P, Replacement, Skip
from ._remapper_kernels import same_device, why_no_kernel

__all__ = ["GELU_ROOT", "gelu_rule"]

GELU_ROOT = P("Mul", ANY, ANY, name="root")
MAX_REGION = 12
_OPS = frozenset({"Mul", "Add", "AddV2", "Sub", "RealDiv", "Neg", "Pow", "Tanh", "Erf", "Erfc", "Square"})
_PROBE = np.linspace(-5.0, 5.0, 201)
_ERF = np.vectorize(math.erf)
_EXACT = 0.5 * _PROBE * (1.0 + _ERF(_PROBE / math.sqrt(2.0)))
_TANH = 0.5 * _PROBE * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (_PROBE + 0.044715 * _PROBE ** 3)))
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Mul": np.multiply, "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "RealDiv": np.divide, "Pow": np.power,
}
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative, "Tanh": np.tanh, "Erf": _ERF, "Erfc": lambda v: 1.0 - _ERF(v), "Square": np.square,
}


def _is_bias_matmul(node: Node | None) -> bool:
    return (node is not None and node.op == "BiasAdd" and node.inputs[0] is not None
            and node.inputs[0].producer is not None and node.inputs[0].producer.op == "MatMul")


def _region(root: Node) -> tuple[Node | None, list[Node], str | None]:
    """(the BiasAdd feeding the region, the region's nodes, None) or (None, [], reason)."""
    region: dict[Node, None] = {}
    stack, x = [root], None
    while stack:
        node = stack.pop()
        if node in region:
            continue
        if node.op not in _OPS:
            return None, [], f"{node.name!r} ({node.op}) is not an elementwise op of a GELU"
        region[node] = None
        if len(region) > MAX_REGION:
            return None, [], f"more than {MAX_REGION} ops between the root and a BiasAdd(MatMul)"
        for value in node.inputs:
            if value is None:
                return None, [], f"{node.name!r} has a missing input"
            const = constant_value(value)
            if const is not None:
                if const.numpy().size != 1:
                    return None, [], f"{value.name!r} is not a scalar constant"
                continue
            producer = value.producer
            if _is_bias_matmul(producer):
                if x is not None and producer is not x:
                    return None, [], "the region reads two different BiasAdds"
                x = producer
            elif producer is None:
                return None, [], f"the region reads graph input {value.name!r}"
            else:
                stack.append(producer)
    if x is None:
        return None, [], "no BiasAdd(MatMul) feeds the region"
    return x, list(region), None


def _evaluate(root: Node, x: Node) -> np.ndarray:
    memo: dict[Node, np.ndarray] = {x: _PROBE}

    def value(v) -> np.ndarray:  # type: ignore[no-untyped-def]
        const = constant_value(v)
        if const is not None:
            return np.asarray(const.numpy(), np.float64).reshape(())
        return run(v.producer)

    def run(node: Node) -> np.ndarray:
        if node not in memo:
            args = [value(v) for v in node.inputs]
            fn = _BINARY.get(node.op)
            memo[node] = fn(args[0], args[1]) if fn is not None else _UNARY[node.op](args[0])
        return memo[node]

    with np.errstate(all="ignore"):
        return np.asarray(run(root), np.float64)


def gelu_rule(target: str, dead: list[Node]) -> Callable[[Match], Replacement | Skip]:
    """The rule; the region, BiasAdd and MatMul it replaces are appended to ``dead`` (removed after the sweep)."""
    def rule(m: Match) -> Replacement | Skip:
        root = m.node
        assert root is not None
        x, region, why = _region(root)
        if why or x is None:
            return m.skip(why or "no GELU")
        matmul = x.inputs[0].producer
        assert matmul is not None
        inside = set(region) | {x}
        for node in [*region, x, matmul]:
            if node is not root and any(u not in inside for out in node.outputs for u, _ in out.uses()):
                return m.skip(f"{node.name!r} ({node.op}) is also read outside the GELU")
            if node is not root and any(v.is_graph_output for v in node.outputs):
                return m.skip(f"intermediate {node.name!r} ({node.op}) is a graph output")
            if node.control_inputs or node.control_users:
                return m.skip(f"{node.name!r} ({node.op}) has control edges")
        got = _evaluate(root, x)
        kind = ("GeluExact" if np.allclose(got, _EXACT, rtol=0, atol=1e-5) else
                "GeluApproximate" if np.allclose(got, _TANH, rtol=0, atol=1e-5) else None)
        if kind is None:
            return m.skip("the region does not compute a GELU")
        types = {n.attrs.get("T") and n.attr("T") for n in [*region, x, matmul]}
        if len(types) != 1:
            return m.skip("the GELU's ops do not share one element type")
        device, why_dev = same_device([*region, x, matmul])
        if why_dev:
            return m.skip(why_dev)
        why_k = why_no_kernel("_FusedMatMul", ["BiasAdd", kind], matmul.attr("T"), "NHWC", target=target,
                              device=device or "")
        if why_k:
            return m.skip(why_k)
        fused = _fused_from(m, matmul, x, kind, root.name)
        dead.extend(n for n in [*region, x, matmul] if n is not root)
        return Replacement([fused], {root.outputs[0]: fused.output})
    return rule


def _fused_from(m: Match, matmul: Node, bias: Node, kind: str, name: str) -> Node:
    """_FusedMatMul(a, B, b) with fused_ops [BiasAdd, kind] (MatMul's undeclared grad_a/grad_b dropped)."""
    return m.clone(matmul, op="_FusedMatMul", inputs=[matmul.inputs[0], matmul.inputs[1], bias.inputs[1]], name=name,
                   attrs={"fused_ops": Attr.strings(["BiasAdd", kind]), "num_args": Attr.int(1),
                          "epsilon": Attr.float(1e-4), "leakyrelu_alpha": Attr.float(0.2),
                          "grad_a": None, "grad_b": None})
