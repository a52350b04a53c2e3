"""The texture caches' bookkeeping (leveret.cuda.texture._Cache, one per GPU
in its DeviceState) with stand-in textures and events: no GPU needed."""

from __future__ import annotations

from leveret.cuda.device_state import DeviceState
from leveret.cuda.texture import CACHE_BYTES, _Cache, layered_bytes, layered_cache


class Event:
    def __init__(self):
        self.done = False
        self.waited = False

    def synchronize(self):
        self.waited = True
        self.done = True


class Texture:
    def __init__(self, nbytes=10):
        self.nbytes = nbytes
        self.released = Event()


def cache(entries=2, max_bytes=100):
    return _Cache(entries, max_bytes, lambda t: t.nbytes)


def test_each_device_has_its_own_cache():
    gpu0, gpu1 = DeviceState(0), DeviceState(1)
    a, b = Texture(), Texture()
    layered_cache(gpu0).put("k", a)
    layered_cache(gpu1).put("k", b)
    assert layered_cache(gpu1) is not layered_cache(gpu0) and layered_cache(gpu0) is layered_cache(gpu0)
    assert layered_cache(gpu1).take("k") is b and layered_cache(gpu0).take("k") is a
    assert layered_cache(gpu0).take("k") is None


def test_a_gpu_keeps_layered_textures_of_a_sixteenth_of_its_memory():
    """An out-of-core run's two workers keep their slab textures (1 GiB each for 64
    slices of 2048 views of 2048 columns) from slab to slab on an 80 GB card; a
    small card (or a state without CUDA) keeps CACHE_BYTES."""
    slab = 64 * 2048 * 2048 * 4
    assert layered_bytes(80 << 30) == 5 << 30 and 2 * slab < layered_bytes(80 << 30)
    assert layered_bytes(141 * 10**9) == 141 * 10**9 // 16
    assert layered_bytes(2 << 30) == layered_bytes(0) == CACHE_BYTES and layered_bytes(8 << 30) == 2 * slab // 4
    assert layered_cache(DeviceState(0)).max_bytes >= CACHE_BYTES


def test_workers_sharing_a_key_each_get_their_texture_back():
    """Two workers of one GPU use textures of one shape at once: both are
    kept (freeing one would wait for the whole GPU), the most recent first."""
    c = cache(entries=4)
    a, b = Texture(), Texture()
    c.put("k", a)
    c.put("k", b)
    assert c.keys() == ["k", "k"] and c.retired == []
    assert c.take("k") is b and c.take("k") is a and c.take("k") is None


def test_a_full_cache_evicts_its_least_recently_used_texture():
    c = cache(entries=2)
    first, second, third = Texture(), Texture(), Texture()
    for key, tex in (("a", first), ("b", second), ("c", third)):
        c.put(key, tex)
    assert c.keys() == ["b", "c"] and c.retired == [first]


def test_an_evicted_texture_lives_until_its_last_use_is_done():
    c = cache(entries=1)
    old, new = Texture(), Texture()
    c.put("a", old)
    c.put("b", new)  # evicts old while its kernels may still run
    assert c.retired == [old]
    c.put("b", c.take("b"))  # its event not done: still referenced
    assert c.retired == [old]
    old.released.done = True
    c.put("b", c.take("b"))
    assert c.retired == []


def test_a_texture_over_the_budget_is_retired_not_cached():
    c = cache(max_bytes=100)
    big = Texture(nbytes=200)
    c.put("big", big)
    assert c.keys() == [] and c.retired == [big]


def test_clear_waits_for_every_texture():
    c = cache(entries=1)
    a, b = Texture(), Texture()
    c.put("a", a)
    c.put("b", b)  # a retired
    c.clear()
    assert all(t.released.waited for t in (a, b))
    assert c.keys() == [] and c.retired == []
