"""Layered float / float2 (and fp16 half2 / half4) textures over CUDA arrays
(CuPy), per-view 2D textures over projections in device memory, and small
caches of both.

Allocating a CUDA array and its texture objects costs about a millisecond,
as much as back-projecting a small slice, so textures are kept for reuse
(``acquire``/``release``). A texture remembers the event after its last use,
and whoever takes it next waits for that event on its own stream, so reuse is
safe across streams. A lock guards the caches: the workers of several GPUs
(``leveret.devices``) take and give back textures from their own threads.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import numpy as np

from ._module import upload_pinned

CACHE_BYTES = 256 << 20   # textures larger than this are freed after use
CACHE_ENTRIES = 4
_cache: "OrderedDict[tuple, LayeredTexture]" = OrderedDict()
_lock = threading.RLock()


def _locked(fn):
    """``fn`` run under the caches' lock."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _lock:
            return fn(*args, **kwargs)
    return wrapper


class LayeredTexture:
    """A layered 2D CUDA array of float32 (``channels=1``) or float2 texels
    (``channels=2``), or with ``half=True`` half2 (``channels=2``) / half4
    (``channels=4``) texels, with a linear and a point texture object over it.

    Layout: ``layers x height x width`` texels, filled from a C-ordered CuPy
    array (float32, or float16 when ``half``) of shape
    ``(layers, height, width * channels)``. Kernels read fp16 texels as
    float2/float4: the texture unit converts and filters them in float32.
    Reads outside the array return 0 (border address mode): 'zero outside the
    detector'.
    """

    MAX_LAYERS = 2048
    MAX_EXTENT = 32768

    def __init__(self, layers: int, height: int, width: int, channels: int = 1, half: bool = False):
        from cupy.cuda import runtime, texture

        if layers > self.MAX_LAYERS or height > self.MAX_EXTENT or width > self.MAX_EXTENT:
            raise ValueError(f"texture: {layers} layers of {height}x{width} exceeds the CUDA limits "
                             f"({self.MAX_LAYERS} layers, {self.MAX_EXTENT} texels per side)")
        if channels not in ((1, 2, 4) if half else (1, 2)):
            raise ValueError(f"channels: expected 1 or 2 (float32) or 1, 2, 4 (fp16), got {channels}")
        self.shape = (layers, height, width)
        self.channels = channels
        self.half = bool(half)
        self.released = None  # CUDA event after the last kernel that read it
        b = 16 if half else 32
        bits = tuple(b if c < channels else 0 for c in range(4))
        desc = texture.ChannelFormatDescriptor(*bits, runtime.cudaChannelFormatKindFloat)
        layered = getattr(runtime, "cudaArrayLayered", 0x01)  # not exported by every CuPy
        self.array = texture.CUDAarray(desc, width, height, layers, layered)
        res = texture.ResourceDescriptor(runtime.cudaResourceTypeArray, cuArr=self.array)
        border = (runtime.cudaAddressModeBorder,) * 3

        def make(filter_mode):
            td = texture.TextureDescriptor(border, filter_mode, runtime.cudaReadModeElementType,
                                           borderColors=(0.0, 0.0, 0.0, 0.0), normalizedCoords=0)
            return texture.TextureObject(res, td)

        self.linear = make(runtime.cudaFilterModeLinear)
        self.point = make(runtime.cudaFilterModePoint)

    @property
    def nbytes(self) -> int:
        layers, height, width = self.shape
        return layers * height * width * (2 if self.half else 4) * self.channels

    def upload(self, data, stream=None) -> None:
        """Copy a C-contiguous float32 (float16 if ``half``) CuPy array of shape
        ``(layers, height, width * channels)`` into the texture."""
        layers, height, width = self.shape
        expected = (layers, height, width * self.channels)
        if tuple(data.shape) != expected:
            raise ValueError(f"texture upload: expected shape {expected}, got {tuple(data.shape)}")
        want = "float16" if self.half else "float32"
        if str(data.dtype) != want:
            raise ValueError(f"texture upload: expected {want} data, got {data.dtype}")
        self.array.copy_from(data, stream)


@_locked
def acquire(shape, channels: int, stream, half: bool = False) -> LayeredTexture:
    """A texture of ``shape`` (layers, height, width), from the cache if one is
    there; ``stream`` waits until its previous user is done with it."""
    import cupy

    key = (cupy.cuda.Device().id, tuple(shape), channels, bool(half))
    tex = _cache.pop(key, None)
    if tex is None:
        return LayeredTexture(*shape, channels=channels, half=half)
    if tex.released is not None:
        stream.wait_event(tex.released)
    return tex


@_locked
def release(tex: LayeredTexture, stream) -> None:
    """Give a texture back after the kernels reading it were queued on ``stream``."""
    import cupy

    if tex.nbytes > CACHE_BYTES:
        return  # dropped: CuPy frees the array once nothing refers to it
    tex.released = stream.record()
    key = (cupy.cuda.Device().id, tex.shape, tex.channels, tex.half)
    old = _cache.pop(key, None)
    del old
    _cache[key] = tex
    while len(_cache) > CACHE_ENTRIES or sum(t.nbytes for t in _cache.values()) > CACHE_BYTES:
        _cache.popitem(last=False)


@_locked
def clear_cache() -> None:
    """Free every cached texture (e.g. before handing the GPU to other work)."""
    _cache.clear()
    _view_cache.clear()


# ---------------------------------------------------------------------------
# Per-view 2D textures over the projections in place (pitch-linear memory).
#
# A layered CUDA array must be filled by a copy: for the ray-aligned cone
# kernels that copy (and the gather of each pass's views before it) is a
# noticeable share of the back-projection. A texture object can instead sit
# on ordinary device memory ("pitch 2D": rows at a fixed pitch), one per
# view, and the kernels pick a view's object from a table in constant memory.
# The texture unit filters it with the same 8-bit weights (sums
# bit-identical), at a cost in hit rate that depends on the access pattern:
# small for lanes along the rays, larger for kernel B's lanes along x, which
# keeps the layered array (docs/performance.md).

VIEW_CACHE_ENTRIES = 4
_view_cache: "OrderedDict[tuple, ViewTextures]" = OrderedDict()
_retired: "list[ViewTextures]" = []    # evicted, still read by queued kernels


class ViewTextures:
    """One bilinear, border-zero 2D texture object per view of a
    (n_views, rows, cols) float32 CuPy array whose views meet the device's
    texture alignment (rows may be strided), read in place; ``handles``:
    their ``cudaTextureObject_t`` values, a uint64 device array in view
    order."""

    def __init__(self, views, stream):
        import cupy
        from cupy.cuda import runtime, texture

        n_views, rows, cols = views.shape
        desc = texture.ChannelFormatDescriptor(32, 0, 0, 0, runtime.cudaChannelFormatKindFloat)
        sampler = texture.TextureDescriptor((runtime.cudaAddressModeBorder,) * 2, runtime.cudaFilterModeLinear,
                                            runtime.cudaReadModeElementType, borderColors=(0.0, 0.0, 0.0, 0.0),
                                            normalizedCoords=0)
        pitch = views.strides[1]
        # A descriptor keeps its array alive; the objects of an in-place entry
        # must not keep the caller's projections: they see unowned memory.
        unowned = cupy.ndarray(views.shape, views.dtype, cupy.cuda.MemoryPointer(
            cupy.cuda.UnownedMemory(views.data.ptr, views.strides[0] * n_views, None), 0), strides=views.strides)
        self.objects = [texture.TextureObject(
            texture.ResourceDescriptor(runtime.cudaResourceTypePitch2D, arr=unowned[n], chDesc=desc, width=cols,
                                       height=rows, pitchInBytes=pitch), sampler) for n in range(n_views)]
        self.handles, self._pinned = upload_pinned(np.array([o.ptr for o in self.objects], np.uint64), stream)
        self.released = None   # the event after the last kernels that read it (release_views)
        self.staging = None    # the aligned copy the objects read, when the views were not aligned
        self.key = None


def _alignment():
    import cupy
    from cupy.cuda import runtime

    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    return int(props["textureAlignment"]), int(props["texturePitchAlignment"]), props["maxTexture2DLinear"]


@_locked
def view_textures(projections, stream) -> ViewTextures:
    """Texture objects for every view of a C-contiguous (n_views, rows, cols)
    float32 CuPy array. When the views meet the device's alignment (base
    address and view size multiples of ``textureAlignment``, 512 B; row size
    of ``texturePitchAlignment``, 32 B: RabbitCT's 1248 x 960 views do) they
    read ``projections`` in place (the objects are cached by address and
    shape); otherwise ``projections`` is copied on ``stream`` into an aligned
    staging buffer, kept for the next call of the same shape when it is
    small. Give the result back with ``release_views`` once the kernels
    reading it are queued."""
    import cupy

    n_views, rows, cols = projections.shape
    base, pitch_align, (max_width, max_height, _) = _alignment()
    if cols > max_width or rows > max_height:
        raise ValueError(f"projections: {rows} x {cols} views exceed the device's 2D texture limits "
                         f"({max_height} rows, {max_width} columns)")
    device = cupy.cuda.Device().id
    row_bytes, view_bytes = cols * 4, rows * cols * 4
    aligned = projections.data.ptr % base == 0 and view_bytes % base == 0 and row_bytes % pitch_align == 0
    if aligned and projections.flags.c_contiguous:
        key = (device, projections.data.ptr, projections.shape)
        entry = _view_cache.pop(key, None) or ViewTextures(projections, stream)
        entry.key = key
        return entry
    key = (device, "staging", projections.shape)
    entry = _view_cache.pop(key, None)
    if entry is None:
        pitch = -(-row_bytes // pitch_align) * pitch_align // 4            # floats per row
        stride = -(-rows * pitch * 4 // base) * base // 4                  # floats per view
        flat = cupy.empty(n_views * stride + base // 4, cupy.float32)
        skip = -flat.data.ptr % base                                       # bytes to the first aligned float
        staging = cupy.ndarray((n_views, rows, cols), cupy.float32, flat.data + skip,
                               strides=(stride * 4, pitch * 4, 4))
        entry = ViewTextures(staging, stream)
        entry.staging = staging
    elif entry.released is not None:
        stream.wait_event(entry.released)   # its last readers are done before it is refilled
    with stream:
        entry.staging[...] = projections
    entry.key = key
    return entry


@_locked
def release_views(entry: ViewTextures, stream) -> None:
    """Give ``entry`` back after the kernels reading it were queued on ``stream``."""
    entry.released = stream.record()
    _view_cache.pop(entry.key, None)
    _view_cache[entry.key] = entry
    staged = lambda: sum(e.staging.nbytes for e in _view_cache.values() if e.staging is not None)  # noqa: E731
    while len(_view_cache) > VIEW_CACHE_ENTRIES or staged() > CACHE_BYTES:
        _retired.append(_view_cache.popitem(last=False)[1])
    # Texture objects are destroyed at once, not in stream order: an evicted
    # entry lives until the kernels that read it are done.
    _retired[:] = [e for e in _retired if not e.released.done]
