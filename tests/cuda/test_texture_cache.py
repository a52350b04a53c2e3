"""The texture caches' bookkeeping (leveret.cuda.texture._Cache) with stand-in
textures and events: no GPU needed."""
from __future__ import annotations

from leveret.cuda.texture import _Cache


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


def test_each_device_has_its_own_entries():
    c = cache()
    a, b = Texture(), Texture()
    c.put(0, "k", a)
    c.put(1, "k", b)
    assert c.take(1, "k") is b and c.take(0, "k") is a
    assert c.take(0, "k") is None


def test_workers_sharing_a_key_each_get_their_texture_back():
    """Two workers of one GPU use textures of one shape at once: both are
    kept (freeing one would wait for the whole GPU), the most recent first."""
    c = cache(entries=4)
    a, b = Texture(), Texture()
    c.put(0, "k", a)
    c.put(0, "k", b)
    assert c.keys(0) == ["k", "k"] and c.retired == []
    assert c.take(0, "k") is b and c.take(0, "k") is a and c.take(0, "k") is None


def test_a_full_device_evicts_only_its_own_textures():
    """GPU 0's third texture evicts GPU 0's oldest; GPU 1's entry stays."""
    c = cache(entries=2)
    other = Texture()
    c.put(1, "x", other)
    first, second, third = Texture(), Texture(), Texture()
    for key, tex in (("a", first), ("b", second), ("c", third)):
        c.put(0, key, tex)
    assert c.keys(0) == ["b", "c"] and c.keys(1) == ["x"]
    assert first in c.retired and other not in c.retired


def test_an_evicted_texture_lives_until_its_last_use_is_done():
    c = cache(entries=1)
    old, new = Texture(), Texture()
    c.put(0, "a", old)
    c.put(0, "b", new)                 # evicts old while its kernels may still run
    assert c.retired == [old]
    c.put(0, "b", c.take(0, "b"))      # its event not done: still referenced
    assert c.retired == [old]
    old.released.done = True
    c.put(0, "b", c.take(0, "b"))
    assert c.retired == []


def test_a_texture_over_the_budget_is_retired_not_cached():
    c = cache(max_bytes=100)
    big = Texture(nbytes=200)
    c.put(0, "big", big)
    assert c.keys(0) == [] and c.retired == [big]


def test_clear_waits_for_every_texture():
    c = cache(entries=1)
    a, b, d = Texture(), Texture(), Texture()
    c.put(0, "a", a)
    c.put(0, "b", b)   # a retired
    c.put(1, "d", d)
    c.clear()
    assert all(t.released.waited for t in (a, b, d))
    assert c.keys(0) == [] and c.keys(1) == [] and c.retired == []
