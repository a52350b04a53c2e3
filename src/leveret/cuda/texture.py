"""Layered float / float2 (and fp16 half2 / half4) textures over CUDA arrays (CuPy), and a small cache of them.

Allocating a CUDA array and its texture objects costs about a millisecond,
as much as back-projecting a small slice, so textures are kept for reuse
(``acquire``/``release``). A texture remembers the event after its last use,
and whoever takes it next waits for that event on its own stream, so reuse is
safe across streams.
"""
from __future__ import annotations

from collections import OrderedDict

CACHE_BYTES = 256 << 20   # textures larger than this are freed after use
CACHE_ENTRIES = 4
_cache: "OrderedDict[tuple, LayeredTexture]" = OrderedDict()


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


def clear_cache() -> None:
    """Free every cached texture (e.g. before handing the GPU to other work)."""
    _cache.clear()
