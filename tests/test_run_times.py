"""The running page's table of run times (gmlm_lib.book.run_times): a chapter's run on one kind of
hardware replaces the earlier one there and keeps those on other hardware."""

import json
from pathlib import Path

import nbformat
import pytest

from gmlm_lib.book import run_times

ROOT = Path(__file__).resolve().parents[1]


def _meta(backend: str, wall_s: float, commit: str, started: str, profile: str = "full", **extra) -> dict:
    rec = dict(backend=backend, device_count=1, device_kind="NVIDIA H200" if backend == "gpu" else "cpu",
               cpu_count=16 if backend == "gpu" else 2, gmlm_lib_commit=commit, started_at=started,
               parameters=dict(preset=f"multi30k_{backend}"), **extra)
    return dict(profile=profile, total_wall_time_s=wall_s, provenance=rec)


def _book(tmp_path: Path, runs: dict) -> Path:
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n"
                                       + "".join(f"  - file: notebooks/{name}\n" for name in ("one", "two")))
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "book").mkdir()
    for name, meta in runs.items():
        nb = nbformat.v4.new_notebook()
        nb.metadata["gmlm"] = meta
        nbformat.write(nb, tmp_path / "notebooks" / f"{name}.ipynb")
    return tmp_path


def test_hardware_keys_and_entries():
    assert run_times.hardware_key(dict(backend="cpu", cpu_count=2)) == "2 CPU cores"
    assert run_times.hardware_key(dict(backend="gpu", device_count=1, device_kind="NVIDIA H100")) == "1 x NVIDIA H100"
    key, got = run_times.entry(_meta("gpu", 475.4, "a" * 40, "2026-11-27T21:42:47+00:00", compile_s=426.05))
    assert key == "1 x NVIDIA H200" and got == dict(wall_s=475.4, compile_s=426.05, compile_wall_s=None, programs=None,
                                                     commit="a" * 40, started_at="2026-11-27T21:42:47+00:00",
                                                     preset="multi30k_gpu")
    _, got = run_times.entry(_meta("gpu", 475.4, "a" * 40, "2026-11-27", compile_s=426.05, compile_wall_s=180.2))
    assert (got["compile_s"], got["compile_wall_s"]) == (426.05, 180.2)
    assert run_times.entry(_meta("cpu", 10.0, "a" * 40, "2026-11-27", profile="smoke")) is None
    assert run_times.entry({}) is None


def test_a_rerun_elsewhere_keeps_the_earlier_hardware_and_the_check_asks_for_make_provenance(tmp_path):
    root = _book(tmp_path, {"one": _meta("cpu", 5249.07, "b" * 40, "2026-11-25T19:22:55+00:00")})
    assert run_times.problems(root)  # nothing written yet
    run_times.write(root)
    assert run_times.problems(root) == []
    page = (root / run_times.PAGE).read_text()
    assert "| {doc}`../notebooks/one` | 87.5 min (`bbbbbbbbbbbb`, 2026-11-25) |" in page
    assert "notebooks/two" not in page  # never run anywhere: no row
    # the chapter moves to a GPU: its CPU run stays in the table beside the new one
    nb = nbformat.v4.new_notebook()
    nb.metadata["gmlm"] = _meta("gpu", 475.4, "c" * 40, "2026-11-27T21:42:47+00:00", compile_s=426.05)
    nbformat.write(nb, root / "notebooks" / "one.ipynb")
    assert run_times.problems(root) == [  # the store lacks the new run, and the page its cell
        f"{run_times.FILE} does not hold every chapter's committed run; run `make provenance`.",
        f"{run_times.PAGE} does not match the chapters' runs; run `make provenance`."]
    run_times.write(root)
    assert run_times.problems(root) == []
    stored = json.loads((root / run_times.FILE).read_text())
    assert list(stored["one"]) == ["2 CPU cores", "1 x NVIDIA H200"]
    assert stored["one"]["2 CPU cores"]["wall_s"] == 5249.07 and stored["one"]["1 x NVIDIA H200"]["wall_s"] == 475.4
    page = (root / run_times.PAGE).read_text()
    assert ("| {doc}`../notebooks/one` | 87.5 min (`bbbbbbbbbbbb`, 2026-11-25) | "
            "7.9 min (7.1 compiling, summed; `cccccccccccc`, 2026-11-27) |") in page  # no wall time recorded
    nb.metadata["gmlm"]["provenance"]["compile_wall_s"] = 180.2  # a run that recorded its wall time compiling
    nbformat.write(nb, root / "notebooks" / "one.ipynb")
    run_times.write(root)
    assert "| 7.9 min (3.0 compiling, 38%; `cccccccccccc`, 2026-11-27) |" in (root / run_times.PAGE).read_text()
    nb.metadata["gmlm"]["provenance"]["compilations"] = 1126  # and the programs it compiled
    nbformat.write(nb, root / "notebooks" / "one.ipynb")
    run_times.write(root)
    assert "| 7.9 min (3.0 compiling, 38%; 1,126 programs; `cccccccccccc`, 2026-11-27) |" in \
        (root / run_times.PAGE).read_text()
    # a rerun on the same hardware replaces that cell only
    nb.metadata["gmlm"] = _meta("gpu", 300.0, "d" * 40, "2026-11-28T10:00:00+00:00")
    nbformat.write(nb, root / "notebooks" / "one.ipynb")
    run_times.write(root)
    stored = json.loads((root / run_times.FILE).read_text())
    assert stored["one"]["1 x NVIDIA H200"]["commit"] == "d" * 40 and stored["one"]["2 CPU cores"]["commit"] == "b" * 40
    (root / run_times.PAGE).write_text(page)  # an old table
    assert any(str(run_times.PAGE) in p for p in run_times.problems(root))


def test_a_damaged_store_is_refused_by_name(tmp_path):
    root = _book(tmp_path, {})
    (root / run_times.FILE).write_text("{not json")
    with pytest.raises(ValueError, match="run_times.json is not valid JSON"):
        run_times.collect(root)
    (root / run_times.FILE).write_text("[]")
    with pytest.raises(ValueError, match=r"run_times.json must hold an object \(chapter -> hardware -> run\)"):
        run_times.collect(root)


def test_the_book_holds_every_committed_run_and_the_running_page_includes_the_table():
    assert run_times.problems(ROOT) == []
    assert "```{include} run_times.md" in (ROOT / "book" / "running.md").read_text()


def _executed(path: Path, meta: dict, *, code: str = "x = 1") -> Path:
    """An executed chapter notebook at ``path`` holding ``meta`` as its run, its code hash that of its cells."""
    from gmlm_lib.book import sources

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    nb.metadata["gmlm"] = dict(meta, code_sha256=sources.code_hash(nb))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_a_run_the_book_does_not_show_is_recorded_in_its_hardware_cell_and_bad_ones_are_refused(tmp_path):
    """A full run on a CPU of a chapter awaiting an accelerator run (make gpu-run's OUT/NAME.ipynb) goes into the table beside the
    committed GPU run, and the check stays clean; refused, each by name, with the store unchanged: a run on
    the committed notebook's hardware, an older run than the one held, a smoke run, a notebook whose outputs
    are not from its code, and a file that is no chapter."""
    (tmp_path / "book").mkdir()
    root = _book(tmp_path / "book", {"one": _meta("gpu", 475.4, "c" * 40, "2026-11-27T21:42:47+00:00")})
    run_times.write(root)
    out = tmp_path / "out"
    cpu = _executed(out / "one.ipynb", _meta("cpu", 2478.65, "e" * 40, "2026-12-04T06:50:13+00:00",
                                             compile_s=473.68, compile_wall_s=351.3))
    [(name, key, run)] = run_times.record(root, [cpu])
    assert (name, key, run["wall_s"], run["commit"]) == ("one", "2 CPU cores", 2478.65, "e" * 40)
    stored = json.loads((root / run_times.FILE).read_text())
    assert list(stored["one"]) == ["2 CPU cores", "1 x NVIDIA H200"]
    assert "| {doc}`../notebooks/one` | 41.3 min (5.9 compiling, 14%; `eeeeeeeeeeee`, 2026-12-04) |" in \
        (root / run_times.PAGE).read_text()
    assert run_times.problems(root) == []
    before = (root / run_times.FILE).read_text()

    def refused(path, words):
        with pytest.raises((ValueError, FileNotFoundError), match=words):
            run_times.record(root, path if isinstance(path, list) else [path])
        assert (root / run_times.FILE).read_text() == before

    refused(_executed(out / "gpu" / "one.ipynb", _meta("gpu", 300.0, "f" * 40, "2026-12-05")),
            r"notebooks/one.ipynb holds a full run on 1 x NVIDIA H200, and its run is that cell; .* promote it")
    refused(_executed(out / "old" / "one.ipynb", _meta("cpu", 100.0, "f" * 40, "2026-12-01T00:00:00+00:00")),
            r"the table holds a later run of one on 2 CPU cores \(started 2026-12-04T06:50:13\+00:00\)")
    refused(_executed(out / "smoke" / "one.ipynb", _meta("cpu", 9.0, "f" * 40, "2026-12-05", profile="smoke")),
            r"holds no full run whose outputs its code produced \(profile 'smoke'\)")
    edited = out / "edited" / "one.ipynb"
    _executed(edited, _meta("cpu", 9.0, "f" * 40, "2026-12-05"))
    nb = nbformat.read(edited, as_version=4)
    nb.cells[0].source = "x = 2"  # the code changed after the run: its outputs are not from this code
    nbformat.write(nb, edited)
    refused(edited, "holds no full run whose outputs its code produced")
    damaged = out / "damaged" / "one.ipynb"
    damaged.parent.mkdir()
    damaged.write_text('{"cells": 3}')
    refused(damaged, r"run times: .*damaged/one.ipynb is not a readable notebook")
    refused(out / "missing" / "one.ipynb", r"run times: .*missing/one.ipynb is not a file")
    refused(_executed(out / "three.ipynb", _meta("cpu", 9.0, "f" * 40, "2026-12-05")),
            r"three.ipynb is not an executed chapter \(NAME.ipynb of a chapter in _toc.yml\)")
    # one bad notebook among good ones: none is recorded; two runs for one cell: refused
    later = _executed(out / "new" / "one.ipynb", _meta("cpu", 60.0, "a" * 40, "2026-12-06"))
    refused([later, out / "smoke" / "one.ipynb"], "holds no full run")
    refused([later, later], r"more than one run given for one on 2 CPU cores")
    # a later run on that hardware replaces the earlier one
    run_times.record(root, [later])
    assert json.loads((root / run_times.FILE).read_text())["one"]["2 CPU cores"]["commit"] == "a" * 40


def test_the_times_command_records_runs_and_stops_on_a_bad_one_by_name(tmp_path):
    import subprocess
    import sys

    root = _book(tmp_path, {"one": _meta("gpu", 475.4, "c" * 40, "2026-11-27T21:42:47+00:00")})
    run_times.write(root)
    good = _executed(tmp_path / "out" / "one.ipynb", _meta("cpu", 5158.9, "e" * 40, "2026-12-04T02:46:48+00:00"))
    smoke = _executed(tmp_path / "smoke" / "one.ipynb", _meta("cpu", 9.0, "f" * 40, "2026-12-05", profile="smoke"))

    def times(*paths):
        return subprocess.run([sys.executable, "-m", "gmlm_lib.book", "records", "times", *map(str, paths)], cwd=root,
                              capture_output=True, text=True, timeout=120)

    done = times(good)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"one: 86.0 min on 2 CPU cores (commit eeeeeeeeeeee) -> {run_times.FILE} and "
                           f"{run_times.PAGE}\n")
    assert run_times.problems(root) == []
    done = times(smoke)
    assert done.returncode == 1 and "holds no full run" in done.stderr and str(smoke) in done.stderr
    assert run_times.problems(root) == [] and "86.0 min" in (root / run_times.PAGE).read_text()
