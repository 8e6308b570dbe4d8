"""How the interpreter decides to run its compiled loops (:mod:`graphwright.runtime.reference.jit`)."""

from __future__ import annotations

import pytest

from graphwright.errors import VerificationError
from graphwright.runtime import prepare
from graphwright.runtime.reference import Interpreter, jit

from .conftest import model


def test_default_is_compiled_when_numba_is_installed_and_the_environment_allows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = model("tflite_model", "int8").path
    monkeypatch.delenv(jit.ENV, raising=False)
    assert jit.available() and Interpreter(path).jit
    monkeypatch.setenv(jit.ENV, "0")
    assert not Interpreter(path).jit
    assert Interpreter(path, jit=True).jit  # an explicit request wins over the environment
    monkeypatch.setattr(jit, "available", lambda: False)
    monkeypatch.delenv(jit.ENV)
    assert not Interpreter(path).jit  # without numba: numpy, silently


def test_asking_for_jit_without_numba_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit, "available", lambda: False)
    with pytest.raises(VerificationError, match=r"needs numba: pip install 'graphwright\[fast\]'"):
        Interpreter(model("tflite_model", "int8").path, jit=True)


def test_backend_option_reaches_the_interpreter() -> None:
    path = model("tflite_model", "int8").path
    with prepare(path, backend="reference", options={"jit": False}) as session:
        assert session.interpreter.jit is False  # type: ignore[attr-defined]
    with prepare(path, backend="reference") as session:
        assert session.interpreter.jit is True  # type: ignore[attr-defined]
