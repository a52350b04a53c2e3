"""Chunk codecs of the compressed outputs: one chunk in, its stored bytes out.

A writer compresses chunks on a pool of threads and hands the bytes to the
format (HDF5's ``write_direct_chunk``, a zarr chunk file); every codec here
releases the GIL while it works, so the threads run on every core.

- ``"lz4"`` and ``"zstd"``: Blosc (numcodecs) with bit shuffle at level 3, the
  field's format for float volumes (ratio about 1.33 on reconstructions; lz4
  measured 9.7 GB/s, zstd 4.0 GB/s of input on 16 threads). In HDF5 the chunks
  carry the registered Blosc filter (id 32001, the options hdf5plugin and
  PyTables write), so that readers with hdf5plugin (or the HDF5 Blosc plugin)
  decode them; writing needs numcodecs only, not hdf5plugin. In zarr they are
  zarr's own ``BloscCodec``.
- ``"gzip"`` (HDF5 only): HDF5's byte shuffle then deflate (zlib, level 4),
  which every HDF5 reader decodes without plugins.

:func:`decode_hdf5_chunk` undoes the HDF5 filters leveret writes (Blosc,
deflate, shuffle) without any HDF5 plugin, so that leveret reads its own
outputs where hdf5plugin is not installed.
"""

from __future__ import annotations

import zlib

import numpy as np

#: HDF5 filter ids (HDF5's own, and the registered Blosc filter's).
H5_DEFLATE, H5_SHUFFLE, H5_BLOSC = 1, 2, 32001
#: Blosc compressor codes in the HDF5 Blosc filter's options (hdf5-blosc, hdf5plugin).
BLOSC_COMPRESSORS = {"blosclz": 0, "lz4": 1, "lz4hc": 2, "snappy": 3, "zlib": 4, "zstd": 5}
#: Blosc level of the outputs (the level the host's ceilings were measured at).
BLOSC_LEVEL = 3
#: Deflate level of gzip chunks (h5py's usual default).
GZIP_LEVEL = 4
_BITSHUFFLE = 2  # Blosc's shuffle code for bit shuffle (numcodecs.Blosc.BITSHUFFLE)


def _numcodecs_blosc(cname: str):
    try:
        from numcodecs import Blosc
    except ImportError:
        raise ValueError(
            f"compression: Blosc {cname} needs numcodecs (pip install numcodecs, part of "
            "leveret's dependencies); or give compression 'gzip' (HDF5) or None"
        ) from None
    return Blosc(cname=cname, clevel=BLOSC_LEVEL, shuffle=_BITSHUFFLE)


class ChunkCodec:
    """Compression of one output's chunks.

    Parameters
    ----------
    name : {"lz4", "zstd", "gzip"}
    """

    NAMES = ("lz4", "zstd", "gzip")

    def __init__(self, name: str):
        if name not in self.NAMES:
            raise ValueError(f"compression: expected one of {self.NAMES}, got {name!r}")
        self.name = name
        self._blosc = None if name == "gzip" else _numcodecs_blosc(name)

    def __repr__(self) -> str:
        return f"ChunkCodec({self.name!r})"

    def encode(self, chunk: np.ndarray):
        """The stored bytes of ``chunk`` (a bytes-like object)."""
        chunk = np.ascontiguousarray(chunk)
        if self._blosc is not None:  # a typed array: Blosc shuffles at its item size
            return self._blosc.encode(chunk)
        return zlib.compress(shuffle_bytes(chunk), GZIP_LEVEL)

    def hdf5_options(self, itemsize: int, chunk_bytes: int) -> dict:
        """``h5py.Group.create_dataset`` keywords that put this codec's filters in a dataset's pipeline."""
        if self.name == "gzip":
            return dict(compression="gzip", compression_opts=GZIP_LEVEL, shuffle=True)
        # (filter revision 2, Blosc format 2, item size, chunk bytes, level, shuffle, compressor), as
        # the registered filter's set_local writes them; its decoder reads the sizes from each chunk
        options = (2, 2, int(itemsize), int(chunk_bytes), BLOSC_LEVEL, _BITSHUFFLE, BLOSC_COMPRESSORS[self.name])
        return dict(compression=H5_BLOSC, compression_opts=options, allow_unknown_filter=True)

    def zarr_compressors(self, itemsize: int):
        """zarr v3's codec for these chunks (the same bytes :meth:`encode` makes)."""
        if self.name == "gzip":
            raise ValueError("compression: a zarr output takes 'lz4', 'zstd' or None, not 'gzip'")
        from zarr.codecs import BloscCodec

        return BloscCodec(cname=self.name, clevel=BLOSC_LEVEL, shuffle="bitshuffle", typesize=int(itemsize))


def shuffle_bytes(chunk: np.ndarray) -> bytes:
    """HDF5's shuffle filter: byte k of every item, for k = 0, 1, ... in turn."""
    n = chunk.dtype.itemsize
    raw = np.ascontiguousarray(chunk).view(np.uint8).reshape(-1, n)
    return raw.T.tobytes() if n > 1 else raw.tobytes()


def unshuffle_bytes(raw, itemsize: int) -> np.ndarray:
    """The inverse of :func:`shuffle_bytes`, as bytes (uint8)."""
    data = np.frombuffer(raw, np.uint8)
    if itemsize == 1:
        return data
    whole = data.size // itemsize * itemsize
    out = data[:whole].reshape(itemsize, -1).T.reshape(-1)
    return np.concatenate([out, data[whole:]]) if whole < data.size else out


def decode_hdf5_chunk(raw, filters: list[tuple[int, tuple]], mask: int, dtype, shape) -> np.ndarray:
    """One stored HDF5 chunk as an array of ``shape``: the ``filters`` of the
    dataset's pipeline (``[(filter id, options), ...]`` in the order they are
    applied on writing) undone in reverse, skipping those whose bit is set in
    ``mask`` (the chunk's filter mask).

    Raises
    ------
    ValueError
        A filter other than deflate, shuffle or Blosc; or bytes that do not
        decode to the chunk's size.
    """
    dtype = np.dtype(dtype)
    data = raw
    for index in reversed(range(len(filters))):
        if mask & (1 << index):
            continue
        fid, _ = filters[index]
        if fid == H5_DEFLATE:
            data = zlib.decompress(data)
        elif fid == H5_SHUFFLE:
            data = unshuffle_bytes(data, dtype.itemsize)
        elif fid == H5_BLOSC:
            from numcodecs import Blosc

            data = Blosc().decode(data)
        else:
            raise ValueError(f"HDF5 filter {fid} is not one leveret decodes without its plugin")
    out = np.frombuffer(data, dtype)
    size = int(np.prod(shape))
    if out.size != size:
        raise ValueError(f"a chunk decodes to {out.size} values, its shape {tuple(shape)} holds {size}")
    return out.reshape(shape)
