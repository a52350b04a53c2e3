"""A small base class for immutable geometry objects."""

from __future__ import annotations

import numpy as np


class Frozen:
    """Attributes are set once in ``__init__`` (via ``_set``) and never again.

    Arrays held by a Frozen object are read-only, so a geometry can be shared
    between threads, cached as a key, and passed around without defensive
    copies.
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({name}=...)")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _key(self) -> tuple:
        out = []
        for f in self._fields:
            v = getattr(self, f)
            out.append(v.tobytes() if isinstance(v, np.ndarray) else v)
        return tuple(out)

    def __eq__(self, other):
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self).__name__, self._key()))

    def __reduce__(self):
        # Rebuilt through the constructor (no __setattr__), so geometries pickle:
        # Dask and multiprocessing send them to other processes.
        return (_rebuild, (type(self), {f: getattr(self, f) for f in self._fields}))

    def replace(self, **changes):
        """A copy with some constructor arguments changed."""
        kwargs = {f: getattr(self, f) for f in self._fields}
        unknown = set(changes) - set(kwargs)
        if unknown:
            raise ValueError(f"replace: unknown argument(s) {sorted(unknown)}; expected some of {list(self._fields)}")
        kwargs.update(changes)
        return type(self)(**kwargs)


def _rebuild(cls, kwargs: dict):
    """``cls(**kwargs)``: how a pickled Frozen object is made again."""
    return cls(**kwargs)
