"""The RabbitCT version-2 file: layout byte by byte, round trips, and refusals."""

import dataclasses
import filecmp
import os
import struct

import numpy as np
import pytest

from leveret.rabbitct import (
    HEADER_SIZE,
    RabbitCTData,
    hu_from_mu,
    matrix_from_rabbitct,
    matrix_to_rabbitct,
    mu_from_hu,
    rabbitct_file_size,
    read_rabbitct,
    write_rabbitct,
)

N_VIEWS, N_ROWS, N_COLS = 5, 10, 12  # W != H, so a swapped header or image order shows
REF_SIZES = (8, 16)


def _expected_size(n, h, w, sizes):
    # The documented formula, written out independently of the module.
    return 24 + n * (12 * 8 + 4 * h * w) + 2 * sum(L**3 for L in sizes)


@pytest.fixture
def data(rng):
    matrices = rng.normal(size=(N_VIEWS, 3, 4)) * 10.0 ** rng.integers(-3, 4, size=(N_VIEWS, 3, 4))
    projections = rng.normal(size=(N_VIEWS, N_ROWS, N_COLS)).astype(np.float32)
    # Values whose bits a careless copy would change.
    projections[1, 2, 3] = np.nan
    projections[1, 2, 4] = -0.0
    projections[2, 0, 0] = np.float32(1e-42)  # subnormal
    projections[3, -1, -1] = -np.inf
    refs = {L: rng.integers(0, 2**16, size=(L, L, L), dtype=np.uint16) for L in REF_SIZES}
    return RabbitCTData(matrices, projections, hu_scale=1234.5, hu_offset=-0.25, references=refs)


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    assert a.dtype.itemsize == b.dtype.itemsize
    np.testing.assert_array_equal(np.ascontiguousarray(a).view(width), np.ascontiguousarray(b).view(width))


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip_is_bit_exact(tmp_path, data, mmap):
    path = write_rabbitct(tmp_path / "rabbit.rct", data)
    back = read_rabbitct(path, mmap=mmap)
    assert back.version == 2
    assert back.n_views == N_VIEWS and back.detector_shape == (N_ROWS, N_COLS)
    assert back.matrices.dtype == np.float64 and back.matrices.shape == (N_VIEWS, 3, 4)
    assert back.projections.dtype == np.float32 and back.projections.shape == (N_VIEWS, N_ROWS, N_COLS)
    _same_bits(back.matrices, data.matrices)
    _same_bits(back.projections, data.projections)
    assert back.hu_scale == 1234.5 and back.hu_offset == -0.25
    assert back.reference_sizes == REF_SIZES
    for L in REF_SIZES:
        assert back.references[L].dtype == np.uint16
        _same_bits(back.references[L], data.references[L])


def test_file_size_and_header_bytes(tmp_path, data):
    path = write_rabbitct(tmp_path / "rabbit.rct", data)
    size = os.path.getsize(path)
    assert size == _expected_size(N_VIEWS, N_ROWS, N_COLS, REF_SIZES)
    assert size == rabbitct_file_size(N_VIEWS, N_ROWS, N_COLS, REF_SIZES)
    raw = path.read_bytes()
    assert HEADER_SIZE == 24
    version, width, height, count = struct.unpack("<4I", raw[:16])
    hu_scale, hu_offset = struct.unpack("<2f", raw[16:24])
    assert (version, width, height, count) == (2, N_COLS, N_ROWS, N_VIEWS)  # width (u) first
    assert (hu_scale, hu_offset) == (1234.5, -0.25)


def test_matrix_layout_against_a_hand_written_example(tmp_path):
    P = np.array(
        [[11.0, 12.0, 13.0, 14.0], [21.0, 22.0, 23.0, 24.0], [31.0, 32.0, 33.0, 34.0]]
    )  # P[r, c] = 10 (r + 1) + (c + 1)
    column_major = [11.0, 21.0, 31.0, 12.0, 22.0, 32.0, 13.0, 23.0, 33.0, 14.0, 24.0, 34.0]
    np.testing.assert_array_equal(matrix_to_rabbitct(P), column_major)
    np.testing.assert_array_equal(matrix_from_rabbitct(column_major), P)
    assert matrix_from_rabbitct(column_major).flags.c_contiguous
    # Stacks go view by view.
    np.testing.assert_array_equal(
        matrix_to_rabbitct(np.stack([P, 2 * P])), [column_major, [2 * x for x in column_major]]
    )

    # The reference kernel's indexing: w = A[2] x + A[5] y + A[8] z + A[11], ...
    A = matrix_to_rabbitct(P)
    x, y, z = 0.5, -1.25, 2.0
    w = A[2] * x + A[5] * y + A[8] * z + A[11]
    u = (A[0] * x + A[3] * y + A[6] * z + A[9]) / w
    v = (A[1] * x + A[4] * y + A[7] * z + A[10]) / w
    uw, vw, ww = P @ [x, y, z, 1.0]
    assert (u, v, w) == pytest.approx((uw / ww, vw / ww, ww), rel=1e-15)

    # ... and in the file: view 1's record starts with its 12 doubles, then its image row by row.
    images = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    path = write_rabbitct(tmp_path / "p.rct", RabbitCTData(np.stack([P, 2 * P]), images))
    raw = path.read_bytes()
    record = 96 + 4 * 3 * 4
    assert struct.unpack_from("<12d", raw, 24) == tuple(column_major)
    assert struct.unpack_from("<12d", raw, 24 + record) == tuple(2 * x for x in column_major)
    assert struct.unpack_from("<12f", raw, 24 + record + 96) == tuple(images[1].ravel())
    assert struct.unpack_from("<4f", raw, 24 + record + 96 + 4 * 4) == tuple(images[1, 1])  # row v = 1
    assert len(raw) == 24 + 2 * record


def test_mmap_gives_read_only_memory_maps(tmp_path, data):
    path = write_rabbitct(tmp_path / "rabbit.rct", data)

    def memmap_backed(a):
        while a is not None:
            if isinstance(a, np.memmap):
                return True
            a = a.base if isinstance(a, np.ndarray) else None
        return False

    mapped = read_rabbitct(path)
    assert memmap_backed(mapped.projections)
    assert all(memmap_backed(vol) for vol in mapped.references.values())
    assert not mapped.projections.flags.writeable
    assert not mapped.matrices.flags.writeable

    loaded = read_rabbitct(path, mmap=False)
    assert not memmap_backed(loaded.projections)
    assert not any(memmap_backed(vol) for vol in loaded.references.values())
    assert not loaded.projections.flags.writeable

    assert read_rabbitct(path, load_references=False).references == {}


def test_streaming_copy_from_a_memory_map_is_identical(tmp_path, data):
    a = write_rabbitct(tmp_path / "a.rct", data)
    b = write_rabbitct(tmp_path / "b.rct", read_rabbitct(a))
    assert filecmp.cmp(a, b, shallow=False)
    # A plain sequence of images streams the same bytes.
    seq = dataclasses.replace(data, projections=[img for img in data.projections])
    c = write_rabbitct(tmp_path / "c.rct", seq)
    assert filecmp.cmp(a, c, shallow=False)


def test_no_references(tmp_path, rng):
    d = RabbitCTData(rng.normal(size=(2, 3, 4)), np.zeros((2, 4, 3), np.float32))
    path = write_rabbitct(tmp_path / "r.rct", d)
    assert os.path.getsize(path) == _expected_size(2, 4, 3, ())
    assert read_rabbitct(path).references == {}


# -- refusals --------------------------------------------------------------------------------


@pytest.fixture
def good_file(tmp_path, data):
    return write_rabbitct(tmp_path / "rabbit.rct", data)


def _error(path, **kwargs):
    with pytest.raises(ValueError) as info:
        read_rabbitct(path, **kwargs)
    msg = str(info.value)
    assert str(path) in msg, msg
    return msg


RECORD = 96 + 4 * N_ROWS * N_COLS
PROJ_END = 24 + N_VIEWS * RECORD


@pytest.mark.parametrize("keep", [0, 10, 23, 24, 24 + 50, 24 + RECORD + 200, PROJ_END - 1])
def test_truncated_projections(good_file, keep):
    good_file.write_bytes(good_file.read_bytes()[:keep])
    msg = _error(good_file)
    if keep >= 24:
        assert "truncated" in msg and str(PROJ_END) in msg and str(keep) in msg


@pytest.mark.parametrize("cut", [1, 2, 100, 2 * 16**3 - 2, 2 * 16**3 + 2])
def test_truncated_references(good_file, cut):
    good_file.write_bytes(good_file.read_bytes()[:-cut])
    for load in (True, False):  # checked even when the references are not wanted
        msg = _error(good_file, load_references=load)
        assert "reference" in msg


def test_trailing_bytes(good_file):
    with open(good_file, "ab") as f:
        f.write(b"\0\0\0\0")
    assert "reference" in _error(good_file)


def _patch(path, offset, fmt, *values):
    raw = bytearray(path.read_bytes())
    struct.pack_into(fmt, raw, offset, *values)
    path.write_bytes(bytes(raw))


def test_wrong_version(good_file):
    _patch(good_file, 0, "<I", 3)
    msg = _error(good_file)
    assert "version 2" in msg and "found 3" in msg


def test_version_1_file_is_named(good_file):
    _patch(good_file, 0, "<I", 1248)  # version-1 headers start with the width
    assert "version-1" in _error(good_file)


def test_big_endian_file_is_refused(good_file):
    _patch(good_file, 0, ">I", 2)
    assert "found 33554432" in _error(good_file)


@pytest.mark.parametrize(
    "offset, fmt, value, words",
    [
        (4, "<I", 0, "detector size"),
        (8, "<I", 0, "detector size"),
        (12, "<I", 0, "at least one projection"),
        (12, "<I", N_VIEWS + 1, "truncated"),
        (4, "<I", 2**31, "truncated"),
        (16, "<f", float("nan"), "finite HU"),
    ],
)
def test_bad_header_fields(good_file, offset, fmt, value, words):
    _patch(good_file, offset, fmt, value)
    assert words in _error(good_file)


def test_garbage_header(tmp_path, rng):
    path = tmp_path / "garbage.rct"
    path.write_bytes(rng.integers(0, 256, size=5000, dtype=np.uint8).tobytes())
    _error(path)
    path.write_bytes(b"not a RabbitCT file at all, just some text" * 10)
    _error(path)


def test_non_finite_matrix(good_file):
    _patch(good_file, 24 + 2 * RECORD + 8 * 5, "<d", float("inf"))
    assert "view 2" in _error(good_file)


def test_missing_file(tmp_path):
    assert "no such file" in _error(tmp_path / "absent.rct")


def test_existing_output_is_refused_unless_overwrite(tmp_path, data, rng):
    path = write_rabbitct(tmp_path / "rabbit.rct", data)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="already exists"):
        write_rabbitct(path, data)
    assert path.read_bytes() == before
    other = dataclasses.replace(data, hu_scale=2.0)
    write_rabbitct(path, other, overwrite=True)
    assert read_rabbitct(path).hu_scale == 2.0
    assert os.listdir(tmp_path) == ["rabbit.rct"]


@pytest.mark.parametrize(
    "bad_image, words",
    [
        (np.zeros((N_ROWS, N_COLS + 1), np.float32), "shape"),
        (np.zeros((N_COLS, N_ROWS), np.float32), "shape"),
        (np.zeros((N_ROWS, N_COLS), np.float64), "float32"),
    ],
)
@pytest.mark.parametrize("existing", [False, True])
def test_failed_write_leaves_nothing(tmp_path, data, bad_image, words, existing):
    path = tmp_path / "rabbit.rct"
    if existing:
        write_rabbitct(path, data)
        before = path.read_bytes()
    images = list(data.projections)
    images[2] = bad_image  # met halfway, after two views are on disk
    with pytest.raises(ValueError, match=r"data\.projections\[2\]") as info:
        write_rabbitct(path, dataclasses.replace(data, projections=images), overwrite=True)
    assert words in str(info.value)
    if existing:
        assert os.listdir(tmp_path) == ["rabbit.rct"] and path.read_bytes() == before
    else:
        assert os.listdir(tmp_path) == []


def test_write_refuses_other_data(tmp_path):
    with pytest.raises(TypeError, match="data: expected a RabbitCTData"):
        write_rabbitct(tmp_path / "x.rct", {"matrices": np.zeros((1, 3, 4))})
    assert os.listdir(tmp_path) == []


# -- the data class --------------------------------------------------------------------------


def test_data_is_immutable_and_normalised(data):
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.hu_scale = 3.0
    assert not data.matrices.flags.writeable
    with pytest.raises(TypeError):
        data.references[32] = np.zeros((32, 32, 32), np.uint16)
    d = RabbitCTData(np.zeros((1, 3, 4), np.float32), np.zeros((1, 2, 2), np.float32), hu_scale=0.1)
    assert d.hu_scale == float(np.float32(0.1))  # what the file will hold
    assert d.matrices.dtype == np.float64
    assert "n_views=1" in repr(d)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(matrices=np.zeros((2, 4, 3))), "matrices: expected shape"),
        (dict(matrices=np.zeros((0, 3, 4)), projections=np.zeros((0, 2, 2), np.float32)), "matrices"),
        (dict(matrices=np.full((2, 3, 4), np.nan)), "matrices: expected finite"),
        (dict(projections=np.zeros((3, 2, 2), np.float32)), "projections: expected shape"),
        (dict(projections=np.zeros((2, 2, 2), np.float64)), "float32"),
        (dict(projections=[np.zeros((2, 2), np.float32)]), "expected 2 images"),
        (dict(hu_scale=float("inf")), "hu_scale"),
        (dict(hu_offset=1e40), "hu_offset"),
        (dict(references={8: np.zeros((8, 8, 8), np.uint16), 32: np.zeros((32,) * 3, np.uint16)}), "L0, 2 L0"),
        (dict(references={4: np.zeros((4, 4, 5), np.uint16)}), "shape"),
        (dict(references={4: np.zeros((4, 4, 4), np.float32)}), "uint16"),
        (dict(references={4: np.zeros((4, 4, 4), np.int16)}), "uint16"),
        (dict(version=1), "version"),
    ],
)
def test_data_validation(kwargs, words):
    args = dict(matrices=np.zeros((2, 3, 4)), projections=np.zeros((2, 2, 2), np.float32))
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        RabbitCTData(**args)


def test_matrix_helpers_refuse_bad_shapes():
    with pytest.raises(ValueError, match="P: expected a 3x4"):
        matrix_to_rabbitct(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="values: expected 12"):
        matrix_from_rabbitct(np.zeros(11))


# -- scored units ------------------------------------------------------------------------------


def test_hu_from_mu_follows_the_runner():
    mu = np.array([-1.0, 0.0, np.nan, 0.5, 1.0, 100.0, 1.5e-3, 2.5e-3], np.float32)
    hu = hu_from_mu(mu, 1000.0, 24.0)
    assert hu.dtype == np.float32
    # mu <= 0 (and NaN) -> 0; round half up (2.5 -> 3, not 2); capped at 4095.
    np.testing.assert_array_equal(hu, [0, 0, 0, 524, 1024, 4095, 26, 27])
    assert hu_from_mu(np.float32(0.25), 10.0, -10.0) == -7  # no lower cap: floor(-7.5 + 0.5)
    vol = np.linspace(0.001, 1.0, 4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    np.testing.assert_array_equal(
        mu_from_hu(hu_from_mu(vol, 1000.0, 0.0), 1000.0, 0.0),
        np.floor(vol * np.float32(1000) + np.float32(0.5)).astype(np.float64) / 1000,
    )


def test_hu_helpers_need_scale_and_offset():
    with pytest.raises(TypeError):
        hu_from_mu(np.ones(3), 0.02)  # a mu_water call must not pass silently
    with pytest.raises(ValueError, match="hu_scale: expected a nonzero"):
        mu_from_hu(np.ones(3), 0.0, 1.0)


def test_cut_at_a_volume_boundary_reads_as_fewer_references(good_file):
    # The file names no sizes (see the module docstring): a whole missing last
    # volume is a valid file with fewer references, as RabbitCTRunner sees it.
    good_file.write_bytes(good_file.read_bytes()[: -2 * 16**3])
    assert read_rabbitct(good_file).reference_sizes == (8,)
