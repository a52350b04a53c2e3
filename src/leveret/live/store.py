"""The filtered views kept for recomputing moved slices: blocks, never regrown.

Views are appended into fixed-size blocks (no copy of the views kept when the
store grows). On a GPU the first ``device_views`` views live in device memory
and later ones spill to pinned host memory (logged once); a move reads those
back a block at a time, so its temporaries stay bounded by one block. Device
blocks are pitched (rows on 32-byte, views on 512-byte boundaries) so that a
2D texture object can sit on each view in place.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("leveret.live")

ROW_ALIGN, VIEW_ALIGN = 32, 512  # bytes: CUDA's texturePitchAlignment and textureAlignment


class ViewStore:
    """Filtered views (n, n_rows, n_cols) in ``dtype``, in blocks of ``block_views``.

    Parameters
    ----------
    shape : (n_rows, n_cols)
    dtype : float32 or float16
    xp : module
        numpy, or cupy for a store on the GPU.
    block_views : int
        Views per block.
    device_views : int or None
        Views kept in ``xp`` memory, rounded up to whole blocks; later blocks
        go to host memory (pinned on a GPU). None: no limit.
    pitched : bool
        GPU: align rows and views for texture objects (else C-contiguous).
    """

    def __init__(self, shape, dtype, xp, *, block_views: int, device_views: int | None = None, pitched: bool = True):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.xp = xp
        self.block_views = int(block_views)
        self.device_blocks = None if device_views is None else -(-int(device_views) // self.block_views)
        self.blocks: list = []  # arrays (block_views, n_rows, n_cols); device first, then host
        self.n = 0
        self.spilled_logged = False
        self.pitched = pitched

    @property
    def n_device_blocks(self) -> int:
        return len(self.blocks) if self.device_blocks is None else min(len(self.blocks), self.device_blocks)

    def on_device(self, b: int) -> bool:
        return b < self.n_device_blocks

    def _new_block(self):
        b = len(self.blocks)
        rows, cols = self.shape
        if self.xp is np or not (self.device_blocks is None or b < self.device_blocks):
            if self.xp is not np and not self.spilled_logged:
                log.warning(
                    "GPU store of filtered views full after %d views: later views go to host memory "
                    "(moved slices read them back block by block)",
                    b * self.block_views,
                )
                self.spilled_logged = True
            if self.xp is np:
                return np.empty((self.block_views, rows, cols), self.dtype)
            from ..cuda.pipeline import empty_pinned

            return empty_pinned((self.block_views, rows, cols), self.dtype)
        if not self.pitched:
            return self.xp.empty((self.block_views, rows, cols), self.dtype)
        item = self.dtype.itemsize
        pitch = -(-cols * item // ROW_ALIGN) * ROW_ALIGN // item
        stride = -(-rows * pitch * item // VIEW_ALIGN) * VIEW_ALIGN // item
        flat = self.xp.empty(self.block_views * stride, self.dtype)
        return self.xp.ndarray(
            (self.block_views, rows, cols), self.dtype, flat.data, strides=(stride * item, pitch * item, item)
        )

    def reserve(self, n: int) -> None:
        """Allocate the blocks for ``n`` views now (host blocks touched, so that
        their page faults are paid here and not while frames arrive)."""
        while len(self.blocks) * self.block_views < n:
            block = self._new_block()
            if isinstance(block, np.ndarray):
                block.fill(0)
            self.blocks.append(block)

    def append(self, views, copy=None) -> None:
        """Append (k, n_rows, n_cols) float32 views (any strides, same array module
        as the store; host blocks of a GPU store take them by a download).
        ``copy(dst, src)``: how to copy into a device block (default ``dst[...] = src``)."""
        k = views.shape[0]
        done = 0
        while done < k:
            b, o = divmod(self.n, self.block_views)
            if b == len(self.blocks):
                self.blocks.append(self._new_block())
            m = min(k - done, self.block_views - o)
            dst = self.blocks[b][o : o + m]
            src = views[done : done + m]
            if self.xp is not np and not self.on_device(b):
                dst[...] = src.astype(self.dtype).get()
            elif copy is not None:
                copy(dst, src)
            else:
                dst[...] = src
            done += m
            self.n += m

    def runs(self, views):
        """Group view numbers by block: yields (block index, block, local indices, positions in ``views``)."""
        views = np.asarray(views, np.int64)
        block = views // self.block_views
        for b in np.unique(block):
            pos = np.flatnonzero(block == b)
            yield int(b), self.blocks[b], views[pos] - b * self.block_views, pos

    def gather(self, views):
        """The views as one float32 array in ``xp`` memory (for a few views only)."""
        out = self.xp.empty((len(views),) + self.shape, np.float32)
        for b, block, local, pos in self.runs(views):
            part = block[local]
            out[self.xp.asarray(pos) if self.xp is not np else pos] = (
                self.xp.asarray(part) if self.xp is not np else part
            )
        return out

    def nbytes_device(self) -> int:
        rows, cols = self.shape
        return self.n_device_blocks * self.block_views * rows * cols * self.dtype.itemsize
