from __future__ import annotations

import pytest

import tests.models  # noqa: F401  (hides a torchvision that cannot load; see tests/models/__init__.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--wide", action="store_true",
        help="also run the wide sweeps (tests marked 'wide': whole corpora of large models)",
    )
    parser.addoption(
        "--fuzz-cases", type=int, default=None, metavar="N",
        help="mutants per format in tests/formats/test_fuzz.py (default: GRAPHWRIGHT_FUZZ_CASES, else a CI-sized count)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``wide`` run only with ``--wide`` (deselected, not skipped, otherwise)."""
    if config.getoption("--wide"):
        return
    kept = [item for item in items if item.get_closest_marker("wide") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("wide") is not None])
        items[:] = kept
