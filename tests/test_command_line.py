"""The book's command line (python -m gmlm_lib.book): each verb hands its arguments on, reports in one line,
names what it did, and refuses ambiguous parameters without a traceback."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from gmlm_lib.mt import runfolder


@pytest.mark.parametrize("args, words", [
    (["-p", "n", "3", "-p", "n", "4"], "-p n given more than once"),
    (["-p", "n", "[6"], "-p n '[6': the value is read as YAML"),
])
def test_the_command_line_refuses_ambiguous_parameters(args, words):
    done = subprocess.run([sys.executable, "-m", "gmlm_lib.book", "run", "smoke", "gmlm_ising_testbed", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and words in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_the_command_line_hands_batch_and_promote_their_arguments(capsys, monkeypatch, tmp_path):
    """`batch run` prepares the machine, then calls batch.run_batch with its chapters (the four translation
    chapters when none is named), profile, --out, overrides, resolved paths and the cache's size in bytes,
    returns its status and writes it to --status; `batch promote` calls batch.promote on its folder and names
    each promoted chapter (all replaced by stand-ins)."""
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import batch, sources

    root = sources.find_root(pathlib.Path(__file__).parent)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en.gz").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sources, "find_root", lambda: root)
    calls = []
    monkeypatch.setattr(batch, "prepare", lambda r, args: calls.append(("prepare", args.commit)))
    monkeypatch.setattr(batch, "run_batch", lambda *a, **kw: calls.append((a, kw)) or 7)
    monkeypatch.setattr(batch, "promote", lambda r, results: calls.append((r, results)) or ["padir", "stutter"])
    common = ["--commit", "c" * 40, "--data", str(data)]
    assert cli.main(["batch", "run", "--out", "o", *common, "--cache-out-mib", "15", "-p", "preset", "x",
                     "--status", "st"]) == 7
    assert calls[0] == ("prepare", "c" * 40) and (tmp_path / "st").read_text() == "7\n"
    (names, profile, out, overrides, given_root), kw = calls[1]
    assert names == list(sources.TRANSLATION_CHAPTERS) and profile == "full" and out == pathlib.Path("o")
    assert overrides == {"preset": "x"} and given_root == tmp_path
    assert kw["sizing_from"] is None and kw["cache_from"] is None and kw["cache_out_bytes"] == 15 * 2**20
    assert cli.main(["batch", "run", "padir", "--profile", "smoke", "--out", "o", *common,
                     "--sizing-from", "r.tar.gz"]) == 7
    assert calls[3][0][:2] == (["padir"], "smoke") and calls[3][1]["sizing_from"] == tmp_path / "r.tar.gz"
    assert cli.main(["batch", "promote", "gpu-out"]) == 0
    assert calls[4] == (root, pathlib.Path("gpu-out"))
    assert capsys.readouterr().out.splitlines() == ["promoted padir: notebooks/padir.ipynb",
                                                    "promoted stutter: notebooks/stutter.ipynb"]
    assert cli.main(["batch", "run", "--out", "o", "--commit", "c" * 40, "--data", str(tmp_path)]) == 2
    assert "DATA=folder holding Multi30k" in capsys.readouterr().err


def test_the_command_line_runs_check_sync_provenance_and_labels(capsys, monkeypatch):
    """Each maintenance command calls its function (stand-ins here) and reports; `check` exits 1 with
    each problem on stderr when there are problems, 0 without."""
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import checks, labels, sources

    root = sources.find_root(pathlib.Path(__file__).parent)
    monkeypatch.setattr(sources, "find_root", lambda: root)
    found = [["padir: stale"], []]
    monkeypatch.setattr(checks, "check_all", lambda r: found.pop(0))
    ahead = [{"padir": "d78eb771c4730000"}, {}]
    monkeypatch.setattr(checks, "awaiting_all", lambda r: ahead.pop(0))
    monkeypatch.setattr(checks, "sync", lambda r: [root / "notebooks" / "padir.ipynb"])
    monkeypatch.setattr(checks, "write_provenance_page", lambda r: root / "book" / "provenance.md")
    monkeypatch.setattr(labels, "write_page", lambda r: root / "book" / "labels.md")
    chapters = len(sources.toc_notebooks(root))
    assert cli.main(["check"]) == 1
    got = capsys.readouterr()
    assert got.err == "padir: stale\n" and got.out == (
        "padir: awaiting an accelerator run (notebooks/padir.md has moved ahead of its notebook, the full run of "
        f"d78eb771c473, which the book shows until that run is promoted)\n"
        f"check: {chapters} chapters, 1 problem(s), 1 awaiting an accelerator run.\n")
    assert cli.main(["check"]) == 0 and capsys.readouterr().out == f"check: {chapters} chapters, 0 problem(s).\n"
    assert [cli.main([c]) for c in ("sync", "provenance", "labels")] == [0, 0, 0]
    assert capsys.readouterr().out.splitlines() == ["updated notebooks/padir.ipynb", "wrote book/provenance.md",
                                                    "wrote book/labels.md"]


def test_the_command_line_reports_a_batchs_compilations_by_chapter_process(capsys, tmp_path):
    """`records compiles` reads a compile log, or the run-records.tar.gz that holds one, and prints a line a
    process: two programs side by side in [0, 10] and [5, 12] s are 17 s summed, 12 s of wall time. A
    file that logs nothing, an archive without the log and a damaged archive each stop with one line."""
    import tarfile

    from gmlm_lib.book import __main__ as cli

    log = tmp_path / "compiles.tsv"
    log.write_text("1795000010.0\t7\tjit(step)\t10.0\n1795000012.0\t7\tjit(val)\t7.0\nnot a line\n"
                   "1795000100.0\t9\tjit(f)\t1.0\n")
    records = tmp_path / "run-records.tar.gz"
    with tarfile.open(records, "w:gz") as tar:
        tar.add(log, arcname="compiles.tsv")
    for path in (log, records):
        assert cli.main(["records", "compiles", str(path)]) == 0
        assert capsys.readouterr().out.splitlines() == [
            "pid 7: 2 programs, 17.0 s summed, 12.0 s of wall time, 2026-11-18 11:06:40 to 2026-11-18 11:06:52 UTC",
            "pid 9: 1 program, 1.0 s summed, 1.0 s of wall time, 2026-11-18 11:08:19 to 2026-11-18 11:08:20 UTC"]
    empty = tmp_path / "empty.tsv"
    empty.write_text("not a line\n")
    without = tmp_path / "old-records.tar.gz"
    with tarfile.open(without, "w:gz") as tar:
        tar.add(empty, arcname="runs.json")
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(b"not gzip")
    for path, why in [(empty, "logs no compilation"), (without, "holds no compiles.tsv"),
                      (damaged, "is not a readable .tar.gz")]:
        assert cli.main(["records", "compiles", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: ValueError: {path} {why}") and err.count("\n") == 1


def test_the_command_line_stops_with_one_line(capsys, monkeypatch):
    import errno

    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import sources

    monkeypatch.chdir(sources.find_root(pathlib.Path(__file__).parent))
    assert cli.main(["run", "smoke", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: FileNotFoundError: 'nope' is not a chapter of the book") and err.count("\n") == 1
    assert cli.main(["run", "smoke", "gmlm_ising_testbed", "-p", "bogus", "3"]) == 1
    assert capsys.readouterr().err.startswith('error: KeyError: unknown parameter(s) [\'bogus\']')
    full = OSError(errno.ENOSPC, "No space left on device", "/book/_build/x.ipynb")
    assert cli.describe(full) == ("No space left on device (/book/_build/x.ipynb): free disk space and run again; "
                                  "nothing committed was replaced (a run writes its notebook only once every cell has "
                                  "succeeded).")
    assert cli.describe(runfolder.RunFolderError("run folder /r does not exist; pass ...")) == \
        "RunFolderError: run folder /r does not exist; pass ..."
    # a system error without advice keeps its whole message (not its first argument, the errno)
    assert cli.describe(OSError(errno.EIO, "Input/output error", "/x")) == "OSError: [Errno 5] Input/output error: '/x'"
    assert cli.describe(KeyError("padir")) == "KeyError: padir"
    with pytest.raises(SystemExit) as stop:  # nothing to run: a usage error (status 2), not a silent success
        cli.main(["run", "smoke"])
    assert stop.value.code == 2 and "name at least one notebook, or pass --all" in capsys.readouterr().err
    monkeypatch.setenv("GMLM_TRACEBACK", "1")  # the whole traceback, for debugging the tools
    with pytest.raises(FileNotFoundError, match="'nope' is not a chapter of the book"):
        cli.main(["run", "smoke", "nope"])


def test_the_command_line_names_each_finished_run_and_where_it_went(capsys, monkeypatch):
    from gmlm_lib.book import __main__ as cli
    from gmlm_lib.book import runner, sources

    monkeypatch.chdir(sources.find_root(pathlib.Path(__file__).parent))
    ran = []
    monkeypatch.setattr(runner, "run_notebook", lambda name, profile, overrides, root: ran.append(
        (name, profile, overrides)) or {"total_wall_time_s": 12.34})
    assert cli.main(["run", "smoke", "masking_more", "padir", "-p", "seed", "3"]) == 0
    assert ran == [("masking_more", "smoke", {"seed": 3}), ("padir", "smoke", {"seed": 3})]
    assert capsys.readouterr().out.splitlines() == [
        "masking_more: smoke run finished in 12.3 s -> _build/smoke/masking_more.ipynb",
        "padir: smoke run finished in 12.3 s -> _build/smoke/padir.ipynb"]
