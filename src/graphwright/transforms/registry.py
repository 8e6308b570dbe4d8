"""The transform registry: names of the Graph Transform Tool mapped to functions.

A transform is a function ``fn(model, ctx, *, option=DEFAULT, ...)`` registered
with :func:`transform`.  Its keyword-only parameters, with their annotations
and defaults, *are* its pipeline parameters: the string values of a pipeline
call are parsed against them (``int``, ``float``, ``bool``, ``str``,
``list[str]``, ``list[int]``), unknown names are rejected, and the same function
stays callable from Python with real keyword arguments.

Built-in transforms are imported by :mod:`graphwright.transforms.builtin`;
plugins register through the ``graphwright.transforms`` entry-point group, each
entry point naming a module (or callable) whose import registers transforms.
Both are loaded explicitly, on the first lookup, never as an import side effect; a lookup of
one of :data:`LAZY_BUILTINS` (simplify's passes) imports that transform's module only.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import TransformError
from .params import Params

__all__ = [
    "transform", "TransformSpec", "ParamSpec", "TransformResult", "get", "all_transforms",
    "DIALECTS", "ENTRY_POINT_GROUP",
]

ENTRY_POINT_GROUP = "graphwright.transforms"
#: Every dialect; pass it to ``transform(dialects=...)`` for format-independent transforms.
DIALECTS = frozenset({"tf", "onnx", "tflite"})


@dataclass
class TransformResult:
    """What a transform did: whether the graph changed, counters, and notes for the user."""

    changed: bool = False
    stats: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Matches a rewrite left alone: ``(rule, node, op, reason)`` each (see :mod:`.rules`).
    refusals: list[tuple[str, str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: str  # "int" | "float" | "bool" | "str" | "list[str]" | "list[int]"
    default: Any
    required: bool

    def read(self, params: Params) -> Any:
        if self.kind == "int":
            value: Any = params.one_int(self.name)
        elif self.kind == "float":
            value = params.one_float(self.name)
        elif self.kind == "bool":
            value = params.one_bool(self.name)
        elif self.kind == "str":
            value = params.one_string(self.name)
        elif self.kind == "list[int]":
            value = params.ints(self.name) if params.has(self.name) else None
        else:
            value = params.strings(self.name) if params.has(self.name) else None
        if value is None:
            if self.required:
                raise TransformError(f"{params.transform}: missing required parameter {self.name!r}")
            return self.default
        return value


@dataclass(frozen=True)
class TransformSpec:
    name: str
    fn: Callable[..., TransformResult]
    dialects: frozenset[str]
    params: tuple[ParamSpec, ...]
    summary: str
    origin: str = "builtin"

    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    def bind(self, params: Params) -> dict[str, Any]:
        """Parse the string parameters into keyword arguments; rejects unknown names."""
        known = set(self.param_names()) | {"ignore_errors"}
        unknown = [name for name in params.names() if name not in known]
        if unknown:
            valid = ", ".join(self.param_names() + ["ignore_errors"])
            raise TransformError(f"{self.name}: unknown parameter {unknown[0]!r}; valid parameters: {valid}")
        return {p.name: p.read(params) for p in self.params}


_REGISTRY: dict[str, TransformSpec] = {}
_LOADED = False

_KINDS: dict[Any, str] = {int: "int", float: "float", bool: "bool", str: "str",
                          list[str]: "list[str]", list[int]: "list[int]"}


def transform(name: str, *, dialects: Iterable[str] = DIALECTS) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as the transform ``name`` for the given dialects."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"transform {name!r} is registered twice")
        module = getattr(fn, "__module__", "") or ""
        origin = "builtin" if module.startswith("graphwright.") else module
        _REGISTRY[name] = TransformSpec(
            name, fn, frozenset(dialects), _param_specs(fn), _summary(fn), origin
        )
        return fn

    return register


def _param_specs(fn: Callable[..., Any]) -> tuple[ParamSpec, ...]:
    hints = typing.get_type_hints(fn)
    specs = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        hint = hints.get(p.name, str)
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if hint not in _KINDS and len(args) == 1:  # Optional[X]
            hint = args[0]
        if hint not in _KINDS:
            raise TypeError(f"{fn.__name__}: parameter {p.name} has unsupported type {hint}")
        required = p.default is inspect.Parameter.empty
        specs.append(ParamSpec(p.name, _KINDS[hint], None if required else p.default, required))
    return tuple(specs)


def _summary(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    importlib.import_module(f"{__package__}.builtin")
    from importlib import metadata  # lazy: ~25 ms of imports (email, zipfile...) only a full load needs

    for entry in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            loaded = entry.load()
        except Exception as e:  # a broken plugin must not break the tool: report and go on
            raise TransformError(
                f"transform plugin {entry.name!r} ({entry.value}) failed to load: {e}; "
                "fix or uninstall the plugin"
            ) from e
        if callable(loaded) and not inspect.ismodule(loaded):
            loaded()


#: Built-in transforms a lookup by name loads on their own (their module only, not every built-in
#: and plugin): ``simplify``'s passes, so that its start-up imports no TensorFlow/TFLite/quantize
#: transform it never runs.  Any other name loads everything; tests/simplify/test_lazy_registry.py
#: checks each entry against the full registry.
LAZY_BUILTINS: dict[str, str] = {
    "eliminate_dead_code": "cleanup.eliminate_dead_code_onnx",
    "eliminate_identity": "cleanup.eliminate_identity_onnx",
    "eliminate_nop": "cleanup.eliminate_nop_onnx",
    "fold_symbolic_shapes": "fold.fold_symbolic_shapes_onnx",
    "fuse_attention": "fuse.fuse_attention_onnx",
    "fuse_bn_into_conv": "fuse.fuse_bn_into_conv_onnx",
    "fuse_consecutive_reshapes": "fuse.fuse_consecutive_reshapes_onnx",
    "fuse_consecutive_slices": "fuse.fuse_consecutive_slices_onnx",
    "fuse_consecutive_transposes": "fuse.fuse_consecutive_transposes_onnx",
    "fuse_gelu": "fuse.fuse_gelu_onnx",
    "fuse_layer_norm": "fuse.fuse_layer_norm_onnx",
    "fuse_matmul_add_into_gemm": "fuse.fuse_matmul_add_into_gemm_onnx",
    "fuse_mul_add_into_conv": "fuse.fuse_mul_add_into_conv_onnx",
    "fuse_ort_contrib": "fuse.fuse_ort_contrib_onnx",
    "fuse_pad_into_conv": "fuse.fuse_pad_into_conv_onnx",
    "fuse_reshape_gemm": "fuse.fuse_reshape_gemm_onnx",
    "fuse_rms_norm": "fuse.fuse_rms_norm_onnx",
    "fuse_slices_into_split": "fuse.fuse_slices_into_split_onnx",
    "infer_shapes": "fold.infer_shapes_onnx",
    "inline_constant_if": "inline.inline_constant_if_onnx",
    "inline_local_functions": "inline.inline_local_functions_onnx",
    "merge_duplicate_nodes": "cleanup.merge_duplicate_nodes",
    "onnx_fold_constants": "fold.onnx_fold_constants",
}


def get(name: str) -> TransformSpec:
    """The transform registered as ``name``; the error lists the valid names."""
    if not _LOADED and name in LAZY_BUILTINS:
        spec = _REGISTRY.get(name)
        if spec is None:
            importlib.import_module(f"{__package__}.{LAZY_BUILTINS[name]}")
            spec = _REGISTRY.get(name)
        if spec is not None:
            return spec
    _load()
    spec = _REGISTRY.get(name)
    if spec is None:
        close = [n for n in sorted(_REGISTRY) if n.split("_")[0] == name.split("_")[0]]
        hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
        raise TransformError(
            f"unknown transform {name!r}{hint}; run 'graphwright list-transforms' to see the valid ones"
        )
    return spec


def all_transforms() -> list[TransformSpec]:
    """Every registered transform, sorted by name."""
    _load()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]
