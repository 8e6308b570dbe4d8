"""The ONNX backend test suite (~2,000 cases) as a peer test of simplify: no regression, no crash.

Runs every case of the four kinds (about 30 s here); ``python -m tests.simplify.peer_suite``
runs the same with a printed summary.
"""

from __future__ import annotations

import pytest

from .peer_suite import all_cases, load_expectations, run_suite


@pytest.mark.slow
def test_no_case_onnxruntime_passes_regresses_or_crashes() -> None:
    summary = run_suite(all_cases())
    problems = [f"{r.status}: {r.name}: {r.detail}" for r in summary.results if r.status in ("regression", "crash")]
    assert not problems, "\n".join(problems)
    assert summary.count("pass") >= 1300  # cases onnxruntime passes untouched, now passing simplified too
    accepted = {r.name for r in summary.by_status("accepted")}
    assert accepted <= set(load_expectations().get("accepted", {}))
    before = sum(r.nodes_before for r in summary.by_status("pass"))
    after = sum(r.nodes_after for r in summary.by_status("pass"))
    assert after < before / 2  # the expanded (function-body) cases fold a lot


def test_expectations_file_gives_a_reason_for_every_entry() -> None:
    data = load_expectations()
    assert set(data) <= {"skip", "tolerance", "accepted"}
    for section in ("skip", "accepted"):
        assert all(isinstance(r, str) and len(r) > 20 for r in data.get(section, {}).values())
    assert all("reason" in entry for entry in data.get("tolerance", {}).values())


@pytest.mark.slow
def test_a_resolved_if_onnxruntime_refuses_gives_the_model_back_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """affine_grid's expanded form resolves its If (its condition folds since the lattice knows
    Size of a [4] input).  onnxruntime used to refuse the result; it accepts it now, so its refusal
    is simulated for the simplified model only (the original still goes through onnxruntime) to keep
    the fallback tested: the model comes back byte for byte with the warning."""
    import onnx

    from graphwright.formats import onnx as onnx_format
    from graphwright.simplify import driver, simplify

    from .peer_suite import _case_data

    case = next(c for c in all_cases() if c.name == "test_affine_grid_2d_expanded")
    original, _ = _case_data(case)
    model = onnx_format.from_proto(onnx.load_from_string(original), None)
    nodes = len(model.graph)
    resolved, _ = simplify(onnx_format.from_proto(onnx.load_from_string(original), None))
    assert not any(n.op == "If" for n in resolved.graph)  # the If is resolved when onnxruntime accepts it
    real_loads = driver._loads
    # the snapshot of the original (a ModelSource) loads as before; a Model without its If is refused
    monkeypatch.setattr(driver, "_loads", lambda m: real_loads(m) and (
        not hasattr(m, "graph") or any(n.op == "If" for n in m.graph)))
    result, report = simplify(model)
    assert any("returned unchanged" in w for w in report.warnings)
    assert len(result.graph) == nodes
    assert onnx_format.serialize(result) == onnx_format.serialize(
        onnx_format.from_proto(onnx.load_from_string(original), None))
