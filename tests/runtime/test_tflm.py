"""The ``tflm`` backend (TensorFlow Lite Micro), and the reference interpreter checked against it.

TFLM is a second oracle beside ``litert-ref``: the reference interpreter must agree with it
on every operator output of the corpora (integers identical, floats within 1e-5 of the
tensor's largest magnitude) on the all-min, all-max and seeded inputs of ``feeds_for``,
except where TFLM's own kernels knowingly differ from LiteRT's (:data:`TFLM_DIFFERS`): those
operators are held to an allowance, or not compared, and everything after them is compared on
the model cut before them.  A model using an operator TFLM does not register is skipped with
``TFLM has no X``; one whose types TFLM refuses, with TFLM's own message.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from graphwright.errors import BackendUnavailableError, VerificationError
from graphwright.formats import load
from graphwright.formats.tflite import read_model, serialize
from graphwright.ir import DType, Graph, Model, Node, Value
from graphwright.runtime import get_backend, prepare, run, tflm
from graphwright.runtime.base import ModelSource, Session
from graphwright.runtime.execute import Job, execute
from graphwright.runtime.reference import Interpreter
from tests.models import MODEL_NAMES, ModelBuildError, ModelInfo, get_model
from tests.runtime.reference._oracle import feeds_for

needs_tflm = pytest.mark.skipif(not tflm.available(), reason="tflite-micro is not installed (the [tflm] extra)")

#: The int8 and float models of the first corpora, then every model of the per-operator corpora.
CASES: list[tuple[str, str]] = [
    ("tflite_model", "int8"), ("tflite_model", "float"),
    *(("tflite_ops", name) for name in ("convs_int8", "acts_int8", "misc_int8", "mobilenet_v2_int8",
                                        "mobilenet_v3_small_int8", "efficientnet_b0_int8",
                                        "convs_float", "acts_float", "misc_float")),
    *((family, name) for family in ("tflite_math", "tflite_binary", "tflite_index", "tflite_reduce", "tflite_conv",
                                    "tflite_sequence", "tflite_control", "tflite_sparse")
      for name in MODEL_NAMES.get(family, ())),
]
SEEDS = range(6)
RTOL = 1e-5


@dataclass(frozen=True)
class Difference:
    """Where TFLM's kernel differs from LiteRT's reference kernel (which the interpreter follows)."""

    applies: Callable[[Node, list[Graph]], bool]  # (the operator, the model's graphs)
    why: str
    #: Largest |difference| allowed in the operator's own output; None: not compared at all.
    max_abs_diff: int | None


def _quantized_out(node: Node, dtype: DType) -> bool:
    out = node.outputs[0]
    return out.dtype is dtype and out.quant is not None


def _requantizes(node: Node) -> bool:
    x, y = node.inputs[0], node.outputs[0]
    return (x is not None and x.quant is not None and y.quant is not None
            and (list(x.quant.scale), list(x.quant.zero_point)) != (list(y.quant.scale), list(y.quant.zero_point)))


def _shapes_at_run_time(node: Node, graphs: list[Graph]) -> bool:
    """Whether a control-flow operator's subgraphs hold a tensor whose shape is known only at run time."""
    called = [graphs[int(attr.value)] for key, attr in node.attrs.items() if key.endswith("subgraph_index")]
    return any(v.shape is None or None in v.shape for g in called for n in g for v in n.outputs)


#: op -> how TFLM knowingly differs (from TFLM's kernels in tensorflow/lite/micro/kernels).
TFLM_DIFFERS: dict[str, Difference] = {
    "FULLY_CONNECTED": Difference(
        lambda node, graphs: _quantized_out(node, DType.INT8) or _quantized_out(node, DType.INT16),
        "TFLM's FULLY_CONNECTED requantizes int8 with two roundings (LiteRT's reference kernel: one) and "
        "16x8 with the int64 form of MultiplyByQuantizedMultiplier (15-bit multiplier; LiteRT: the 32-bit one)", 1),
    "RELU6": Difference(
        lambda node, graphs: _quantized_out(node, node.outputs[0].dtype) and _requantizes(node),
        "TFLM's quantized RELU6 clamps in the input's quantization and ignores the output's", None),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Difference(
        lambda node, graphs: _quantized_out(node, DType.INT8),
        "TFLM's integer LSTM is its own implementation (micro/kernels/lstm_eval.cc), rounding unlike LiteRT's", 1),
    "WHILE": Difference(
        _shapes_at_run_time,
        "TFLM has static shapes: a loop body tensor whose shape is known only when it runs (a SLICE of "
        "computed size in Keras RNN loops) keeps the file's placeholder shape, and the loop's results are wrong", None),
}


def _close(mine: np.ndarray, theirs: np.ndarray) -> str | None:
    """None when equal under the contract, else what differs."""
    if mine.shape != theirs.shape or mine.dtype != theirs.dtype:
        return f"{mine.dtype}{list(mine.shape)} vs {theirs.dtype}{list(theirs.shape)}"
    if mine.dtype.kind == "f":
        finite = np.isfinite(theirs)
        if not (np.array_equal(np.isfinite(mine), finite) and np.array_equal(np.isnan(mine), np.isnan(theirs))):
            return "non-finite values differ"
        scale = float(np.abs(theirs[finite]).max()) if finite.any() else 0.0
        diff = np.abs(mine[finite].astype(np.float64) - theirs[finite])
        bad = diff > RTOL * max(scale, 1e-30)
        return f"{np.count_nonzero(bad)} of {mine.size} beyond {RTOL:g} x {scale:g}" if bad.any() else None
    diff = np.abs(mine.astype(np.int64) - theirs.astype(np.int64))
    return f"{np.count_nonzero(diff)} of {mine.size} elements differ (max {diff.max()})" if diff.any() else None


def _load_or_skip(family: str, name: str) -> tuple[ModelInfo, Model, Interpreter, Session]:
    try:
        info = get_model(family, name)
    except ModelBuildError as e:
        pytest.skip(f"{family}:{name} is not built: {e}")
    try:
        session = prepare(info.path, backend="tflm")
    except VerificationError as e:
        missing = tflm.missing_operator(str(e))
        if missing is not None:
            assert missing not in tflm.supported_operators(), str(e)
            pytest.skip(f"TFLM has no {missing}")
        pytest.skip(f"TFLM refuses {family}:{name}: {e}")
    model = load(info.path)
    try:
        interp = Interpreter(model)
    except VerificationError as e:
        pytest.skip(f"the reference interpreter cannot run {family}:{name} yet: {e}")
    return info, model, interp, session


def _known_difference(node: Node, graphs: list[Graph]) -> Difference | None:
    known = TFLM_DIFFERS.get(node.op)
    return known if known is not None and known.applies(node, graphs) else None


def _cut(path: Path, names: set[str]) -> ModelSource:
    """The model without the operators that produce ``names``: those tensors become model inputs, so
    TFLM computes everything after them from values it is given (the reference interpreter's)."""
    model = read_model(path.read_bytes(), str(path))
    graph = model.graph
    doomed = [node for node in graph if any(v.name in names for v in node.outputs)]
    fed = []
    for node in doomed:
        for old in node.outputs:
            new = Value(old.name, old.dtype, old.shape, quant=old.quant)
            new.meta = dict(old.meta)
            old.replace_all_uses_with(new)
            fed.append(new)
    graph.remove(doomed)
    graph.set_inputs([*graph.inputs, *fed])
    return ModelSource("tflite", data=serialize(model), label=f"{path} without {len(doomed)} operator(s)")


def _isolated_groups(nodes: list[Node]) -> list[tuple[set[str], list[Node]]]:
    """``nodes`` in groups none of which reads another member's output, each with the tensors its
    members read that an operator produces: cut there, the group computes from given inputs."""
    groups: list[tuple[set[str], list[Node]]] = []
    for node in nodes:
        reads = {v.name for v in node.inputs if v is not None and v.producer is not None}
        for fed, members in groups:
            if not reads & {v.name for m in members for v in m.outputs} and not fed & {v.name for v in node.outputs}:
                fed |= reads
                members.append(node)
                break
        else:
            groups.append((reads, [node]))
    return groups


def _given(cut: Session, feeds: dict[str, np.ndarray], mine: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of a cut model: the model's own feeds, then the reference interpreter's tensors."""
    return {spec.name: feeds[spec.name] if spec.name in feeds else mine[spec.name] for spec in cut.inputs}


@pytest.mark.slow
@needs_tflm
@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}:{n}" for f, n in CASES])
def test_reference_interpreter_matches_tflm(family: str, name: str) -> None:
    """Every operator output.  Where TFLM knowingly computes differently (:data:`TFLM_DIFFERS`), TFLM
    runs the model cut before those operators (their outputs fed from the reference interpreter), so
    that every other output is still compared exactly, and the operators' own outputs are held to
    their allowance on the model cut before their inputs: no difference hides another."""
    info, model, interp, session = _load_or_skip(family, name)
    names = [v.name for node in interp.graph for v in node.outputs]
    known = {node: d for node in interp.graph if (d := _known_difference(node, model.graphs)) is not None}
    differing = {v.name for node in interp.graph if node in known for v in node.outputs}
    rest = prepare(_cut(info.path, differing), backend="tflm") if differing else session
    allowed = [node for node in interp.graph if node in known and known[node].max_abs_diff is not None]
    cuts = [(prepare(_cut(info.path, fed), backend="tflm"), members) for fed, members in _isolated_groups(allowed)]
    compared = 0
    for seed in SEEDS:
        feeds = feeds_for(info, seed)
        try:
            mine = interp.trace(feeds)
        except VerificationError as e:
            pytest.skip(f"the reference interpreter cannot run {family}:{name} yet: {e}")
        try:
            theirs = rest.run(_given(rest, feeds, mine), [n for n in names if n not in differing])
        except VerificationError as e:  # a type TFLM's kernel refuses only when it runs
            pytest.skip(f"TFLM refuses {family}:{name}: {e}")
        for node in interp.graph:
            for v in node.outputs:
                if node in known or v.dtype in (DType.RESOURCE, DType.VARIANT):
                    continue  # a known difference (below), or a handle (TFLM returns none)
                problem = _close(np.asarray(mine[v.name]), np.asarray(theirs[v.name]))
                assert problem is None, f"{info.name} seed {seed}: {node.op} {v.name!r}: {problem}"
                compared += 1
        for cut, members in cuts:
            theirs = cut.run(_given(cut, feeds, mine), [v.name for node in members for v in node.outputs])
            for node in members:
                for v in node.outputs:
                    a, b = np.asarray(mine[v.name]), np.asarray(theirs[v.name])
                    where = f"{info.name} seed {seed}: {node.op} {v.name!r}"
                    assert a.shape == b.shape and a.dtype == b.dtype, f"{where}: {_close(a, b)}"
                    worst = int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(initial=0))
                    limit = known[node].max_abs_diff
                    assert worst <= limit, f"{where}: off by {worst}; {known[node].why}"
    assert compared, f"{info.name}: no tensor compared"


# -- the backend ------------------------------------------------------------------
def _one_op_model(op: str, *, custom: bool = False) -> bytes:
    graph = Graph("tflite", "main")
    x = Value("x", DType.FLOAT32, (1, 4))
    graph.set_inputs([x])
    node = graph.append(Node(op, [x], dialect="tflite", domain="custom" if custom else "", name="y",
                             outputs=[Value("y", DType.FLOAT32, (1, 4))]))
    graph.set_outputs([node.output])
    return serialize(Model(graph, "tflite"))


@needs_tflm
@pytest.mark.parametrize("isolate", [False, True])
def test_an_operator_tflm_lacks_is_named_in_one_line(isolate: bool) -> None:
    source = ModelSource("tflite", data=_one_op_model("GELU"), label="gelu.tflite")
    with pytest.raises(VerificationError) as caught:
        execute(source, None, Job(backend="tflm"), isolate=isolate)
    assert str(caught.value) == "tflm cannot load gelu.tflite: TFLM has no operator GELU"
    assert tflm.missing_operator(str(caught.value)) == "GELU"


@needs_tflm
def test_a_custom_operator_tflm_lacks_is_named() -> None:
    source = ModelSource("tflite", data=_one_op_model("MyCustomOp", custom=True), label="custom.tflite")
    with pytest.raises(VerificationError, match=r"^tflm cannot load custom.tflite: TFLM has no custom operator "
                                                r"MyCustomOp$"):
        prepare(source, backend="tflm")


@needs_tflm
def test_supported_operators_lists_what_tflm_registers() -> None:
    ops = tflm.supported_operators()
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "SOFTMAX", "ADD", "RESHAPE"} <= ops
    assert not {"GELU", "TOPK_V2", "CUSTOM", "DELEGATE"} & ops
    assert 60 < len(ops) < 200


@needs_tflm
def test_runs_match_in_process_and_isolated_and_feeds_are_checked() -> None:
    info = get_model("tflite_model", "int8")
    feeds = feeds_for(info, 2)
    here = run(info.path, feeds, backend="tflm")
    there = run(info.path, feeds, backend="tflm", isolate=True)
    assert list(here) == info.outputs and all(np.array_equal(here[k], there[k]) for k in here)
    name = next(iter(info.inputs))
    with pytest.raises(VerificationError, match=f"input '{name}' expects int8 "):
        run(info.path, {name: feeds[name].astype(np.float32)}, backend="tflm")
    with pytest.raises(VerificationError, match="no tensor named 'nope'"):
        run(info.path, feeds, backend="tflm", outputs=["nope"])


@needs_tflm
def test_the_arena_grows_until_the_model_fits() -> None:
    info = get_model("tflite_ops", "mobilenet_v2_int8")
    # in a child: an arena too small can crash TFLM (these sizes fail cleanly with this TFLM)
    code = (f"import graphwright.runtime.tflm as t; t.arena_estimate = lambda model: 256 << 10; "
            f"print(t.TFLMBackend().prepare(t.ModelSource.from_path({str(info.path)!r}), {{}}).arena_size)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert int(done.stdout) == 2048 << 10  # 256 KiB doubled three times; the model needs about 1.4 MiB


@needs_tflm
@pytest.mark.parametrize(("option", "hint"), [("max_arena_size", "raise max_arena_size"),
                                              ("arena_size", "raise arena_size")])
def test_an_arena_bound_too_small_is_one_line(option: str, hint: str) -> None:
    info = get_model("tflite_ops", "mobilenet_v2_int8")
    with pytest.raises(VerificationError) as caught:
        execute(info.path, None, Job(backend="tflm", options={option: 1 << 20}), isolate=True)
    message = str(caught.value)
    assert message.startswith(f"tflm cannot load {info.path}: an arena of 1048576 bytes is too small (")
    assert message.endswith(hint) and "\n" not in message


def test_without_tflite_micro_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tflite_micro", None)  # import tflite_micro -> ImportError
    monkeypatch.setitem(sys.modules, "tflite_micro.python.tflite_micro", None)
    with pytest.raises(BackendUnavailableError, match=r"^the tflm backend needs tflite-micro: "
                                                      r"pip install graphwright\[tflm\]$"):
        get_backend("tflm").prepare(ModelSource("tflite", data=_one_op_model("ABS")), {})


@needs_tflm
@pytest.mark.parametrize("options", [{"arena_size": 1000}, {"max_arena_size": "1M"}, {"arena_size": True},
                                     {"threads": 2}])
def test_bad_options_are_refused_before_tflm_runs(options: dict[str, object]) -> None:
    with pytest.raises(VerificationError, match=r"tflm|backend 'tflm' has no option"):
        prepare(ModelSource("tflite", data=_one_op_model("ABS")), backend="tflm", options=options)


@needs_tflm
@pytest.mark.skipif("hybrid_lstm_float" not in MODEL_NAMES.get("tflite_sequence", ()), reason="no hybrid LSTM model")
def test_a_hybrid_lstm_is_refused_rather_than_run_into_nan() -> None:
    info = get_model("tflite_sequence", "hybrid_lstm_float")
    with pytest.raises(VerificationError, match=r"TFLM has no hybrid UNIDIRECTIONAL_SEQUENCE_LSTM \(float input"):
        prepare(info.path, backend="tflm")


@needs_tflm
def test_isolated_a_crash_of_tflm_is_an_error() -> None:
    """An arena a little too small makes this TFLM crash in a kernel's prepare (it does not check an
    allocation); isolated, that is a one-line error whatever TFLM does."""
    info = get_model("tflite_ops", "mobilenet_v2_int8")
    with pytest.raises(VerificationError, match=r"^tflm (crashed|cannot load)") as caught:
        execute(info.path, None, Job(backend="tflm", options={"arena_size": 160 << 10}), isolate=True)
    assert "\n" not in str(caught.value)
