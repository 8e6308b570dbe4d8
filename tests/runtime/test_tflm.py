"""The ``tflm`` backend (TensorFlow Lite Micro), and the reference interpreter's ``tflm`` flavour checked against it.

TFLM is a second oracle beside ``litert-ref``.  ``Interpreter(model, flavor="tflm")`` computes as
TFLM's kernels, so it must agree with TFLM on every operator output of the corpora (integers
identical, floats within 1e-5 of the tensor's largest magnitude) on the all-min, all-max and
seeded inputs of ``feeds_for``.  TFLM's kernels differ from LiteRT's on a few operators
(:data:`FLAVORED`); there the default flavour must stay bit-exact with ``litert-ref`` and the two
flavours must differ, so that the ``tflm`` flavour is not vacuous.  Only what TFLM itself cannot
compute is left out — operators it does not register and :data:`TFLM_CANNOT`: TFLM runs the model
cut before them, their outputs fed from the interpreter, so everything after them is still compared.
A model TFLM still refuses is skipped with TFLM's own message (a type its kernel lacks).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
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
from graphwright.runtime.reference._common import KERNELS, OpContext
from graphwright.runtime.reference.control_flow import SUBGRAPH_OPS
from tests.models import MODEL_NAMES, ModelBuildError, ModelInfo, get_model
from tests.runtime.reference._oracle import assert_matches_reference, feeds_for

needs_tflm = pytest.mark.skipif(not tflm.available(), reason="tflite-micro is not installed (the [tflm] extra)")

#: Whole models left out: one this TFLM aborts on while it prepares it (the whole process dies, not one
#: test), and 224-pixel classifiers whose operators the smaller models hold, 5 to 100 s each on TFLM's
#: reference kernels (they matched TFLM when this test was written).
_LEFT_OUT = {("tflite_real", "mobilenet_v3_small_224_int8"),
             *(("tflite_real", name) for name in ("resnet50_int8", "densenet121_int8", "efficientnet_b0_224_int8",
                                                  "mobilenet_v2_224_int8")),
             *(("tflite_zoo", name) for name in ("convnext_tiny_int8", "inception_v3_int8", "xception_int8"))}
#: The int8 and float models of the first corpora, every model of the per-operator corpora, then the
#: quantized models of the whole-model corpora (the float ones run as the float per-operator corpora).
CASES: list[tuple[str, str]] = [
    ("tflite_model", "int8"), ("tflite_model", "float"),
    *(("tflite_ops", name) for name in ("convs_int8", "acts_int8", "misc_int8", "mobilenet_v2_int8",
                                        "mobilenet_v3_small_int8", "efficientnet_b0_int8",
                                        "convs_float", "acts_float", "misc_float")),
    *((family, name) for family in ("tflite_math", "tflite_binary", "tflite_index", "tflite_reduce", "tflite_conv",
                                    "tflite_sequence", "tflite_control", "tflite_sparse")
      for name in MODEL_NAMES.get(family, ())),
    *((family, name) for family in ("tflite_real", "tflite_misc", "tflite_zoo") for name in MODEL_NAMES.get(family, ())
      if name.endswith(("_int8", "_int16x8", "_uint8")) and (family, name) not in _LEFT_OUT),
]
SEEDS = range(6)
RTOL = 1e-5

#: Operators whose TFLM kernel computes unlike LiteRT's reference kernel (the ``tflm`` flavour follows
#: TFLM there), each with corpus models where the two differ: TFLM's FULLY_CONNECTED requantizes int8
#: with two roundings (LiteRT's reference kernel: one) and 16x8 with the int64 form of
#: MultiplyByQuantizedMultiplier (LiteRT: in double); its quantized RELU6 clamps in the input's
#: quantization and ignores the output's; its integer LSTM is its own implementation
#: (micro/kernels/lstm_eval.h); its int16 RSQRT runs the 8-bit formula (LiteRT: a table); its int16
#: ADD and SUB never take LiteRT's power-of-two path (``pot_scale_int16``); its Prepare computes MUL's
#: multiplier in double (LiteRT: float32) and int16 SOFTMAX's tables in float32 (LiteRT: double).
FLAVORED: dict[str, list[tuple[str, str]]] = {
    "FULLY_CONNECTED": [("tflite_ops", "mobilenet_v2_int8"), ("tflite_conv", "convs_int8"),
                        ("tflite_conv", "convs_int16x8")],
    "RELU6": [("tflite_ops", "misc_int8"), ("tflite_binary", "activations_int16x8")],
    "UNIDIRECTIONAL_SEQUENCE_LSTM": [("tflite_sequence", "lstm_int8")],
    "RSQRT": [("tflite_math", "unary_int16x8")],
    "ADD": [("tflite_binary", "pot_int16x8")],
    "SUB": [("tflite_binary", "pot_int16x8")],
    "MUL": [("tflite_real", "mobilenet_v3_large_int16x8")],
    "SOFTMAX": [("tflite_real", "transformer_int16x8")],
}
FLAVORED_CASES = sorted({case for cases in FLAVORED.values() for case in cases})


def _shapes_at_run_time(node: Node, graphs: list[Graph]) -> bool:
    """Whether a control-flow operator's subgraphs hold a tensor whose shape is known only at run time."""
    called = [graphs[int(attr.value)] for key, attr in node.attrs.items() if key.endswith("subgraph_index")]
    return any(v.shape is None or None in v.shape for g in called for n in g for v in n.outputs)


def _reads_sparse_constant(node: Node, graphs: list[Graph]) -> bool:
    return any(v is not None and v.const is not None and "tflite.sparsity" in v.meta for v in node.inputs)


#: What TFLM cannot compute (not kernel differences: limits of TFLM's runtime), with why.
TFLM_CANNOT: list[tuple[Callable[[Node, list[Graph]], bool], str]] = [
    (lambda node, graphs: node.op not in tflm.supported_operators(), "TFLM does not register the operator"),
    (lambda node, graphs: node.op == "WHILE" and _shapes_at_run_time(node, graphs),
     "TFLM has static shapes: a loop body tensor whose shape is known only when it runs (a SLICE of computed "
     "size in Keras RNN loops) keeps the file's placeholder shape, and the loop's results are wrong"),
    (_reads_sparse_constant, "TFLM has no sparse tensors: it reads a sparse constant's stored values as dense ones"),
    (lambda node, graphs: node.op == "SPACE_TO_BATCH_ND" and node.outputs[0].quant is not None,
     "TFLM's quantized SPACE_TO_BATCH_ND pads with a value it never sets (SpaceToBatchParams.output_offset: "
     "whatever its arena holds), not the zero point"),
    (lambda node, graphs: node.op == "MUL" and node.outputs[0].dtype in (DType.INT8, DType.INT16)
     and node.outputs[0].quant is None,
     "TFLM's MUL requantizes every 8- and 16-bit output, with scales a plain integer MUL does not have"),
]


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


def _load_or_skip(family: str, name: str) -> tuple[ModelInfo, Interpreter, set[str], Session]:
    """The model, the interpreter's tflm flavour, the tensors TFLM cannot compute and TFLM's session of
    the model cut before them: :data:`TFLM_CANNOT`, then each operator TFLM refuses when it prepares or
    runs (a type its kernel lacks; named by its position in TFLM's message), until TFLM runs the rest."""
    try:
        info = get_model(family, name)
    except ModelBuildError as e:
        pytest.skip(f"{family}:{name} is not built: {e}")
    model = load(info.path)
    try:
        interp = Interpreter(model, flavor="tflm")
        trial = Interpreter(model, flavor="tflm").trace(feeds_for(info, 2))  # another: runs change state
    except VerificationError as e:
        pytest.skip(f"the reference interpreter cannot run {family}:{name} yet: {e}")
    cannot = {v.name for node in model.graph if any(when(node, model.graphs) for when, _ in TFLM_CANNOT)
              for v in node.outputs}
    outputs = [v.name for node in model.graph for v in node.outputs if v.dtype not in (DType.RESOURCE, DType.VARIANT)]
    while True:
        source = _cut(info.path, cannot) if cannot else ModelSource.from_path(info.path)
        try:
            session = prepare(source, backend="tflm")
            session.run(_given(session, feeds_for(info, 2), trial), [n for n in outputs if n not in cannot])
            return info, interp, cannot, prepare(source, backend="tflm")  # fresh: variable tensors at zero
        except VerificationError as e:
            refused = _REFUSED_NODE.search(str(e))
            if refused is None:
                missing = tflm.missing_operator(str(e))  # in a subgraph (only the main graph is cut)
                if missing is not None:
                    assert missing not in tflm.supported_operators(), str(e)
                    pytest.skip(f"TFLM has no {missing}")
                pytest.skip(f"TFLM refuses {family}:{name}: {e}")
            node = list(read_model(source.data, source.label).graph)[int(refused.group(1))]
            cannot |= {v.name for v in node.outputs}


#: TFLM's message for an operator it refuses: "Node EXP (number 6) failed to prepare with status 1"
_REFUSED_NODE = re.compile(r"Node \S+ \(number (\d+)\) failed to (?:prepare|invoke)")


def _given(session: Session, feeds: dict[str, np.ndarray], mine: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of a cut model: the model's own feeds, then the reference interpreter's tensors."""
    return {spec.name: feeds[spec.name] if spec.name in feeds else mine[spec.name] for spec in session.inputs}


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


@pytest.mark.slow
@needs_tflm
@pytest.mark.parametrize(("family", "name"), CASES, ids=[f"{f}:{n}" for f, n in CASES])
def test_tflm_flavor_matches_tflm(family: str, name: str) -> None:
    """Every operator output of ``flavor="tflm"`` equals TFLM's, from the same inputs to the end of the
    model.  Outputs TFLM cannot compute (see :func:`_load_or_skip`) are not compared: TFLM runs the model
    cut before them, their values fed from the interpreter."""
    info, interp, cannot, tflm_session = _load_or_skip(family, name)
    names = [v.name for node in interp.graph for v in node.outputs]
    ambiguous = {n for n in names if names.count(n) > 1}  # TFLM's session addresses tensors by name
    compared = 0
    for seed in SEEDS:
        feeds = feeds_for(info, seed)
        try:
            mine = interp.trace(feeds)
        except VerificationError as e:
            pytest.skip(f"the reference interpreter cannot run {family}:{name} yet: {e}")
        theirs = tflm_session.run(_given(tflm_session, feeds, mine), [n for n in names if n not in cannot])
        for node in interp.graph:
            for v in node.outputs:
                if v.name in cannot or v.name in ambiguous or v.dtype in (DType.RESOURCE, DType.VARIANT):
                    continue  # TFLM cannot compute it, its name is not one tensor's, or a handle (TFLM returns none)
                problem = _close(np.asarray(mine[v.name]), np.asarray(theirs[v.name]))
                assert problem is None, f"{info.name} seed {seed}: {node.op} {v.name!r}: {problem}"
                compared += 1
    if not compared:
        pytest.skip(f"TFLM computes no operator of {family}:{name}")


@pytest.mark.slow
@pytest.mark.parametrize(("family", "name"), FLAVORED_CASES, ids=[f"{f}:{n}" for f, n in FLAVORED_CASES])
def test_litert_flavor_stays_litert_ref_where_tflm_differs(family: str, name: str) -> None:
    """The default flavour still computes as LiteRT's reference kernels on the models where TFLM's differ
    (fresh runtimes per seed: the LSTM's state would otherwise carry over)."""
    info = get_model(family, name)
    for seed in SEEDS:
        assert assert_matches_reference(info, range(seed, seed + 1))


def _kernel_inputs(value: Value | None, trace: dict[str, np.ndarray]) -> np.ndarray | None:
    """An operator input for a direct kernel call: the traced tensor, the constant, or (a variable
    tensor, not traced) its reset value — zeros, int8 ones at their zero point."""
    if value is None:
        return None
    if value.name in trace:
        return np.array(trace[value.name])
    if value.const is not None:
        return value.const.numpy()
    assert value.shape is not None and value.dtype is not None and value.dtype.numpy is not None, value.name
    zp = int(value.quant.zero_point.reshape(-1)[0]) if value.quant is not None and value.dtype is DType.INT8 else 0
    return np.full(value.shape, zp, value.dtype.numpy)


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(FLAVORED))
def test_the_flavors_differ_exactly_at_the_operators_tflm_computes_differently(op: str) -> None:
    """Each operator of the models listed for ``op``, its kernel called on the same inputs (the litert
    flavour's tensors) under both flavours: some ``op`` computes other outputs, and no operator outside
    :data:`FLAVORED` does.  With the tests above (each flavour equal to its runtime), TFLM and
    ``litert-ref`` differ there, and the ``tflm`` flavour is what makes the interpreter follow TFLM."""
    differing = set()
    for family, name in FLAVORED[op]:
        info = get_model(family, name)
        interp = Interpreter(info.path)
        for seed in SEEDS:
            trace = interp.trace(feeds_for(info, seed))
            for node in interp.graph:
                if node.op in SUBGRAPH_OPS:
                    continue  # they run whole graphs (their operators are compared where traced)
                outputs = [KERNELS[node.op](OpContext(node, [_kernel_inputs(v, trace) for v in node.inputs],
                                                      "double", {}, False, flavor)) for flavor in ("litert", "tflm")]
                if not all(np.array_equal(a, b) for a, b in zip(*outputs, strict=True)):
                    differing.add(node.op)
    assert op in differing, f"no {op} of {FLAVORED[op]} computes differently under the two flavours"
    assert differing <= set(FLAVORED), f"{sorted(differing - set(FLAVORED))} compute differently under the flavours"


def test_unknown_flavors_and_tflm_with_single_rounding_are_refused() -> None:
    path = get_model("tflite_model", "int8").path
    with pytest.raises(VerificationError, match=r"^unknown kernel flavor 'cmsis'; expected one of litert, tflm$"):
        Interpreter(path, flavor="cmsis")
    with pytest.raises(VerificationError, match=r"^flavor 'tflm' computes as TFLM's kernels, which round twice"):
        Interpreter(path, flavor="tflm", rounding="single")


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
