"""``graphwright calibrate --shards N [--ray]`` on a real eight-bit GraphDef: the log is byte for byte the
log of one run (``--shards 1``), its records are those of ``calibrate`` run once over every sample, and the
ranges frozen from it give the same graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphwright import VerificationError
from graphwright.calibrate import calibrate, random_samples
from graphwright.transforms.quantize.freeze_requantization_ranges import parse_min_max_log
from tests.calibrate.test_run import SPEC, _cli, _prepare
from tests.transforms.quantize._helpers import EXAMPLE, EXAMPLE_OUTPUTS, ours

ARGS = ["--inputs", "input", "--outputs", "Identity", "--num", "7", "--seed", "5"]


def _freeze(quantized: Path, log: Path) -> bytes:
    return ours(quantized, f"freeze_requantization_ranges(min_max_log_file={log})", ["input"], EXAMPLE_OUTPUTS)[0]


@pytest.mark.tf
def test_sharded_log_is_byte_identical_to_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quantized, logged = _prepare(tmp_path)
    single, sharded, api = tmp_path / "single.log", tmp_path / "sharded.log", tmp_path / "api.log"
    assert _cli(["calibrate", str(logged), str(single), *ARGS]) == 0
    assert _cli(["calibrate", str(logged), str(sharded), *ARGS, "--shards", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"ran 7 sample(s); wrote 140 range line(s) for 20 node(s) to {log}" for log in (single, sharded)]
    assert sharded.read_bytes() == single.read_bytes()
    # one plain calibrate() over the same 7 samples: TensorFlow's line order within a sample varies from
    # run to run, the records (each node's [min][max] per sample, in sample order) do not
    calibrate(logged, api, random_samples([SPEC], 7, 5), outputs=["Identity"])
    records, _ = parse_min_max_log(api)
    assert parse_min_max_log(sharded)[0] == records and len(records) == 20
    assert all(len(mins) == 7 for mins, _ in records.values())
    assert _freeze(quantized, sharded) == _freeze(quantized, api)


@pytest.mark.tf
def test_sharded_on_a_local_ray_cluster(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    _, logged = _prepare(tmp_path)
    single, on_ray = tmp_path / "single.log", tmp_path / "ray.log"
    assert _cli(["calibrate", str(logged), str(single), *ARGS]) == 0
    assert _cli(["calibrate", str(logged), str(on_ray), *ARGS, "--shards", "2", "--ray"]) == 0  # starts, stops
    assert on_ray.read_bytes() == single.read_bytes()


def test_bad_shard_counts_and_graphs_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(VerificationError, match="--shards needs at least 1, got 0"):
        _cli(["calibrate", str(EXAMPLE), str(tmp_path / "log"), "--shards", "0"])
    with pytest.raises(VerificationError, match="has no Print nodes"):  # raised by a shard, same message
        _cli(["calibrate", str(EXAMPLE), str(tmp_path / "log"), "--num", "2", "--shards", "2"])
    assert not (tmp_path / "log").exists()
