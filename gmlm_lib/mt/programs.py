"""The compiled programs of the translation library, kept by structure: one design for the decoders
(:mod:`gmlm_lib.mt.decoding`) and the training updates (:mod:`gmlm_lib.mt.training`).

Both compile a jitted function once per model structure (an nnx graphdef), static setting and input
shape, and call it many times: a batch-1 translation costs about a millisecond, an update a few, so
the lookup of the compiled function must cost far less than either. Three pieces:

- :func:`graph_key`: a small integer for a graphdef, the same for equal graphdefs, found by the
  graphdef object's identity (hashing an nnx graphdef costs on the order of a millisecond; it is
  hashed once per object);
- :class:`Programs`: jitted functions by key, built once, thread-safe (decoders are compiled from
  several threads at once, :func:`gmlm_lib.core.timing.compile_in_parallel`), with at most ``kept``
  of them when bounded (the least recently used dropped);
- :class:`FlatJit`: a function of a pytree jitted on the flat list of the pytree's leaves, one
  jitted function per tree structure. An nnx ``State`` is a pytree whose nodes JAX flattens and
  rebuilds in Python at every call (milliseconds for a Transformer's parameters), while a list of
  arrays takes JAX's C++ path.
"""

from __future__ import annotations

import collections
import threading
from typing import Callable

import jax

__all__ = ["graph_key", "Programs", "FlatJit"]

_GRAPHS: dict[int, tuple] = {}  # id(graphdef) -> (graphdef, its key); the graphdef kept alive, so its id is not reused
_DISTINCT: dict = {}  # graphdef -> key, one per equal graphdefs
_GRAPH_LOCK = threading.Lock()


def graph_key(graphdef) -> int:
    """A key for ``graphdef``: equal graphdefs (models of one structure) get the same one, so they share
    their programs; found by identity, the graphdef hashed once."""
    hit = _GRAPHS.get(id(graphdef))
    if hit is None or hit[0] is not graphdef:
        with _GRAPH_LOCK:
            hit = _GRAPHS[id(graphdef)] = (graphdef, _DISTINCT.setdefault(graphdef, len(_DISTINCT)))
    return hit[1]


class Programs:
    """Jitted functions by key (:meth:`get`), each built once; with ``kept`` at most that many, the least
    recently used dropped first (a sweep over many settings then holds one phase's programs, not all)."""

    def __init__(self, kept: int | None = None):
        self.kept = kept
        self._items: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, build: Callable[[], object]):
        """The function kept for ``key``, else ``build()``'s, kept. Threads asking for one key at once get
        one function (so the programs they compile are shared)."""
        f = self._items.get(key)
        if f is None:
            with self._lock:
                f = self._items.get(key)
                if f is None:
                    f = self._items[key] = build()
        if self.kept is not None:
            with self._lock:
                self._items.move_to_end(key)
                while len(self._items) > self.kept:
                    self._items.popitem(last=False)
        return f

    def keys(self) -> list:
        """The keys kept, least recently used first."""
        return list(self._items)

    def values(self) -> list:
        """The functions kept, in the order of :meth:`keys`."""
        return list(self._items.values())

    def items(self) -> list:
        """``(key, function)`` pairs, in the order of :meth:`keys`."""
        return list(self._items.items())

    def clear(self) -> int:
        """Forget every function; returns how many were kept."""
        with self._lock:
            held = len(self._items)
            self._items.clear()
        return held

    def __len__(self) -> int:
        return len(self._items)


class FlatJit:
    """``fn(tree, *args)`` jitted on the flat leaves of ``tree``: :meth:`for_tree` gives, for a tree
    structure, the jitted ``(leaves, *args) -> fn(tree, *args)``, one per structure (found by the
    structure object's identity, else by equality); calling a ``FlatJit`` with a tree flattens it and
    calls that. With ``flat_out`` the first output is a tree of the input's structure, returned as its
    leaves (what a training update feeds back in: its state), a different structure refused at trace
    time. ``jit_kwargs`` go to ``jax.jit`` (``donate_argnums``, ``out_shardings``)."""

    def __init__(self, fn: Callable, *, name: str | None = None, flat_out: bool = False, **jit_kwargs):
        self.fn, self.flat_out, self.jit_kwargs = fn, flat_out, jit_kwargs
        self.name = name or getattr(fn, "__name__", "fn")
        self._by_id: dict[int, tuple] = {}  # id(treedef) -> (treedef, jitted); the treedef kept alive
        self._lock = threading.Lock()

    def for_tree(self, treedef) -> Callable:
        """The jitted ``(leaves, *args)`` for trees of structure ``treedef``, made on first use (thread-safe)."""
        hit = self._by_id.get(id(treedef))
        if hit is None or hit[0] is not treedef:
            with self._lock:
                hit = self._by_id.get(id(treedef))
                if hit is None or hit[0] is not treedef:
                    same = next((f for t, f in self._by_id.values() if t == treedef), None)  # an equal structure
                    hit = self._by_id[id(treedef)] = (treedef, same or self._jit(treedef))
        return hit[1]

    def _jit(self, treedef) -> Callable:
        fn, flat_out = self.fn, self.flat_out

        def flat(leaves, *args):
            out = fn(jax.tree.unflatten(treedef, leaves), *args)
            if not flat_out:
                return out
            tree, *rest = out
            leaves_out, out_tree = jax.tree.flatten(tree)
            if out_tree != treedef:  # at trace time: the caller feeds the leaves back in
                raise ValueError(f"{self.name} returned a state of another structure ({out_tree}) than it was given "
                                 f"({treedef}); an optimiser must keep its state's structure.")
            return (leaves_out, *rest)

        flat.__name__ = flat.__qualname__ = self.name  # the function's name in logs and the compilation cache
        return jax.jit(flat, **self.jit_kwargs)

    def __call__(self, tree, *args):
        leaves, treedef = jax.tree.flatten(tree)
        return self.for_tree(treedef)(leaves, *args)

    def lower(self, tree, *args):
        """The program a call with ``tree`` and ``args`` runs, lowered (``jax.stages.Lowered``)."""
        leaves, treedef = jax.tree.flatten(tree)
        return self.for_tree(treedef).lower(leaves, *args)

    def _cache_size(self) -> int:
        """Programs compiled, over every structure (equal structures share one jitted function)."""
        return sum(f._cache_size() for f in {id(f): f for _, f in self._by_id.values()}.values())
