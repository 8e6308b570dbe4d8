from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-cases", type=int, default=None, metavar="N",
        help="mutants per format in tests/formats/test_fuzz.py (default: GRAPHWRIGHT_FUZZ_CASES, else a CI-sized count)",
    )
