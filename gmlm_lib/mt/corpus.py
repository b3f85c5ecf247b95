"""Aligned parallel corpora: Multi30k (local copy or download) and any pair of aligned files.

A corpus is a :class:`Parallel` pair of equally long lists of sentences. Files hold one sentence a
line, plain or gzipped (``.gz``). Where Multi30k is looked for, in order: the ``root`` argument,
the environment variable ``GMLM_MULTI30K_DIR``, a cache folder filled by downloading from the
public Multi30k repository (``download=True``). See ``data/README.md``.
"""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import os
import pathlib
import shutil
import tempfile
import urllib.error
import urllib.request
import zlib

ENV_VAR = "GMLM_MULTI30K_DIR"
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGS = ("en", "de", "fr")


@dataclasses.dataclass(frozen=True)
class Parallel:
    """``src[i]`` translates to ``tgt[i]``; ``name`` says where the pair came from."""

    src: list[str]
    tgt: list[str]
    name: str = ""

    def __len__(self) -> int:
        return len(self.src)

    def take(self, n: int) -> "Parallel":
        """The first ``n`` pairs (all of them when ``n`` is larger than the corpus)."""
        if n < 1:
            raise ValueError(f"take(n): n must be >= 1; got {n}.")
        return Parallel(self.src[:n], self.tgt[:n], f"{self.name}[:{n}]")


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file, plain or gzipped, without their line ends (``\\n`` or ``\\r\\n``).

    A UTF-8 byte-order mark at the start is dropped (it would otherwise stick to the first
    sentence's first word). Everything else that would silently change the corpus is an error
    naming the file and the line: bytes that are not UTF-8, a carriage return or other line
    separator inside a line (it would split one sentence in two for a reader that honours it),
    a gzip file that is cut short or corrupt, a NUL byte inside a line (no sentence holds one: it is
    a binary file read as text, or a damaged one)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"corpus file {str(path)!r} is a folder; pass one of the text files in it (one sentence "
                                "a line).")
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {str(path)!r} does not exist; check the path (or the "
                                f"{ENV_VAR} environment variable for Multi30k).")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise OSError(f"cannot read corpus file {path} ({err.strerror or err}); check its permissions.") from None
    try:
        raw = gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError, zlib.error) as err:
        raise ValueError(f"corpus file {path} is not a complete gzip file ({err}); download or copy it again.") from None
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for i, line in enumerate(lines, 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ValueError(f"corpus file {path}, line {i}: byte {err.start + 1} is not UTF-8 ({err.reason}); "
                             "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8).") from None
        text = text[:-1] if text.endswith("\r") else text
        if "\x00" in text:
            raise ValueError(f"corpus file {path}, line {i}: a NUL byte at character {text.index(chr(0)) + 1}; no "
                             "sentence holds one (a binary or damaged file): check the file.")
        inner = next((c for c in text if c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), None)
        if inner is not None:
            raise ValueError(f"corpus file {path}, line {i}: a line separator ({inner!r}) inside the line; one "
                             "sentence a line is expected: remove it or replace it with a space.")
        out.append(text)
    return out


def load_parallel(src_path: str | os.PathLike, tgt_path: str | os.PathLike, *, name: str = "") -> Parallel:
    """Two aligned files (one sentence a line, plain or ``.gz``) as a :class:`Parallel` corpus.

    This is the generic loader, e.g. for WMT14 files on Colab. Raises ``ValueError`` when the files
    have different numbers of lines, when the corpus is empty, when a line is empty on one side only
    (a sign of misalignment), or when a line is empty on both (a blank pair is no sentence to learn or
    score: drop such lines from both files)."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"misaligned corpus: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                         "the files must hold one sentence a line, aligned line by line.")
    if not src:
        raise ValueError(f"empty corpus: {src_path} and {tgt_path} have no lines.")
    for i, (s, t) in enumerate(zip(src, tgt)):
        if bool(s.strip()) != bool(t.strip()):
            raise ValueError(f"misaligned corpus: line {i + 1} is empty in "
                             f"{src_path if not s.strip() else tgt_path} but not in the other file.")
        if not s.strip():
            raise ValueError(f"blank pair: line {i + 1} of {src_path} and {tgt_path} is empty in both; drop such "
                             "lines from both files (an empty sentence is no pair to train on or score).")
    return Parallel(src, tgt, name or f"{pathlib.Path(src_path).name}->{pathlib.Path(tgt_path).name}")


def default_cache() -> pathlib.Path:
    """Where downloaded Multi30k files go: ``$XDG_CACHE_HOME/gmlm-book/multi30k`` (``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "gmlm-book" / "multi30k"


def download(files: list[str], dest: str | os.PathLike, *, base_url: str = MULTI30K_URL,
             timeout: float = 60.0) -> pathlib.Path:
    """Fetch ``base_url/<file>`` for each file into ``dest`` (kept files are not fetched again).

    Each file is written to a temporary name and renamed, so an interrupted download leaves no
    truncated file behind."""
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        target = dest / name
        if target.is_file():
            continue
        url = f"{base_url.rstrip('/')}/{name}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r, \
                    tempfile.NamedTemporaryFile(dir=dest, delete=False, suffix=".part") as tmp:
                shutil.copyfileobj(r, tmp)
        except urllib.error.URLError as e:
            raise RuntimeError(f"could not download {url} ({e}); set {ENV_VAR} to a folder that holds the "
                               "Multi30k files, or pass root=...") from e
        os.replace(tmp.name, target)
    return dest


def multi30k_dir(root: str | os.PathLike | None = None, *, download_missing: bool = True,
                 base_url: str = MULTI30K_URL, files: list[str] | None = None) -> pathlib.Path:
    """The folder holding Multi30k: ``root``, else ``$GMLM_MULTI30K_DIR``, else the download cache
    (filled from ``base_url`` with ``files`` when ``download_missing``)."""
    for where, label in ((root, "root"), (os.environ.get(ENV_VAR), ENV_VAR)):
        if where:
            path = pathlib.Path(where)
            if not path.is_dir():
                raise FileNotFoundError(f"{label} = {str(path)!r} is not a folder; point it at the folder "
                                        "holding train.en.gz, train.de.gz, ...")
            return path
    cache = default_cache()
    if download_missing:
        download(files or [], cache, base_url=base_url)
    return cache


def _file(folder: pathlib.Path, split: str, lang: str) -> pathlib.Path:
    for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
        if (folder / name).is_file():
            return folder / name
    return folder / f"{split}.{lang}.gz"  # read_lines names the missing file


def multi30k(split: str, src: str, tgt: str, *, root: str | os.PathLike | None = None,
             download_missing: bool = True, base_url: str = MULTI30K_URL) -> Parallel:
    """Multi30k task 1, ``split`` in ``train``/``val``/``test_2016_flickr``, ``src``/``tgt`` in en/de/fr.

    Returns e.g. 29,000 pairs for ``multi30k("train", "en", "de")``."""
    if split not in MULTI30K_SPLITS:
        raise ValueError(f"split must be one of {MULTI30K_SPLITS}; got {split!r}.")
    for arg, lang in (("src", src), ("tgt", tgt)):
        if lang not in MULTI30K_LANGS:
            raise ValueError(f"{arg} must be one of {MULTI30K_LANGS}; got {lang!r}.")
    if src == tgt:
        raise ValueError(f"src and tgt must differ; both are {src!r}.")
    files = [f"{split}.{lang}.gz" for lang in (src, tgt)]
    folder = multi30k_dir(root, download_missing=download_missing, base_url=base_url, files=files)
    return load_parallel(_file(folder, split, src), _file(folder, split, tgt), name=f"multi30k/{split}.{src}-{tgt}")
