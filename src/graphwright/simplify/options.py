"""Options of ``simplify``: sizes, input shapes and pass names as users type them.

``parse_size("1.5GB")`` -> bytes (K/M/G are powers of 1024, with or without
``B``/``iB``); ``parse_input_shapes(["x:1,3,224,224"])`` -> ``{"x": (1, 3, 224, 224)}``
(a name-less ``"1,3,224,224"`` means the only input; ``-1``/``?`` leave a dim
dynamic, any other non-number is a symbolic dim); ``resolve_skips`` maps the
names users give to ``--skip-optimization`` (ours, eliminate_nop's rules, and
onnxoptimizer's names for the same passes) to what to turn off.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from ..errors import TransformError
from ..transforms import get as get_transform
from .passes import ONNX_FUSIONS, OPTIMIZATION_PASSES

__all__ = ["parse_size", "parse_input_shapes", "resolve_skips", "ALIASES", "InputShapes", "skippable_names"]

#: name -> dims (int size, str symbol, or None for dynamic)
InputShapes = Mapping[str, Sequence[int | str | None]]

#: onnxoptimizer/onnxsim pass names -> the pass of ours that does the same.
ALIASES: dict[str, str] = {
    "eliminate_deadend": "eliminate_dead_code",
    "eliminate_unused_initializer": "eliminate_dead_code",
    "eliminate_nop_dropout": "eliminate_identity",
    "eliminate_if_with_const_cond": "inline_constant_if",
    "eliminate_duplicate_initializer": "merge_duplicate_nodes",
    "fuse_matmul_add_bias_into_gemm": "fuse_matmul_add_into_gemm",
    "fuse_add_bias_into_conv": "fuse_mul_add_into_conv",
    "fuse_consecutive_squeezes": "fuse_consecutive_reshapes",
    "fuse_consecutive_unsqueezes": "fuse_consecutive_reshapes",
    "fuse_pad_into_pool": "fuse_pad_into_conv",
}
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from ``"1024"``, ``"1KB"``, ``"1.5GB"``, ``"100M"``, ``"2GiB"``."""
    if isinstance(text, int):
        if text < 0:
            raise TransformError(f"a size cannot be negative, got {text}")
        return text
    match = _SIZE.match(text)
    if match is None:
        raise TransformError(f"cannot read size {text!r}; write a number with an optional unit, e.g. 1KB, 100MB, 1.5GB")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _dim(text: str, where: str) -> int | str | None:
    text = text.strip()
    if text in ("?", "-1", ""):
        return None
    if re.fullmatch(r"\d+", text):
        return int(text)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        return text
    raise TransformError(f"{where}: dim {text!r} is not a size, a symbol or ?")


def parse_input_shapes(items: Iterable[str], input_names: Sequence[str]) -> dict[str, tuple[int | str | None, ...]]:
    """``NAME:D1,D2,...`` items (or one bare ``D1,D2`` for a single-input model) -> shapes by input name."""
    shapes: dict[str, tuple[int | str | None, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        if not sep:
            if len(input_names) != 1:
                raise TransformError(
                    f"--overwrite-input-shape {item!r} names no input, but the model has {len(input_names)} "
                    f"inputs ({', '.join(input_names)}); write NAME:D1,D2,..."
                )
            name = input_names[0]
        if name not in input_names:
            raise TransformError(
                f"--overwrite-input-shape names input {name!r}, which the model does not have; "
                f"its inputs are: {', '.join(input_names) or 'none'}"
            )
        where = f"--overwrite-input-shape {item!r}"
        shapes[name] = tuple(_dim(d, where) for d in dims.split(",")) if dims.strip() else ()
    return shapes


def nop_rule_names() -> frozenset[str]:
    """The rules of ``eliminate_nop`` (``x*1 -> x`` ...), as its registered transform lists them."""
    return frozenset(get_transform("eliminate_nop").fn.rule_names)  # type: ignore[attr-defined]


def skippable_names() -> list[str]:
    """Every name ``--skip-optimization`` accepts, sorted."""
    return sorted(set(OPTIMIZATION_PASSES) | set(ONNX_FUSIONS) | nop_rule_names() | set(ALIASES))


def resolve_skips(names: Iterable[str]) -> tuple[set[str], set[str]]:
    """(passes to skip, eliminate_nop rules to skip) for the given names; unknown names are errors."""
    passes: set[str] = set()
    rules: set[str] = set()
    rule_names = nop_rule_names()
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in rule_names:
            rules.add(name)
        elif name in OPTIMIZATION_PASSES or name in ONNX_FUSIONS:
            passes.add(name)
        elif name in ALIASES:
            passes.add(ALIASES[name])
        else:
            raise TransformError(
                f"unknown optimization {name!r} in --skip-optimization; valid names: {', '.join(skippable_names())}"
            )
    return passes, rules
