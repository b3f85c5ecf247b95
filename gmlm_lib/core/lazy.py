"""Lazy submodules for the packages' ``__init__``: ``gmlm_lib.ising.samplers`` is imported on
first use, so importing a package does not pull in every dependency of every topic (scipy,
optax, flax) when one module is wanted."""

from __future__ import annotations

import importlib


def attach(package: str, submodules: tuple[str, ...]):
    """``(__getattr__, __dir__)`` for ``package`` that import ``package.NAME`` on first access
    of any NAME in ``submodules`` (PEP 562), as scientific Python's ``lazy_loader`` does."""

    def __getattr__(name: str):
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(submodules) | set(importlib.import_module(package).__dict__))

    return __getattr__, __dir__
