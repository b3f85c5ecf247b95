"""Progress bars: tqdm, off when the caller passes ``progress=False`` or when the ``TQDM_DISABLE``
environment variable is set (read at each call; the book's runner sets it, so the notebooks it
stores hold no progress bars). Passing ``disable=False`` to tqdm would override that variable."""

from __future__ import annotations

import os
import warnings

from tqdm import TqdmWarning

with warnings.catch_warnings():  # without ipywidgets tqdm.auto falls back to text bars; no need to say so
    warnings.simplefilter("ignore", TqdmWarning)
    from tqdm.auto import tqdm


def bar(iterable=None, *, progress: bool = True, **kwargs) -> tqdm:
    """``tqdm(iterable, **kwargs)``, disabled unless ``progress`` and ``TQDM_DISABLE`` is unset (or 0/false)."""
    off = not progress or os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")
    return tqdm(iterable, disable=off, **kwargs)
