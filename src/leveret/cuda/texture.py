"""Layered float / float2 (and fp16 half2 / half4) textures over CUDA arrays
(CuPy), per-view 2D textures over projections in device memory, and small
caches of both.

Allocating a CUDA array and its texture objects costs about a millisecond,
as much as back-projecting a small slice, so textures are kept for reuse
(``acquire``/``release``). A texture remembers the event after its last use,
and whoever takes it next waits for that event on its own stream, so reuse is
safe across streams. Each GPU has caches of its own, in its
:class:`leveret.cuda.device_state.DeviceState` under its lock (a GPU's budget
and evictions never touch another's textures), and a texture leaving a cache
is kept alive until the event after its last use has passed: texture objects
and arrays are destroyed at once, not in stream order, so one freed earlier
would be read by kernels still queued.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .device_state import active_budget, device_state, known_states
from .pipeline import upload_pinned

CACHE_BYTES = 256 << 20  # per GPU: per-view textures, and layered ones at least; larger ones are freed after use
CACHE_ENTRIES = 8  # per GPU: two workers' textures of a few shapes each
#: Share of a GPU's memory its layered textures may keep (at least ``CACHE_BYTES``):
#: an out-of-core run's workers reuse their slab's texture (1 GiB for 64 slices of
#: 2048 views of 2048 columns) slab after slab, where freeing it would wait for the
#: whole GPU and allocating it again costs milliseconds (5% of such a run on an H200).
LAYERED_SHARE = 1 / 16


def layered_bytes(total: int) -> int:
    """Bytes of layered textures a GPU of ``total`` bytes of memory keeps cached."""
    return max(CACHE_BYTES, int(total * LAYERED_SHARE))


class _Cache:
    """A GPU's least-recently-used cache of reusable objects that kernels
    read (``released``: the CUDA event after their last use, or None), at
    most ``entries`` objects and ``max_bytes`` of ``size(obj)``. A key may
    hold several objects: workers sharing a GPU each get one back (a texture
    freed waits for the whole GPU). An object evicted or dropped is retired:
    kept referenced until its event has passed (checked on every ``put``),
    then freed. Used under the GPU state's lock."""

    def __init__(self, entries: int, max_bytes: int, size, *, strict: bool = False):
        self.entries, self.max_bytes, self.size = entries, max_bytes, size
        self.strict = strict  # retire by waiting for the object's kernels and freeing it at once
        self.entries_by_key: OrderedDict = OrderedDict()  # (key, serial) -> object
        self.retired: list = []
        self._serial = 0

    def keys(self) -> list:
        """The keys cached, least recently used first (a key once per object)."""
        return [key for key, _ in self.entries_by_key]

    def take(self, key):
        """The most recently used object cached under ``key`` (removed from the cache), or None."""
        for entry in reversed(self.entries_by_key):
            if entry[0] == key:
                return self.entries_by_key.pop(entry)
        return None

    def put(self, key, obj) -> None:
        """Cache ``obj`` (its ``released`` set) as the most recently used entry."""
        cache = self.entries_by_key
        if self.size(obj) > self.max_bytes:
            self._retire(obj)
        else:
            self._serial += 1
            cache[(key, self._serial)] = obj
        while len(cache) > self.entries or sum(self.size(o) for o in cache.values()) > self.max_bytes:
            self._retire(cache.popitem(last=False)[1])
        self.retired[:] = [o for o in self.retired if o.released is not None and not o.released.done]

    def _retire(self, obj) -> None:
        if self.strict and obj.released is not None:
            obj.released.synchronize()  # a budget's memory: freed now, not at a later put
        else:
            self.retired.append(obj)

    def clear(self) -> None:
        """Drop every entry, waiting first for the kernels that read them."""
        self.retired.extend(self.entries_by_key.values())
        self.entries_by_key.clear()
        for obj in self.retired:
            if obj.released is not None:
                obj.released.synchronize()
        self.retired.clear()


def layered_cache(state=None) -> _Cache:
    """The layered-texture cache of a GPU's state (default: the current GPU's,
    of :func:`layered_bytes` of its memory; under a
    :class:`leveret.cuda.device_state.MemoryBudget`, the budget's own, of half
    its texture bytes)."""
    budget = active_budget() if state is None else None
    if budget is not None:
        return budget.cache(
            "layered", lambda: _Cache(CACHE_ENTRIES, budget.texture_bytes // 2, lambda tex: tex.nbytes, strict=True)
        )
    state = device_state() if state is None else state

    def make():
        try:
            from cupy.cuda import runtime

            total = runtime.getDeviceProperties(state.device)["totalGlobalMem"]
        except Exception:  # no CUDA here (a state made for bookkeeping alone): the least
            total = 0
        return _Cache(CACHE_ENTRIES, layered_bytes(total), lambda tex: tex.nbytes)

    return state.cache("layered", make)


def _cache_lock():
    """The lock of the cache :func:`layered_cache` and :func:`view_cache` return now."""
    budget = active_budget()
    return budget.lock if budget is not None else device_state().lock


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
            raise ValueError(
                f"texture: {layers} layers of {height}x{width} exceeds the CUDA limits "
                f"({self.MAX_LAYERS} layers, {self.MAX_EXTENT} texels per side)"
            )
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
            td = texture.TextureDescriptor(
                border,
                filter_mode,
                runtime.cudaReadModeElementType,
                borderColors=(0.0, 0.0, 0.0, 0.0),
                normalizedCoords=0,
            )
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


def acquire(shape, channels: int, stream, half: bool = False) -> LayeredTexture:
    """A texture of ``shape`` (layers, height, width) on the current GPU, from
    its cache if one is there; ``stream`` waits until its previous user is
    done with it."""
    with _cache_lock():
        tex = layered_cache().take((tuple(shape), channels, bool(half)))
    if tex is None:
        return LayeredTexture(*shape, channels=channels, half=half)
    if tex.released is not None:
        stream.wait_event(tex.released)
    return tex


def release(tex: LayeredTexture, stream) -> None:
    """Give a texture back after the kernels reading it were queued on ``stream``
    (a texture over the cache's budget is freed once those kernels are done)."""
    tex.released = stream.record()
    with _cache_lock():
        layered_cache().put((tex.shape, tex.channels, tex.half), tex)


def clear_cache() -> None:
    """Free every cached texture of every GPU, once the kernels reading them
    are done (e.g. before handing the GPUs to other work)."""
    for state in known_states():
        with state.lock:
            for cache in state.caches():
                if isinstance(cache, _Cache):
                    cache.clear()


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

VIEW_CACHE_ENTRIES = 4  # per GPU


def view_cache(state=None) -> _Cache:
    """The per-view texture cache of a GPU's state (default: the current GPU's,
    or the budget's own under a ``MemoryBudget``, its staging copies in the
    budget's pool). The in-place entries hold no memory of their own: only
    staging copies count against the bytes."""
    budget = active_budget() if state is None else None
    holder = budget if budget is not None else (device_state() if state is None else state)
    return holder.cache(
        "views",
        lambda: _Cache(
            VIEW_CACHE_ENTRIES,
            CACHE_BYTES,
            lambda e: 0 if e.staging is None else e.staging.nbytes,
            strict=budget is not None,
        ),
    )


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
        sampler = texture.TextureDescriptor(
            (runtime.cudaAddressModeBorder,) * 2,
            runtime.cudaFilterModeLinear,
            runtime.cudaReadModeElementType,
            borderColors=(0.0, 0.0, 0.0, 0.0),
            normalizedCoords=0,
        )
        pitch = views.strides[1]
        # A descriptor keeps its array alive; the objects of an in-place entry
        # must not keep the caller's projections: they see unowned memory.
        unowned = cupy.ndarray(
            views.shape,
            views.dtype,
            cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(views.data.ptr, views.strides[0] * n_views, None), 0),
            strides=views.strides,
        )
        self.objects = [
            texture.TextureObject(
                texture.ResourceDescriptor(
                    runtime.cudaResourceTypePitch2D,
                    arr=unowned[n],
                    chDesc=desc,
                    width=cols,
                    height=rows,
                    pitchInBytes=pitch,
                ),
                sampler,
            )
            for n in range(n_views)
        ]
        self.handles, self._pinned = upload_pinned(np.array([o.ptr for o in self.objects], np.uint64), stream)
        self.uploaded = stream.record()  # another stream reading the handles waits for this
        self.released = None  # the event after the last kernels that read it (release_views)
        self.staging = None  # the aligned copy the objects read, when the views were not aligned
        self.key = None


def _alignment():
    import cupy

    from . import device_properties

    props = device_properties(cupy.cuda.Device().id)
    return int(props["textureAlignment"]), int(props["texturePitchAlignment"]), props["maxTexture2DLinear"]


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
        raise ValueError(
            f"projections: {rows} x {cols} views exceed the device's 2D texture limits "
            f"({max_height} rows, {max_width} columns)"
        )
    row_bytes, view_bytes = cols * 4, rows * cols * 4
    aligned = projections.data.ptr % base == 0 and view_bytes % base == 0 and row_bytes % pitch_align == 0
    if aligned and projections.flags.c_contiguous:
        key = (projections.data.ptr, projections.shape)
        with _cache_lock():
            entry = view_cache().take(key)
        if entry is None:
            entry = ViewTextures(projections, stream)
        else:  # only read, not refilled: its handles need to have landed, no more
            stream.wait_event(entry.uploaded)
        entry.key = key
        return entry
    key = ("staging", projections.shape)
    with _cache_lock():
        entry = view_cache().take(key)
    if entry is None:
        pitch = -(-row_bytes // pitch_align) * pitch_align // 4  # floats per row
        stride = -(-rows * pitch * 4 // base) * base // 4  # floats per view
        flat = cupy.empty(n_views * stride + base // 4, cupy.float32)
        skip = -flat.data.ptr % base  # bytes to the first aligned float
        staging = cupy.ndarray(
            (n_views, rows, cols), cupy.float32, flat.data + skip, strides=(stride * 4, pitch * 4, 4)
        )
        entry = ViewTextures(staging, stream)
        entry.staging = staging
    elif entry.released is not None:
        stream.wait_event(entry.released)  # its last readers are done before it is refilled
    with stream:
        entry.staging[...] = projections
    entry.key = key
    return entry


def release_views(entry: ViewTextures, stream) -> None:
    """Give ``entry`` back after the kernels reading it were queued on ``stream``."""
    entry.released = stream.record()
    with _cache_lock():
        view_cache().put(entry.key, entry)
