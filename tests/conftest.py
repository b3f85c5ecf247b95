import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import os
import shutil
import tempfile
import types


# XLA's CPU backend tuned for compiling fast in the test session (inherited by the chapters' kernels and
# the subprocess tests): the tests' programs are small and each runs a few times, so compiling them, not
# running them, takes most of their time (in test_translation_models.py, single process on 2 cores: XLA's
# backend compile 49% of the tests' time, lowering to MLIR 17%, tracing 12%). Three settings: optimisation
# level 0 (LLVM's optimisation passes skipped); where this XLA still has them, its older elemental
# emitters for fused loops instead of its MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`:
# with jaxlib 0.10.2 on 2 cores the translation tests' programs compile in about 40% less time, and a
# training update runs about 30% slower); and one LLVM module a program instead of XLA's split into
# parts compiled on several threads (`--xla_cpu_parallel_codegen_split_count=1`: with two test workers
# the cores are busy anyway, and the split's parts cost more in all; with jaxlib 0.10.2, two processes
# side by side on 2 cores each compiling a 2+2-layer model's gradient 6 times took 10-25% less compile
# time, three paired trials). XLA aborts a process whose XLA_FLAGS names a flag it does not know (the
# newest jaxlib no longer knows the first of the two), so a child process asks first. The numbers the
# tests check do not depend on them (their tolerances hold either way); a user's runs keep XLA's
# defaults. Set any of these flags in XLA_FLAGS yourself to override it.
def _xla_knows(flag: str) -> bool:
    """Whether this process's XLA accepts ``flag`` (asked in a child process: an unknown one aborts it)."""
    import subprocess

    env = {**os.environ, "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu"}
    try:
        return subprocess.run([sys.executable, "-c", "import jax; jax.devices()"], env=env, capture_output=True,
                              timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _add_xla_flag(name: str, value: str, *, ask: bool = False) -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if name in flags or (ask and not _xla_knows(f"--{name}={value}")):
        return
    os.environ["XLA_FLAGS"] = (flags + f" --{name}={value}").strip()


_add_xla_flag("xla_backend_optimization_level", "0")
# the test workers (pytest-xdist) and the subprocess tests inherit the answer of the first process
if os.environ.setdefault("GMLM_TEST_ASKED_XLA_FLAGS", "0") == "0":
    _add_xla_flag("xla_cpu_use_fusion_emitters", "false", ask=True)
    _add_xla_flag("xla_cpu_parallel_codegen_split_count", "1", ask=True)
    os.environ["GMLM_TEST_ASKED_XLA_FLAGS"] = "1"

import jax
import pytest
from hypothesis import settings

# CI runs the property tests on a fixed, reproducible set of examples; locally they explore.
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)  # two test workers share the cores
if os.environ.get("CI"):
    settings.load_profile("ci")

# JAX's persistent compilation cache for this test session, set before anything imports JAX. The
# chapters' smoke runs (each in its own kernel) and the subprocess tests compile many of the same
# programs again; with the cache they reuse them (measured on 2 cores: the padir, stutter, ablations
# and masking_more smoke runs together 279 s without, 233 s with a cold cache). The cache starts
# empty in every session (as in CI) and is removed at its end; it is keyed by the program, the JAX
# version and the devices, so it changes no number. Set JAX_COMPILATION_CACHE_DIR yourself to keep one.
_JAX_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _JAX_CACHE = tempfile.mkdtemp(prefix="gmlm-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")  # small programs too: there are many
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")


def _loadgroup_can_group() -> bool:
    """Whether ``--dist loadgroup`` can group tests here: pytest-xdist (3.8 and older) tags each test
    marked ``xdist_group`` by rewriting the private ``_nodeid`` that ``Node.nodeid`` returned up to
    pytest 9.1; from pytest 9.2 ``nodeid`` reads another field and the tag is lost with nothing said
    (pytest-xdist issue 1386). This asks pytest's property the question xdist relies on."""
    from importlib.metadata import version

    from _pytest import nodes
    from packaging.version import Version  # a dependency of pytest

    if Version(version("pytest-xdist")) > Version("3.8.0"):
        return True  # a later pytest-xdist: trust it
    probe = types.SimpleNamespace(_nodeid="t@group", _id="t")
    try:
        return nodes.Node.nodeid.fget(probe) == "t@group"
    except (AttributeError, TypeError):  # the property reads fields the probe lacks: not the old mechanism
        return False


def pytest_configure(config):
    """``make test`` runs ``--dist loadgroup``: the tests marked ``xdist_group`` must share a worker (the
    book is built once for the build and browser tests, a module's run folder once). Where this
    pytest-xdist cannot group them on this pytest, stop before anything runs instead of spreading them."""
    if config.getoption("dist", "no") == "loadgroup" and not _loadgroup_can_group():
        raise pytest.UsageError(
            "--dist loadgroup cannot group the tests marked xdist_group with this pytest and pytest-xdist "
            "(pytest-xdist issue 1386: the group tag in node ids is lost from pytest 9.2). Install the pinned "
            "versions of requirements.txt (make install), or run without --dist loadgroup.")


def pytest_sessionfinish(session, exitstatus):
    if _JAX_CACHE:
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)


# The Ising tests check exact numerics in float64, which a program asks for (gmlm_lib.core.precision);
# every other test runs as a translation user would, with JAX's default float32.
X64_MODULES = {"test_errors", "test_fisher_markov", "test_ising", "test_mple", "test_parallel_limits", "test_samplers",
               "test_dependency_aware",
               "test_hostile_ising"}


@pytest.fixture(autouse=True, scope="module")  # module scope: it also covers the modules' fixtures
def _x64_for_exact_numerics(request):
    with jax.enable_x64(request.module.__name__.rsplit(".", 1)[-1] in X64_MODULES):
        yield


@pytest.fixture(autouse=True)
def _training_programs_forgotten():
    """Each test starts without the update and val programs an earlier test left in memory
    (gmlm_lib.mt.training shares them between configs in a process), so what a test counts as
    compiled does not depend on the order the tests ran in."""
    module = sys.modules.get("gmlm_lib.mt.training")
    if module is not None:
        module.clear_programs()
    yield


ROOT = pathlib.Path(__file__).resolve().parents[1]


def checkout_ignore(*more: str):
    """A ``shutil.copytree`` ``ignore`` that leaves out what this checkout's ``.gitignore`` names
    (run folders, virtual environments, caches: ``notebooks/runs`` of a full CPU run holds gigabytes)
    and the patterns ``more``, so a test's copy of the tree holds the project's files only."""
    names = [line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()]
    return shutil.ignore_patterns(*[n for n in names if n and not n.startswith("#") and "/" not in n], *more)


_BOOK_RECORD = ROOT / "_build" / "test-book-build.json"


def _clean_head() -> str | None:
    """The commit the sources are, when git sees no change it would commit (tracked, or untracked and
    not ignored); None for a tree with changes, or without git."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()

    try:
        head, status = git("rev-parse", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.SubprocessError):
        return None
    return None if status else head


@pytest.fixture(scope="session")
def built_book():
    """The README's build of the book (``make book``: warnings are errors, nitpicky), run once per
    test session into ``_build/``: the strict-build test checks its output, the browser test reads it.
    With ``GMLM_TEST_REUSE_BOOK=1`` (.ci/run's separate browser session, right after the main tests) a
    build that an earlier session made from these very sources is read instead of built again: a build
    of a clean tree records its result and the commit in ``_build/test-book-build.json``."""
    import json
    import subprocess

    cmd = [str(pathlib.Path(sys.executable).with_name("jupyter-book")), "build", str(ROOT), "--all", "--warningiserror",
           "--nitpick", "--keep-going"]
    html = ROOT / "_build" / "html"
    commit = _clean_head()
    if os.environ.get("GMLM_TEST_REUSE_BOOK") == "1" and commit and _BOOK_RECORD.is_file():
        record = json.loads(_BOOK_RECORD.read_text())
        if record.get("commit") == commit and (html / "index.html").is_file():
            return subprocess.CompletedProcess(cmd, record["returncode"], record["stdout"], record["stderr"]), html
    _BOOK_RECORD.unlink(missing_ok=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if commit and commit == _clean_head():  # a clean tree before and after: no source changed while it built
        _BOOK_RECORD.parent.mkdir(exist_ok=True)
        _BOOK_RECORD.write_text(json.dumps(dict(commit=commit, returncode=proc.returncode,
                                                stdout=proc.stdout[-20000:], stderr=proc.stderr[-20000:])))
    return proc, html
