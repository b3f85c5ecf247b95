"""The Colab path, exercised here: a chapter's install cell run as Colab runs it, in a fresh
virtual environment that holds only what a Colab runtime brings (jax, numpy, pandas, matplotlib)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gmlm_lib.book import sources

ROOT = Path(__file__).resolve().parents[1]
COLAB_SET = ("jax", "jaxlib", "numpy", "pandas", "matplotlib")


def _pinned(names):
    text = (ROOT / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", text, flags=re.M))
    return [f"{n}=={pins[n]}" for n in names]


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd[:4]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_colab_install_cell_installs_the_run_commit_and_keeps_colab_jax(tmp_path):
    """The cell, with ``google.colab`` imported as on Colab, installs the library from a git URL at
    the pinned commit (here: this checkout's HEAD through ``GMLM_REPOSITORY=file://...``); every
    module then imports, and the jax and jaxlib that were there before are the ones left."""
    commit = _run(["git", "rev-parse", "HEAD"], cwd=ROOT).strip()
    venv = tmp_path / "colab"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    import importlib.util

    import pip  # Colab's pip is recent; the one venv bundles may be too old to parse a git+file URL with a commit

    # what the runtime brings, installed by uv where make install put uv in this environment (else by pip);
    # the install cell itself then runs Colab's way, with pip
    setup = ([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", py]
             if importlib.util.find_spec("uv") else [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"])
    _run([*setup, f"pip=={pip.__version__}", *_pinned(COLAB_SET)])
    versions = "from importlib.metadata import version; print(version('jax'), version('jaxlib'))"
    before = _run([py, "-c", versions]).split()
    cell = textwrap.dedent(f"""
        import sys, types
        sys.modules["google.colab"] = types.ModuleType("google.colab")  # what a Colab kernel has imported
        install_ref = {commit!r}
        exec({sources.COLAB_INSTALL_CELL!r})
    """)
    path = os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")])  # the venv first, git from the system
    _run([py, "-c", cell], env={"GMLM_REPOSITORY": f"file://{ROOT}", "PATH": path, "HOME": str(tmp_path)}, cwd=tmp_path)
    imports = textwrap.dedent("""
        import importlib, pkgutil, gmlm_lib
        names = [m.name for m in pkgutil.walk_packages(gmlm_lib.__path__, "gmlm_lib.")]
        for name in names:
            importlib.import_module(name)
        print(len(names), gmlm_lib.__file__)
    """)
    count, where = _run([py, "-c", imports], cwd=tmp_path).split()
    assert int(count) >= 30 and str(venv) in where, (count, where)  # installed from git, not this checkout
    assert _run([py, "-c", versions]).split() == before, "installing gmlm-book replaced Colab's jax/jaxlib"
