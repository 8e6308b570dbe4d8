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


def test_one_shot_commands_use_numpy_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading numba costs more than it saves on one inference: the CLI opts in only on GRAPHWRIGHT_JIT=1."""
    monkeypatch.delenv(jit.ENV, raising=False)
    assert jit.for_single_run() is False
    monkeypatch.setenv(jit.ENV, "0")
    assert jit.for_single_run() is False
    monkeypatch.setenv(jit.ENV, "1")
    assert jit.for_single_run() is None and jit.wanted(jit.for_single_run())


def test_cli_run_passes_the_one_shot_choice_to_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphwright.cli.main import main
    from graphwright.runtime.reference import interpreter

    seen: list[bool] = []
    original = interpreter.Interpreter.__init__

    def spy(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        seen.append(self.jit)

    monkeypatch.setattr(interpreter.Interpreter, "__init__", spy)
    path = str(model("tflite_model", "int8").path)
    monkeypatch.delenv(jit.ENV, raising=False)
    assert main(["run", path, "--engine", "reference", "--seed", "1"]) == 0
    monkeypatch.setenv(jit.ENV, "1")
    assert main(["run", path, "--engine", "reference", "--seed", "1"]) == 0
    assert seen == [False, True]


def test_a_numba_that_does_not_load_falls_back_or_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(jit.ENV, raising=False)
    monkeypatch.setattr(jit, "_import_error", lambda: "ImportError: Numba needs NumPy 2.5 or less")
    path = model("tflite_model", "int8").path
    assert not Interpreter(path).jit  # automatic: numpy, the model still runs
    with pytest.raises(VerificationError, match=r"numba is installed but does not load \(ImportError: Numba needs"):
        Interpreter(path, jit=True)
