from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphwright import verify
from graphwright.errors import VerificationError
from graphwright.ir import DType
from graphwright.runtime import InputSpec, feeds
from graphwright.runtime.feeds import load_feeds, random_array, random_feeds

X = InputSpec("x", DType.FLOAT32, (2, 3))
IDS = InputSpec("ids", DType.INT64, ("batch", "seq"))


def test_same_seed_same_arrays() -> None:
    a = random_feeds([X, IDS], seed=3)
    b = random_feeds([X, IDS], seed=3)
    assert list(a) == ["x", "ids"]
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_values_depend_on_the_name_not_the_order_or_company() -> None:
    alone = random_feeds([X])["x"]
    with_other = random_feeds([IDS, X, InputSpec("z", DType.FLOAT32, (2, 3))])
    assert np.array_equal(alone, with_other["x"])
    assert not np.array_equal(with_other["x"], with_other["z"])  # same spec, different name
    assert not np.array_equal(alone, random_feeds([X], seed=1)["x"])


def test_float_inputs_are_standard_normal_in_their_own_dtype() -> None:
    for dtype, np_type in [(DType.FLOAT32, np.float32), (DType.FLOAT16, np.float16), (DType.FLOAT64, np.float64)]:
        a = random_array(InputSpec("f", dtype, (200, 100)), seed=0)
        assert a.dtype == np_type and a.shape == (200, 100)
        assert abs(float(a.mean())) < 0.02 and abs(float(a.std()) - 1.0) < 0.02


def test_integer_and_bool_ranges() -> None:
    ints = random_array(InputSpec("i", DType.INT32, (10000,)))
    assert ints.dtype == np.int32 and ints.min() == 0 and ints.max() == 9
    q = random_array(InputSpec("q", DType.INT8, (10000,)))
    assert q.dtype == np.int8 and q.min() == -128 and q.max() == 127
    u = random_array(InputSpec("u", DType.UINT8, (10000,)))
    assert u.dtype == np.uint8 and u.min() == 0 and u.max() == 255
    b = random_array(InputSpec("b", DType.BOOL, (1000,)))
    assert b.dtype == np.bool_ and 400 < int(b.sum()) < 600


def test_symbolic_and_unknown_dims() -> None:
    assert random_feeds([IDS])["ids"].shape == (1, 1)
    assert random_feeds([IDS], dim_values={"seq": 7, "batch": 2})["ids"].shape == (2, 7)
    unknown = InputSpec("u", DType.FLOAT32, (None, 5, -1))
    assert random_feeds([unknown], dim_values={"u:0": 4})["u"].shape == (4, 5, 1)


def test_unfeedable_specs_are_refused() -> None:
    with pytest.raises(VerificationError, match="input 'r' has an unknown rank"):
        random_feeds([InputSpec("r", DType.FLOAT32, None)])
    with pytest.raises(VerificationError, match="cannot make random values for input 's' of type string"):
        random_feeds([InputSpec("s", DType.STRING, (1,))])
    with pytest.raises(VerificationError, match="non-negative"):
        random_feeds([X], seed=-1)


def test_load_npy_and_npz(tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.ones((1, 4), np.int64)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "more.npz", ids=ids)
    feeds = load_feeds([f"x={tmp_path / 'x.npy'}", tmp_path / "more.npz"], specs=[X, IDS])
    assert list(feeds) == ["x", "ids"]
    assert np.array_equal(feeds["x"], x) and np.array_equal(feeds["ids"], ids)


def test_load_errors(tmp_path: Path) -> None:
    np.save(tmp_path / "x64.npy", np.zeros((2, 3)))
    np.save(tmp_path / "xbad.npy", np.zeros((3, 2), np.float32))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "objs.npz", x=np.array([None, 1], dtype=object))
    np.savez(tmp_path / "other.npz", y=np.zeros(1))
    (tmp_path / "text.npy").write_text("not an array")
    cases = [
        ([f"x={tmp_path}/missing.npy"], r"input file .*missing.npy does not exist"),
        ([f"x={tmp_path}/obj.npy"], r"obj.npy holds pickled Python objects"),
        ([f"{tmp_path}/objs.npz"], r"objs.npz: array 'x' holds pickled Python objects"),
        ([f"x={tmp_path}/text.npy"], r"text.npy is not a .npy or .npz file"),
        ([f"{tmp_path}/x64.npy"], r"holds one array: write it as NAME="),
        ([f"{tmp_path}/other.npz"], r"the model has no input 'y'; its inputs are 'x', 'ids'"),
        ([f"x={tmp_path}/x64.npy"], r"input 'x' expects float32 \[2, 3\] but was given float64 \[2, 3\]"),
        ([f"x={tmp_path}/xbad.npy"], r"input 'x' expects float32 \[2, 3\] but was given float32 \[3, 2\]"),
        ([f"x={tmp_path}/xbad.npy", f"x={tmp_path}/x64.npy"], r"input 'x' is given twice"),
    ]
    for items, pattern in cases:
        with pytest.raises(VerificationError, match=pattern) as info:
            load_feeds(items, specs=[X, IDS])
        assert "\n" not in str(info.value)


def test_without_specs_anything_goes(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.zeros(2, np.int8))
    assert load_feeds([f"whatever={tmp_path / 'a.npy'}"])["whatever"].dtype == np.int8


def test_verify_reexports_the_runtime_feeds() -> None:
    assert (verify.load_feeds, verify.random_array, verify.random_feeds) == (
        feeds.load_feeds, feeds.random_array, feeds.random_feeds)
