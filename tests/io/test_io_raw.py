"""read_raw: memory-mapped headerless binary, and its argument checks."""

import os
import tempfile

import numpy as np
import pytest

from leveret.io import read_raw


def _write(path, array, offset=0, order="C", trailer=b""):
    with open(path, "wb") as f:
        f.write(bytes(range(256))[:offset] if offset <= 256 else b"\x07" * offset)
        f.write(array.tobytes(order=order))
        f.write(trailer)


@pytest.mark.parametrize("order", ["C", "F"])
def test_round_trip_with_header_and_trailer(tmp_path, order):
    a = (np.arange(2 * 3 * 4) * 3).reshape(2, 3, 4).astype(">u2")
    _write(tmp_path / "a.raw", a, offset=17, order=order, trailer=b"end")
    b = read_raw(tmp_path / "a.raw", dtype=">u2", shape=(2, 3, 4), offset=17, order=order)
    assert isinstance(b, np.memmap) and b.dtype == np.dtype(">u2") and b.shape == (2, 3, 4)
    np.testing.assert_array_equal(b, a)
    assert not b.flags.writeable
    np.testing.assert_array_equal(
        read_raw(str(tmp_path / "a.raw"), dtype=">u2", shape=24, offset=17, order=order), a.ravel(order=order)
    )


def test_truncated_file_gives_expected_and_found_sizes(tmp_path):
    _write(tmp_path / "t.raw", np.zeros(10, np.float32), offset=4)
    with pytest.raises(ValueError, match=r"^path: .*too short.* needs 48 bytes, the file has 44"):
        read_raw(tmp_path / "t.raw", dtype="float32", shape=(11,), offset=4)
    with pytest.raises(ValueError, match=r"^path: .*needs 48 bytes, the file has 44"):
        read_raw(tmp_path / "t.raw", dtype="float32", shape=10, offset=8)
    with pytest.raises(ValueError, match=r"^path: .*does not exist"):
        read_raw(tmp_path / "missing.raw", dtype="u1", shape=1)
    with pytest.raises(ValueError, match=r"^path: .*is not a file"):
        read_raw(tmp_path, dtype="u1", shape=1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dtype": "float33"}, r"^dtype: expected a NumPy dtype"),
        ({"dtype": "not a dtype"}, r"^dtype: expected a NumPy dtype"),
        ({"dtype": object}, r"^dtype: expected a fixed-size"),
        ({"dtype": "U"}, r"^dtype: expected a fixed-size"),
        ({"shape": 0}, r"^shape: expected a positive int"),
        ({"shape": (2, -1)}, r"^shape: "),
        ({"shape": ()}, r"^shape: "),
        ({"shape": (2.0, 2)}, r"^shape: "),
        ({"shape": "22"}, r"^shape: "),
        ({"shape": None}, r"^shape: "),
        ({"offset": -1}, r"^offset: "),
        ({"offset": 1.5}, r"^offset: "),
        ({"order": "A"}, r"^order: expected 'C' or 'F'"),
    ],
)
def test_bad_arguments_name_themselves(tmp_path, kwargs, match):
    _write(tmp_path / "a.raw", np.zeros(4, np.uint8))
    args = {"dtype": "u1", "shape": (2, 2), **kwargs}
    with pytest.raises(ValueError, match=match):
        read_raw(tmp_path / "a.raw", **args)


def test_hypothesis_round_trip_and_truncation():
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    dtypes = ["u1", "<u2", ">u2", "<i4", ">f4", "<f8", "?", "<c8"]

    @hypothesis.settings(max_examples=30, deadline=None, database=None)
    @hypothesis.given(
        shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
        dtype=st.sampled_from(dtypes),
        offset=st.integers(0, 40),
        order=st.sampled_from("CF"),
        seed=st.integers(0, 2**16),
        short=st.booleans(),
    )
    def check(shape, dtype, offset, order, seed, short):
        raw = np.random.default_rng(seed).integers(
            0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8
        )
        a = raw.view(dtype).reshape(shape, order=order)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.raw")
            _write(path, a, offset=offset, order=order)
            if short:  # cut the last byte: a clear error, never a short array
                with open(path, "r+b") as f:
                    f.truncate(os.path.getsize(path) - 1)
                with pytest.raises(ValueError, match=r"^path: .*too short"):
                    read_raw(path, dtype=dtype, shape=shape, offset=offset, order=order)
                return
            b = read_raw(path, dtype=dtype, shape=shape, offset=offset, order=order)
            assert b.shape == shape and b.dtype == np.dtype(dtype)
            # Compare bytes: random bits may be NaN floats.
            assert np.array(b).tobytes(order=order) == a.tobytes(order=order)
            del b

    check()
