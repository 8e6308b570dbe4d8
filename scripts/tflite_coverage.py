"""Regenerate docs/tflite_coverage.md: which TFLite operators the reference interpreter runs,
for which types, and how each is checked — measured, not declared.

Usage:  python scripts/tflite_coverage.py [--seeds N] [--wide]   (needs the [dev] extra)

Every model of the TFLite test corpora (tests/models: tflite_model, tflite_ops and the
per-operator ``tflite_<part>`` families; ``--wide`` adds the models only the wide sweep builds)
runs on the reference interpreter and on LiteRT's reference kernels (``litert-ref``,
``BUILTIN_REF``), and where TensorFlow Lite Micro has the model's operators, on TFLM too.
Each operator output is classed by its type (int8 / int16 / uint8 quantized, float32, int32,
int64, bool, and ``hybrid`` for float outputs computed from 8-bit weights) and marked:

* ``exact``: identical to LiteRT's reference kernels on every element, every seed;
* ``float``: within 1e-5 of the tensor's magnitude (or LiteRT's default kernels' deviation);
* ``DIFFERS``: outside those bounds somewhere (the table says where to look);
* ``—``: no corpus model has it.

The ``TFLM`` column says whether TFLM registers the operator and, where a corpus model ran on
it, whether every tensor of that operator was identical (quantized) or within bounds (float).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graphwright.errors import GraphwrightError  # noqa: E402
from graphwright.ir import Node, Value  # noqa: E402
from graphwright.runtime.execute import Job, execute  # noqa: E402
from graphwright.runtime.reference import Interpreter, supported_operators  # noqa: E402
from graphwright.runtime.reference.misc_ops import REFUSED  # noqa: E402  (the operators refused, and why)
from tests.models import MODEL_NAMES, ModelInfo, get_model  # noqa: E402
from tests.runtime.reference._oracle import _litert_keeps, feeds_for  # noqa: E402

#: the interpreter's TFLM flavour (TFLM's own kernel arithmetic) is what TFLM is compared with, where it exists
TFLM_FLAVOR = "flavor" in Interpreter.__init__.__code__.co_varnames

OUT = ROOT / "docs" / "tflite_coverage.md"
#: the builtins LiteRT's BuiltinRefOpResolver registers (tensorflow/lite/kernels/register_ref.cc, TF 2.21)
BUILTIN_REF = (
    "ABS", "HARD_SWISH", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "LOGISTIC", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "L2_POOL_2D", "CONV_2D", "DEPTHWISE_CONV_2D", "SVDF", "RNN", "BIDIRECTIONAL_SEQUENCE_RNN",
    "UNIDIRECTIONAL_SEQUENCE_RNN", "EMBEDDING_LOOKUP", "EMBEDDING_LOOKUP_SPARSE", "FULLY_CONNECTED",
    "LSH_PROJECTION", "HASHTABLE_LOOKUP", "SOFTMAX", "CONCATENATION", "ADD", "SPACE_TO_BATCH_ND",
    "BATCH_TO_SPACE_ND", "MUL", "L2_NORMALIZATION", "BROADCAST_TO", "LOCAL_RESPONSE_NORMALIZATION", "LSTM",
    "BIDIRECTIONAL_SEQUENCE_LSTM", "UNIDIRECTIONAL_SEQUENCE_LSTM", "PAD", "PADV2", "RESHAPE", "RESIZE_BILINEAR",
    "RESIZE_NEAREST_NEIGHBOR", "SKIP_GRAM", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "GATHER", "TRANSPOSE", "MEAN",
    "DIV", "SUB", "SPLIT", "SPLIT_V", "SQUEEZE", "STRIDED_SLICE", "EXP", "TOPK_V2", "LOG", "LOG_SOFTMAX", "CAST",
    "DEQUANTIZE", "PRELU", "MAXIMUM", "MINIMUM", "ARG_MAX", "ARG_MIN", "GREATER", "GREATER_EQUAL", "LESS",
    "LESS_EQUAL", "FLOOR", "NEG", "SELECT", "SELECT_V2", "SLICE", "SIN", "COS", "TRANSPOSE_CONV", "TILE", "SUM",
    "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL", "EXPAND_DIMS", "SPARSE_TO_DENSE",
    "EQUAL", "NOT_EQUAL", "SQRT", "RSQRT", "SHAPE", "RANK", "POW", "FAKE_QUANT", "PACK", "ONE_HOT", "LOGICAL_OR",
    "LOGICAL_AND", "LOGICAL_NOT", "UNPACK", "FLOOR_DIV", "SQUARE", "ZEROS_LIKE", "FLOOR_MOD", "RANGE",
    "LEAKY_RELU", "SQUARED_DIFFERENCE", "FILL", "MIRROR_PAD", "UNIQUE", "REVERSE_V2", "ADD_N", "GATHER_ND",
    "WHERE", "REVERSE_SEQUENCE", "MATRIX_DIAG", "QUANTIZE", "MATRIX_SET_DIAG", "IF", "WHILE",
    "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "SCATTER_ND", "DENSIFY", "BATCH_MATMUL", "CONV_3D",
    "IMAG", "REAL", "COMPLEX_ABS", "CONV_3D_TRANSPOSE", "BROADCAST_ARGS", "MULTINOMIAL", "RANDOM_STANDARD_NORMAL",
    "BUCKETIZE", "RANDOM_UNIFORM", "GELU",
)
#: (operator, type) where LiteRT's BUILTIN_REF kernel is wrong, so TFLM is the oracle instead
REF_BUGS = {
    ("SUM", "int8"): "BUILTIN_REF's SUM reads int8/int16 inputs as uint8 bytes",
    ("SUM", "int16"): "BUILTIN_REF's SUM reads int8/int16 inputs as uint8 bytes",
}
#: where TFLM itself computes wrongly (the interpreter's tflm flavour does not copy a bug)
TFLM_BUGS = {
    ("SPACE_TO_BATCH_ND", "int8"): "TFLM pads a quantized SPACE_TO_BATCH_ND with a value it never sets",
    ("SPACE_TO_BATCH_ND", "float32"): "TFLM's float SPACE_TO_BATCH_ND also pads with memory it never sets (the "
                                      "same run of deeplab_float gave pads of 0 or of 6e29, process by process)",
    ("WHILE", "float32"): "TFLM keeps a loop body's placeholder shapes where they are known only at run time "
                          "(NaN or garbage out)",
}
#: operators on corpus models whose outputs LiteRT cannot show (resource handles, variable writes):
#: checked through the tensors that read them
SEEN: set[str] = set()
TYPES = ("float32", "int8", "int16", "uint8", "hybrid", "int32", "int64", "bool", "complex64")
TFLITE_FAMILIES = ("tflite_model", "tflite_ops") + tuple(f for f in MODEL_NAMES if f.startswith("tflite_")
                                                         and f not in ("tflite_model", "tflite_ops"))


def type_of(node: Node, value: Value) -> str:
    dtype = value.dtype.value if value.dtype is not None else "?"
    if dtype == "float32" and any(v is not None and v.const is not None and v.dtype is not None
                                  and v.dtype.value in ("int8", "uint8") for v in node.inputs):
        return "hybrid"
    return dtype


def compare(info: ModelInfo, seeds: range, other: str) -> dict[tuple[str, str], bool]:
    """(op, type) -> every tensor of that kind within the contract on every seed.

    An operator is judged only where all its inputs matched: one whose input already differed
    (a difference made upstream) is left out, so a difference is charged to the operator that made it."""
    names = [v.name for node in Interpreter(info.path).graph for v in node.outputs if _litert_keeps(node, v)]
    verdict: dict[tuple[str, str], bool] = {}
    for seed in seeds:
        feeds = feeds_for(info, seed)
        interp = Interpreter(info.path, flavor="tflm") if other == "tflm" and TFLM_FLAVOR else Interpreter(info.path)
        mine = interp.trace(feeds)  # a fresh interpreter per input: stateful operators start as LiteRT's do
        theirs = execute(info.path, dict(feeds), Job(backend=other, outputs=names)).outputs
        default = None
        differs: set[str] = set()
        for node in interp.graph:
            SEEN.add(node.op)
            inherited = any(v is not None and v.name in differs for v in node.inputs)
            for v in node.outputs:
                if not _litert_keeps(node, v):
                    continue
                a, b = np.asarray(mine[v.name]), np.asarray(theirs.get(v.name))
                ok = a.shape == b.shape and a.dtype == b.dtype
                if ok and a.dtype.kind in "fc":
                    finite = np.isfinite(b)
                    ok = np.array_equal(finite, np.isfinite(a))
                    if ok and finite.any():
                        err = float(np.abs(a[finite].astype(np.complex128 if a.dtype.kind == "c" else np.float64) - b[finite]).max())
                        bound = 1e-5 * float(np.abs(b[finite]).max())
                        if err > bound and other == "litert-ref":
                            if default is None:
                                default = execute(info.path, dict(feeds), Job(backend="litert", outputs=names)).outputs
                            other_default = np.asarray(default[v.name])[finite]
                            bound = max(bound, float(np.abs(other_default - b[finite]).max()))
                        ok = err <= bound
                elif ok:
                    ok = np.array_equal(a, b)
                if not ok:
                    differs.add(v.name)
                if not inherited:
                    key = (node.op, type_of(node, v))
                    verdict[key] = verdict.get(key, True) and bool(ok)
    return verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="inputs per model (all-min, all-max, then random)")
    parser.add_argument("--wide", action="store_true", help="include the models of the wide sweep")
    parser.add_argument("--families", nargs="*", default=TFLITE_FAMILIES, metavar="FAMILY",
                        help="corpora to run (default: all TFLite ones)")
    args = parser.parse_args()
    from tests.runtime.reference.test_real_models import DEFAULT as REAL_DEFAULT
    from tests.runtime.reference.test_zoo_models import DEFAULT as ZOO_DEFAULT
    from tests.runtime.reference.test_zoo_models import OTHER as ZOO_ORACLE

    default = {"tflite_real": set(REAL_DEFAULT), "tflite_zoo": set(ZOO_DEFAULT)}

    try:
        from graphwright.runtime.tflm import supported_operators as tflm_operators
        tflm_ops: frozenset[str] = tflm_operators()
    except (ImportError, GraphwrightError):
        tflm_ops = frozenset()
    ref: dict[tuple[str, str], bool] = {}
    tflm: dict[tuple[str, str], bool] = {}
    seen_in: dict[str, set[str]] = defaultdict(set)
    failures: list[str] = []
    by_default: dict[tuple[str, str], bool] = {}  # judged against LiteRT's default kernels
    judged_by_ref: set[tuple[str, str]] = set()
    for family in args.families:
        for name in MODEL_NAMES[family]:
            if family in default and not args.wide and name not in default[family]:
                continue
            if family == "tflite_zoo" and name in ZOO_ORACLE:
                continue  # LiteRT's reference kernels cannot load it (an operator or version BUILTIN_REF lacks)
            label = f"{family}:{name}"
            try:
                info = get_model(family, name)
                try:
                    result = compare(info, range(args.seeds), "litert-ref")
                    judged_by_ref.update(result)
                except Exception as e:
                    if "Didn't find op" not in str(e):
                        raise
                    # an operator BUILTIN_REF lacks (ELU, CEIL, ROUND, …): LiteRT's default kernels judge it
                    result = compare(info, range(args.seeds), "litert")
                    by_default.update(result)
            except Exception as e:  # a model the interpreter refuses is a finding, not a crash
                failures.append(f"{label}: {' '.join(str(e).split())[:300]}")
                print("REFUSED", failures[-1], flush=True)
                continue
            ops = {op for op, _ in result}
            if any(key in REF_BUGS for key in result):
                try:  # those operators judged against TFLM; the model's other ones stay judged against LiteRT
                    on_tflm = compare(info, range(args.seeds), "tflm")
                    result.update({key: on_tflm[key] for key in result if key in REF_BUGS and key in on_tflm})
                except Exception as e:
                    print("TFLM", label, " ".join(str(e).split())[:200], flush=True)
            for key, ok in result.items():
                ref[key] = ref.get(key, True) and ok
                seen_in[key[0]].add(label)
            if tflm_ops and ops <= tflm_ops:
                try:
                    for key, ok in compare(info, range(min(args.seeds, 2)), "tflm").items():
                        tflm[key] = tflm.get(key, True) and ok
                except Exception as e:
                    print("TFLM", label, " ".join(str(e).split())[:200], flush=True)
            print("ok", label, flush=True)
    write(ref, tflm, tflm_ops, failures, args, set(by_default) - judged_by_ref)


def write(ref: dict[tuple[str, str], bool], tflm: dict[tuple[str, str], bool], tflm_ops: frozenset[str], failures: list[str],
          args: argparse.Namespace, by_default: set[tuple[str, str]]) -> None:
    implemented = set(supported_operators())
    # a corpus model ran it on BUILTIN_REF: registered there
    in_ref = set(BUILTIN_REF) | {op for op, t in ref if (op, t) not in by_default}
    ops = sorted(in_ref | implemented)
    lines = [
        "# TFLite operator coverage of the reference interpreter",
        "",
        "Generated by `python scripts/tflite_coverage.py"
        + (" --wide" if args.wide else "") + f"` ({args.seeds} inputs per model: all-min, all-max, random) — "
        "do not edit by hand. Each cell is measured on the converter-made test corpora (tests/models), "
        "every operator output against LiteRT's reference kernels (`BUILTIN_REF`): **exact** = identical "
        "on every element; **float** = within 1e-5 of the tensor's magnitude (or LiteRT's default kernels' "
        "own deviation); **DIFFERS** = outside them; `—` = no corpus model has that operator and type. "
        "*ref* says whether LiteRT's `BUILTIN_REF` resolver registers the operator; *impl* whether "
        "graphwright's interpreter does (`graphwright run` refuses the others, naming them). *TFLM*: per type, "
        "`same` = identical to TensorFlow Lite Micro (floats within the bound) on the corpus models whose operators "
        "TFLM all has, **DIFFERS** = TFLM computes it otherwise than LiteRT; `yes`/`no` = TFLM registers the "
        "operator or not (no corpus model checked it there). A cell is judged only where the operator's inputs "
        "matched, so a difference is charged to the operator that made it.",
        "",
        "| operator | ref | impl | " + " | ".join(TYPES) + " | TFLM |",
        "|---|---|---|" + "---|" * len(TYPES) + "---|",
    ]
    for op in ops:
        cells = []
        for t in TYPES:
            if (op, t) not in ref:
                cells.append("—")
            elif not ref[(op, t)]:
                cells.append("**DIFFERS**")
            else:
                cells.append(("float" if t in ("float32", "hybrid", "complex64") else "exact") + (" (TFLM)" if (op, t) in REF_BUGS else "")
                             + (" (default)" if (op, t) in by_default else ""))
        checked = sorted(t for o, t in tflm if o == op)
        if checked:
            t_cell = ", ".join(f"{t} {'same' if tflm[(op, t)] else '**DIFFERS**'}" for t in checked)
        else:
            t_cell = "yes" if op in tflm_ops else "no"
        lines.append(f"| {op} | {'yes' if op in in_ref else 'no'} | {'yes' if op in implemented else 'no'} | "
                     + " | ".join(cells) + f" | {t_cell} |")
    covered = {op for op, _ in ref}
    ref_missing = sorted(op for op in in_ref if op not in implemented)
    lines += [
        "",
        f"{len(implemented)} operators implemented, {len(covered)} of them checked on corpus models; "
        f"{len(in_ref) - len(ref_missing)} of the {len(in_ref)} `BUILTIN_REF` operators implemented.",
        "",
        "Cells marked (default) are judged against LiteRT's default kernels: `BUILTIN_REF` does not "
        "register that operator (or version).",
        "",
        "Cells marked (TFLM) are judged against TensorFlow Lite Micro because LiteRT's reference kernel is wrong "
        "there: " + "; ".join(sorted({f"{op} {t}: {why}" for (op, t), why in REF_BUGS.items()})) + ".",
        "",
        "Not implemented (`BUILTIN_REF` has them): " + (", ".join(
            f"{op} (refused in one line: {REFUSED[op]})" if op in REFUSED else op for op in ref_missing)
            if ref_missing else "none") + ".",
        "",
        "Implemented and on corpus models, but writing no tensor LiteRT can show (resource handles, variable "
        "writes), so checked through the tensors that read them: " + (", ".join(sorted((implemented - covered) & SEEN))
                                                                      or "none") + ".",
        "",
        "Implemented but on no corpus model: " + (", ".join(sorted(implemented - covered - SEEN)) or "none") + ".",
        "",
        "TFLM **DIFFERS** where TFLM is wrong: " + "; ".join(f"{op} {t}: {why}" for (op, t), why in TFLM_BUGS.items())
        + ".",
    ]
    if failures:
        lines += ["", "Corpus models not compared (the reason given):", ""] + [f"- {f}" for f in failures]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
