"""Writing around h5py's lock and reading bands on many threads: Blosc chunks as
HDF5 direct chunks (decoded here without hdf5plugin), HDF5's shuffle and
deflate written by hand, a file object whose chunk writes go to a pool, zarr
chunk files written directly, bands of rows read with preadv, CRC-32s of
blocks combined."""

from __future__ import annotations

import importlib.util
import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import h5py
import numpy as np
import pytest

from leveret.io import SlabWriter, open_array, read_array, read_scan
from leveret.io import hdf5 as h5io
from leveret.io.bands import _file_places, read_band
from leveret.io.codecs import H5_BLOSC, ChunkCodec, decode_hdf5_chunk, shuffle_bytes, unshuffle_bytes
from leveret.io.slabs import crc32_combine, rows_checksum

HAVE_ZARR = importlib.util.find_spec("zarr") is not None


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(3) as p:
        yield p


def _volume(rng, shape=(5, 37, 23)):
    return (rng.standard_normal(shape) * 0.1 + np.linspace(0, 1, shape[-1])).astype(np.float32)


# -- HDF5 outputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["default", "lz4", "zstd", "gzip", None])
def test_hdf5_outputs_round_trip_and_carry_the_standard_filters(tmp_path, rng, compression):
    vol = _volume(rng)
    out = tmp_path / "v.h5"
    with SlabWriter(
        out, vol.shape, compression=compression, chunks=(1, 16, 23) if compression else None, threads=3
    ) as w:
        w.write(0, vol[:2])
        w.write(2, vol[2:])  # an edge chunk of 5 of 16 rows: stored padded, read back cut
        w.finish()
    np.testing.assert_array_equal(read_array(out), vol)
    np.testing.assert_array_equal(np.asarray(open_array(out)[1:4, 3:20, :]), vol[1:4, 3:20, :])
    with h5py.File(out) as f:
        ds = f["/data"]
        filters = ds._filters
        if compression in ("default", "lz4", "zstd"):
            # hdf5plugin's/PyTables' Blosc options: revision, format, item size, chunk bytes, level, bit shuffle,
            # compressor (1 lz4, 5 zstd)
            assert filters[str(H5_BLOSC)] == (2, 2, 4, 16 * 23 * 4, 3, 2, 5 if compression == "zstd" else 1)
            assert h5io.needs_own_decoder(ds) == (not h5py.h5z.filter_avail(H5_BLOSC))
        elif compression == "gzip":  # HDF5's own filters: any reader decodes them
            assert set(filters) == {"shuffle", "gzip"} and filters["gzip"] == 4
            np.testing.assert_array_equal(ds[()], vol)
        else:  # contiguous, its space allocated at the start
            assert ds.chunks is None and not filters and ds.id.get_offset() is not None
            np.testing.assert_array_equal(ds[()], vol)


def test_the_blosc_chunks_are_what_numcodecs_makes(tmp_path, rng):
    from numcodecs import Blosc

    vol = _volume(rng, (2, 8, 16))
    with SlabWriter(tmp_path / "v.h5", vol.shape, chunks=(1, 8, 16)) as w:
        w.write(0, vol)
        w.finish()
    with h5py.File(tmp_path / "v.h5") as f:
        mask, raw = f["/data"].id.read_direct_chunk((1, 0, 0))
    assert mask == 0
    assert np.array_equal(np.frombuffer(Blosc().decode(raw), np.float32).reshape(8, 16), vol[1])
    assert np.array_equal(decode_hdf5_chunk(raw, [(H5_BLOSC, ())], 0, np.float32, (1, 8, 16))[0], vol[1])


def test_hdf5_shuffle_and_deflate_by_hand_equal_hdf5_s_own(rng):
    a = rng.standard_normal((3, 7)).astype(np.float32)
    assert np.array_equal(np.frombuffer(unshuffle_bytes(shuffle_bytes(a), 4).tobytes(), np.float32).reshape(3, 7), a)
    assert shuffle_bytes(np.array([1, 2], "<u2")) == bytes([1, 2, 0, 0])  # low bytes first, then high
    raw = ChunkCodec("gzip").encode(a)
    back = decode_hdf5_chunk(raw, [(2, ()), (1, ())], 0, np.float32, a.shape)
    assert np.array_equal(back, a)
    # a filter skipped by the chunk's mask (bit 1: deflate) is not undone
    plain = shuffle_bytes(a)
    assert np.array_equal(decode_hdf5_chunk(plain, [(2, ()), (1, ())], 0b10, np.float32, a.shape), a)
    with pytest.raises(ValueError, match="HDF5 filter 32004"):
        decode_hdf5_chunk(b"", [(32004, ())], 0, np.float32, (1,))


# -- zarr ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_ZARR, reason="zarr is not installed")
@pytest.mark.parametrize("compression", ["default", "zstd", None])
def test_zarr_chunk_files_written_directly_are_zarr_s(tmp_path, rng, compression):
    import zarr

    vol = _volume(rng)
    with SlabWriter(tmp_path / "v.zarr", vol.shape, compression=compression, chunks=(1, 16, 10)) as w:
        w.write(0, vol[:3])
        w.write(3, vol[3:])
        w.finish()
    z = zarr.open_array(str(tmp_path / "v.zarr"), mode="r")
    assert z.chunks == (1, 16, 10)
    np.testing.assert_array_equal(z[...], vol)
    names = sorted(
        str(p.relative_to(tmp_path / "v.zarr")) for p in (tmp_path / "v.zarr" / "c").rglob("*") if p.is_file()
    )
    assert len(names) == 5 * 3 * 3 and "c/4/2/2" in names


# -- reading bands --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    import tifffile

    rng = np.random.default_rng(5)
    folder = tmp_path_factory.mktemp("bands")
    a = rng.integers(0, 60000, (12, 20, 18), dtype=np.uint16)
    with h5py.File(folder / "s.h5", "w") as f:
        f["contiguous"] = a
        f.create_dataset("frames", data=a, chunks=(1, 20, 18))
        f.create_dataset("blocks", data=a, chunks=(5, 7, 18))
        f.create_dataset("gzip", data=a, chunks=(2, 6, 8), compression="gzip", shuffle=True)
        f.create_dataset("sparse", shape=a.shape, dtype=a.dtype, chunks=(2, 6, 18))
        f["sparse"][:4] = a[:4]
        # an NXtomo-like stack: projections are every other frame (flats and darks between)
        f.create_dataset("exchange/data", data=np.repeat(a, 2, axis=0), chunks=(1, 20, 18))
    np.save(folder / "s.npy", a)
    (folder / "t").mkdir()
    for i in range(len(a)):
        tifffile.imwrite(folder / "t" / f"p_{i:02d}.tif", a[i])
    return folder, a


@pytest.mark.parametrize("name", ["contiguous", "frames", "blocks", "gzip", "npy", "tiff", "frame stack"])
def test_read_band_equals_slicing_and_reads_bytes_directly(stack, pool, name):
    from leveret.io.scans import FrameStack

    folder, a = stack
    expected = a
    if name == "npy":
        source = open_array(folder / "s.npy")
    elif name == "tiff":
        source = open_array(folder / "t")
    elif name == "frame stack":
        source = FrameStack(folder / "s.h5", "/exchange/data", np.arange(1, 24, 2), (20, 18), np.uint16)
        expected = np.repeat(a, 2, axis=0)[1::2]
    else:
        source = open_array(f"{folder / 's.h5'}:/{name}")
    assert _file_places(source) is not None  # its bytes' places are known: preadv, not h5py
    for rows in [(0, 20), (3, 4), (6, 13), (19, 20)]:
        out = np.full((12, rows[1] - rows[0], 18), 7, np.uint16)
        read_band(source, rows, out, pool=pool)
        np.testing.assert_array_equal(out, expected[:, rows[0] : rows[1]])


@pytest.mark.parametrize("name", ["contiguous", "blocks", "gzip", "npy", "tiff", "frame stack", "in memory"])
def test_read_band_reads_a_range_of_views(stack, pool, name):
    """A helical slab reads only the views that see it: ``views=(n0, n1)`` reads
    ``source[n0:n1, r0:r1]``, through the file's places where they are known."""
    from leveret.io.scans import FrameStack

    folder, a = stack
    expected = a
    if name == "npy":
        source = open_array(folder / "s.npy")
    elif name == "tiff":
        source = open_array(folder / "t")
    elif name == "frame stack":
        source = FrameStack(folder / "s.h5", "/exchange/data", np.arange(1, 24, 2), (20, 18), np.uint16)
        expected = np.repeat(a, 2, axis=0)[1::2]
    elif name == "in memory":
        source = a
    else:
        source = open_array(f"{folder / 's.h5'}:/{name}")
    for views, rows in [((0, 12), (3, 9)), ((3, 7), (0, 20)), ((11, 12), (19, 20)), ((4, 10), (6, 13))]:
        out = np.full((views[1] - views[0], rows[1] - rows[0], 18), 7, np.uint16)
        read_band(source, rows, out, pool=pool, views=views)
        np.testing.assert_array_equal(out, expected[views[0] : views[1], rows[0] : rows[1]])
    with pytest.raises(ValueError, match="views: expected 0 <= n0 < n1 <= 12"):
        read_band(source, (0, 2), np.empty((3, 2, 18), np.uint16), views=(10, 13))


def test_chunks_never_written_read_as_zero_and_others_fall_back(stack, pool):
    folder, a = stack
    out = np.full((12, 10, 18), 7, np.uint16)
    read_band(open_array(f"{folder / 's.h5'}:/sparse"), (5, 15), out, pool=pool)
    expected = np.zeros_like(a)
    expected[:4] = a[:4]
    np.testing.assert_array_equal(out, expected[:, 5:15])
    out = np.empty((12, 2, 18), np.uint16)
    read_band(a, (1, 3), out, pool=pool)  # in memory: its own slicing
    np.testing.assert_array_equal(out, a[:, 1:3])
    with pytest.raises(ValueError, match="out: expected a C-contiguous uint16 array of shape"):
        read_band(a, (1, 3), np.empty((12, 3, 18), np.uint16))


def test_a_dxchange_scan_s_projections_are_read_directly(tmp_path, pool, rng):
    a = rng.integers(0, 1000, (6, 5, 4), dtype=np.uint16)
    with h5py.File(tmp_path / "scan.h5", "w") as f:
        f.create_dataset("exchange/data", data=a, chunks=(1, 5, 4))
        f["exchange/theta"] = np.linspace(0, 180, 6, endpoint=False)
    projections = read_scan(tmp_path / "scan.h5").projections
    out = np.empty((6, 2, 4), np.uint16)
    read_band(projections, (2, 4), out, pool=pool)
    np.testing.assert_array_equal(out, a[:, 2:4])


def test_read_rows_reads_a_scan_s_rows_by_their_places_on_threads(stack, monkeypatch):
    """The checks' and the centre's rows: a frame stack's own slicing reads frame by
    frame through h5py (each chunk whole); read_rows reads the rows' bytes on threads."""
    from leveret.io.bands import read_rows
    from leveret.io.scans import FrameStack

    folder, a = stack
    source = FrameStack(folder / "s.h5", "/exchange/data", np.arange(1, 24, 2), (20, 18), np.uint16)
    threads = set()
    real = os.preadv

    def preadv(*args):
        threads.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(FrameStack, "_frames_at", lambda *args: pytest.fail("read through h5py, frame by frame"))
    monkeypatch.setattr(os, "preadv", preadv)
    np.testing.assert_array_equal(read_rows(source, (6, 13), threads=3), a[:, 6:13])
    np.testing.assert_array_equal(read_rows(source, (0, 2), views=(4, 9)), a[4:9, 0:2])
    assert threads and all(name.startswith("leveret-rows") for name in threads)
    monkeypatch.undo()
    np.testing.assert_array_equal(read_rows(a, (1, 3)), a[:, 1:3])  # in memory: its own slicing


# -- checksums ------------------------------------------------------------------------------------


def test_crc32_combine_is_zlib_s(rng):
    for n1, n2 in [(0, 5), (1, 1), (1000, 7), (3, 100_000)]:
        a, b = rng.bytes(n1), rng.bytes(n2)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    assert crc32_combine(123, zlib.crc32(b""), 0) == 123


def test_rows_checksum_on_threads_is_the_same_value(pool, rng):
    rows = rng.integers(0, 60000, (9, 70, 16_000), dtype=np.uint16)  # over the size at which threads help
    assert rows_checksum(rows, pool=pool) == rows_checksum(rows)
    changed = rows.copy()
    changed[8, 69, -1] ^= 1
    assert rows_checksum(changed, pool=pool) != rows_checksum(rows, pool=pool)
