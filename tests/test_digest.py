"""The record of an executed notebook (gmlm_lib.book.digest) that benchmarks/ keeps for runs the book does
not show: each code cell's seconds and printed outputs, tables as rows of text, figures left out, the first
error named; and its command line."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gmlm_lib.book import digest, sources

ROOT = Path(__file__).resolve().parents[1]
TABLE = ("<style>td {color: red}</style><table><thead><tr><th></th><th>BLEU</th><th>p99 ms</th></tr></thead>"
         "<tbody><tr><th>AR greedy</th><td>35.9</td><td>9.6\n ms</td></tr>"
         "<tr><th>PaDIR T=4</th><td>35.0</td><td>4.8 ms</td></tr></tbody></table>")


def _notebook(path: Path, *, failed: bool = False) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A chapter"),
                nbformat.v4.new_code_cell("steps = 4  # parameters"),
                nbformat.v4.new_code_cell("print('trained')\ntable"),
                nbformat.v4.new_code_cell("plt.plot(x)"),
                nbformat.v4.new_code_cell("")]
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="trained\n"),
                           nbformat.v4.new_output("display_data", data={"text/html": TABLE,
                                                                        "text/plain": "<Styler at 0x7f>"})]
    nb.cells[3].outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR",
                                                                        "text/plain": "<Figure size 640x480>"}),
                           nbformat.v4.new_output("execute_result", data={"text/plain": "[<Line2D>]"},
                                                  execution_count=1)]
    for cell, seconds in zip(nb.cells[1:4], (0.01, 12.5, 0.3)):
        cell.metadata["papermill"] = dict(duration=seconds)
    if failed:
        nb.cells[3].outputs.append(nbformat.v4.new_output(
            "error", ename="FloatingPointError", evalue="the loss became NaN at update 212", traceback=[]))
        del nb.cells[3].metadata["papermill"]["duration"]
    nb.metadata["gmlm"] = dict(profile="full", total_wall_time_s=None if failed else 13.2,
                               provenance=dict(gmlm_lib_commit="a" * 40))
    nb.metadata["gmlm"]["code_sha256"] = sources.code_hash(nb)
    nbformat.write(nb, path)
    return path


def test_cells_keep_seconds_printed_text_and_tables_as_rows_and_leave_figures_out(tmp_path):
    got = digest.digest(_notebook(tmp_path / "padir.ipynb"), note="notebooks/padir.md, full profile")
    assert (got["notebook"], got["commit"], got["profile"], got["wall_s"]) == \
        ("notebooks/padir.md, full profile", "a" * 40, "full", 13.2)
    assert got["code_matches"] is True and got["stopped"] is None
    assert [(c["cell"], c["first_line"], c["seconds"]) for c in got["cells"]] == [
        (1, "steps = 4  # parameters", 0.01), (2, "print('trained')", 12.5), (3, "plt.plot(x)", 0.3)]
    assert got["cells"][1]["outputs"] == ["trained\n", " | BLEU | p99 ms\nAR greedy | 35.9 | 9.6 ms\n"
                                                       "PaDIR T=4 | 35.0 | 4.8 ms\n"]
    assert got["cells"][2]["outputs"] == ["[<Line2D>]"]  # the figure itself has no text to keep


def test_a_run_that_stopped_names_its_error_and_an_edited_notebook_is_flagged(tmp_path):
    path = _notebook(tmp_path / "padir.ipynb", failed=True)
    got = digest.digest(path)
    assert got["notebook"] == "padir.ipynb" and got["wall_s"] is None
    assert got["stopped"] == "FloatingPointError: the loss became NaN at update 212"
    assert got["cells"][2]["seconds"] is None
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = "steps = 10"
    nbformat.write(nb, path)
    assert digest.digest(path)["code_matches"] is False


def test_a_missing_or_damaged_notebook_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"digest: .*nowhere.ipynb is not a file"):
        digest.digest(tmp_path / "nowhere.ipynb")
    (tmp_path / "bad.ipynb").write_text("{not json")
    with pytest.raises(ValueError, match=r"digest: .*bad.ipynb is not a readable notebook"):
        digest.digest(tmp_path / "bad.ipynb")


def test_the_command_line_prints_the_record_as_json(tmp_path):
    path = _notebook(tmp_path / "padir.ipynb")
    done = subprocess.run([sys.executable, "-m", "gmlm_lib.book", "records", "digest", str(path), "--note", "a rehearsal"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == digest.digest(path, note="a rehearsal")
    done = subprocess.run([sys.executable, "-m", "gmlm_lib.book", "records", "digest", str(tmp_path / "none.ipynb")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "digest: " in done.stderr
    assert "none.ipynb is not a file" in done.stderr
