"""How the interpreter decides to run its compiled loops (:mod:`graphwright.runtime.reference.jit`)."""

from __future__ import annotations

import pytest

from graphwright.errors import VerificationError
from graphwright.runtime import prepare
from graphwright.runtime.reference import Interpreter, jit

from .conftest import model


def test_default_is_compiled_when_numba_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    path = model("tflite_model", "int8").path
    assert jit.available() and Interpreter(path).jit
    assert not Interpreter(path, jit=False).jit
    monkeypatch.setattr(jit, "available", lambda: False)
    assert not Interpreter(path).jit  # without numba: numpy, silently


def test_asking_for_jit_without_numba_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit, "available", lambda: False)
    with pytest.raises(VerificationError, match=r"jit needs numba: pip install 'graphwright\[fast\]'"):
        Interpreter(model("tflite_model", "int8").path, jit=True)


def test_backend_option_reaches_the_interpreter() -> None:
    path = model("tflite_model", "int8").path
    with prepare(path, backend="reference", options={"jit": False}) as session:
        assert session.interpreter.jit is False  # type: ignore[attr-defined]
    with prepare(path, backend="reference") as session:
        assert session.interpreter.jit is True  # type: ignore[attr-defined]


def test_cli_uses_the_compiled_loops_only_with_jit(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphwright.cli.main import main
    from graphwright.runtime.reference import interpreter

    seen: list[bool] = []
    original = interpreter.Interpreter.__init__

    def spy(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        seen.append(self.jit)

    monkeypatch.setattr(interpreter.Interpreter, "__init__", spy)
    path = str(model("tflite_model", "int8").path)
    assert main(["run", path, "--engine", "reference", "--seed", "1"]) == 0
    assert main(["run", path, "--engine", "reference", "--seed", "1", "--jit"]) == 0
    assert main(["compare", path, "--layers", "--jit"]) == 0
    assert seen == [False, True, True]  # one run: numpy unless --jit (numba loads in ~0.7 s)


def test_a_numba_that_does_not_load_falls_back_or_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit, "_import_error", lambda: "ImportError: Numba needs NumPy 2.5 or less")
    path = model("tflite_model", "int8").path
    assert not Interpreter(path).jit  # automatic: numpy, the model still runs
    with pytest.raises(VerificationError, match=r"jit: numba is installed but does not load \(ImportError: Numba needs"):
        Interpreter(path, jit=True)
