"""The library's layers, read from its imports (AST), and what importing it does to JAX.

Rules (``gmlm_lib/__init__.py``): nothing outside ``gmlm_lib/book/`` imports it; ``gmlm_lib/mt``
imports nothing from ``gmlm_lib.ising``; ``gmlm_lib/core`` imports neither domain; no two modules
import each other, directly or through others (an import circle, function-level imports included:
a newcomer reads the library bottom up, and a circle has no bottom); no module
changes JAX's global configuration when it is imported, so the translation models' dtypes and a
fixed-seed training step do not depend on which modules a program imported first.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys

import pytest

import gmlm_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIB = ROOT / "gmlm_lib"
MODULES = sorted(LIB.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, is_package: bool) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, at any depth (function-level imports
    count), fully qualified; ``from pkg import name`` counts as importing ``pkg.name`` too (it may be
    a submodule)."""
    package = module if is_package else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


RULES = [  # (importer prefix, imported prefix, why it is forbidden); the book is checked apart
    ("gmlm_lib.mt", "gmlm_lib.ising", "translation must not depend on the Ising side"),
    ("gmlm_lib.ising", "gmlm_lib.mt", "the Ising side must not depend on translation"),
    ("gmlm_lib.core", "gmlm_lib.ising", "the core must not depend on a domain package"),
    ("gmlm_lib.core", "gmlm_lib.mt", "the core must not depend on a domain package"),
]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(items) -> list[str]:
    """``items``: ``(module name, source, is_package)``; one message per forbidden import."""
    bad = []
    for module, source, is_package in items:
        for imp in sorted(_imports(source, module, is_package)):
            if _within(imp, "gmlm_lib.book") and not _within(module, "gmlm_lib.book"):
                bad.append(f"{module} imports {imp}: only gmlm_lib.book may import the book's tools")
            bad += [f"{module} imports {imp}: {why}" for src, dst, why in RULES if _within(module, src) and _within(imp, dst)]
    return bad


def _library():
    return [(_module_name(p), p.read_text(), p.name == "__init__.py") for p in MODULES]


def _circles(items) -> list[list[str]]:
    """The import circles among ``items`` (``(module name, source, is_package)``): each set of two or more
    modules that reach one another through their imports (a strongly connected component of the import
    graph, Tarjan's algorithm), sorted; an import of a name that is not a module of ``items`` is left out."""
    known = {module for module, _, _ in items}
    graph = {module: sorted(i for i in _imports(source, module, pkg) if i in known and i != module)
             for module, source, pkg in items}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _config_updates(path: pathlib.Path) -> list[int]:
    """Lines of ``path`` that call ``jax.config.update`` (or ``config.update``) at module level,
    i.e. outside any function or class body: those run at import."""
    tree = ast.parse(path.read_text())
    lines = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                    and "config" in ast.unparse(node.func.value)):
                lines.append(node.lineno)
    return lines


def test_the_layers_hold():
    assert _violations(_library()) == []


@pytest.mark.parametrize("module, line", [
    ("gmlm_lib.mt.corpus", "from gmlm_lib.ising import model"),
    ("gmlm_lib.mt.training", "from gmlm_lib.book import provenance"),
    ("gmlm_lib.mt.training", "from ..book import provenance"),
    ("gmlm_lib.core.timing", "import gmlm_lib.mt.training"),
    ("gmlm_lib.ising.fisher", "def f():\n    from gmlm_lib import mt"),
    ("gmlm_lib.core.records", "from gmlm_lib import book"),
])
def test_layer_check_catches_a_leak(module, line):
    assert _violations([(module, line + "\n", False)]), line


def test_no_import_circle():
    assert _circles(_library()) == []


def test_circle_check_catches_a_circle_through_a_function_level_import():
    items = [("gmlm_lib.mt.a", "from gmlm_lib.mt import b\n", False),
             ("gmlm_lib.mt.b", "def f():\n    from gmlm_lib.mt.c import g\n", False),
             ("gmlm_lib.mt.c", "import gmlm_lib.mt.a\n", False),
             ("gmlm_lib.mt.d", "from gmlm_lib.mt import a\nimport numpy\n", False)]
    assert _circles(items) == [["gmlm_lib.mt.a", "gmlm_lib.mt.b", "gmlm_lib.mt.c"]]
    assert _circles(items[:2] + items[3:]) == []


def test_no_module_changes_jax_config_at_import():
    found = {str(p.relative_to(ROOT)): lines for p in MODULES if (lines := _config_updates(p))}
    assert found == {}


def test_config_check_catches_an_update(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('import jax\n\njax.config.update("jax_enable_x64", True)\n\n\ndef f():\n    jax.config.update("x", 1)\n')
    assert _config_updates(bad) == [3]


def test_packages_list_their_modules():
    """Each package's ``__all__`` names exactly its modules (plus, for ising, the model's API), and
    each resolves."""
    for pkg in ("core", "ising", "mt"):
        module = __import__(f"gmlm_lib.{pkg}", fromlist=["__all__"])
        files = {p.stem for p in (LIB / pkg).glob("*.py") if p.stem != "__init__"}
        listed = set(module.__all__)
        assert files <= listed, (pkg, files - listed)
        if pkg != "ising":
            assert listed == files, (pkg, listed - files)
        for name in module.__all__:
            assert getattr(module, name) is not None
        # a misspelt module is an AttributeError, as for any module, not a silent None
        with pytest.raises(AttributeError, match=f"module 'gmlm_lib.{pkg}' has no attribute 'samplrs'"):
            getattr(module, "samplrs")
        assert not hasattr(module, "samplrs")


LAZY_DIR_SCRIPT = """
import importlib, json, sys
out = {}
for pkg in sys.argv[1].split(","):
    module = importlib.import_module(pkg)
    before = set(sys.modules)
    names = dir(module)
    out[pkg] = dict(names=names, imported=sorted(set(sys.modules) - before))
print(json.dumps(out))
"""


def test_dir_of_a_lazy_package_lists_its_modules_without_importing_them():
    """``dir(package)`` of a package with lazily imported modules (PEP 562, :mod:`gmlm_lib.core.lazy`)
    lists every module, imported or not, and the names the package itself defines: tab completion in
    a notebook shows ``ising.samplers`` before anything touched it. Listing imports nothing. Run in a
    fresh interpreter, where no module of the packages has been imported yet."""
    pkgs = ["gmlm_lib.core", "gmlm_lib.ising", "gmlm_lib.mt", "gmlm_lib.book.findings"]
    out = subprocess.run([sys.executable, "-c", LAZY_DIR_SCRIPT, ",".join(pkgs)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    for pkg in pkgs:
        names, module = seen[pkg]["names"], __import__(pkg, fromlist=["__all__"])
        assert set(module.__all__) <= set(names), (pkg, set(module.__all__) - set(names))
        assert "__name__" in names and "__getattr__" in names, pkg
        assert seen[pkg]["imported"] == [], (pkg, seen[pkg]["imported"])


def test_no_flat_module_names():
    """The library is imported by package (``from gmlm_lib.mt import training``), never by the
    flat names it had before it was split: ``gmlm_lib`` itself exports nothing else."""
    for path in [*ROOT.glob("notebooks/*.md"), *ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py"), *MODULES]:
        for line in path.read_text().splitlines():
            if line.strip().startswith("from gmlm_lib import"):
                names = {n.strip().split(" as ")[0] for n in line.split("import", 1)[1].strip(" ()").split(",")}
                assert names <= {"ising", "mt", "book", "core"}, (path.name, line)
    with pytest.raises(AttributeError):
        gmlm_lib.training  # noqa: B018


IMPORT_ORDER_SCRIPT = r"""
import importlib, json, sys
for name in sys.argv[1].split(","):
    importlib.import_module(name)
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from gmlm_lib.mt import seq2seq, training
cfg = seq2seq.ModelConfig(vocab=40, causal=False, d_model=16, heads=2, enc_layers=1, dec_layers=1, d_ff=32,
                          max_len=8, dropout=0.1)
tcfg = training.TrainConfig(kind="padir", model=cfg, steps=2, batch_tokens=16, warmup=1, buckets=(8,),
                            log_every=1, checkpoint_every=1)
model = seq2seq.build(cfg, 0)
graphdef, params = nnx.split(model)
dtypes = sorted({str(x.dtype) for x in jax.tree.leaves(params)})
rng = np.random.default_rng(0)
src = jnp.asarray(rng.integers(5, 40, size=(2, 6)), jnp.int32)
tgt = jnp.asarray(rng.integers(5, 40, size=(2, 6)), jnp.int32)
batch = dict(src=src, src_mask=jnp.ones_like(src, bool), tgt=tgt, tgt_mask=jnp.ones_like(tgt, bool))
enc, _ = model.encode(src, batch["src_mask"])
tx = training.optimizer(tcfg)
step = training.make_step(graphdef, tcfg)
losses = []
state = (params, tx.init(params))
for t in range(2):
    p, o, loss, _ = step(*state, batch, jax.random.key(t))
    state = (p, o)
    losses.append(float(loss).hex())
print(json.dumps({"x64": bool(jax.config.jax_enable_x64), "params": dtypes, "activations": str(enc.dtype),
                  "updated": sorted({str(x.dtype) for x in jax.tree.leaves(state[0])}), "losses": losses}))
"""


def _import_then_train(order: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", IMPORT_ORDER_SCRIPT, ",".join(order)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_import_order_does_not_change_translation_dtypes_or_loss():
    """Importing every module of the library, in several orders (the Ising side first, last, and
    interleaved), leaves x64 off, the translation model float32 and a fixed-seed loss bit-identical."""
    names = sorted(_module_name(p) for p in MODULES if "__main__" not in p.name)
    ising_first = sorted(names, key=lambda n: (not n.startswith("gmlm_lib.ising"), n))
    orders = [ising_first, ising_first[::-1], names[::2] + names[1::2]]
    results = [_import_then_train(order) for order in orders]
    assert results[0]["x64"] is False and results[0]["params"] == ["float32"] and results[0]["activations"] == "float32"
    assert all(r == results[0] for r in results[1:]), results


def test_exact_numerics_refuse_float32():
    """With x64 off (this module runs as a translation user would), the exact numerics raise an
    error that names the fix instead of computing in float32."""
    import numpy as np

    from gmlm_lib import ising
    from gmlm_lib.ising import mple, unmasking

    bare = ising.IsingModel(J=np.zeros((3, 3)), h=np.zeros(3))  # built without ising_model's own check

    for call, what in ((lambda: ising.ising_model(np.zeros((2, 2)), np.zeros(2)), "gmlm_lib.ising.model.ising_model"),
                       (lambda: ising.random_model(__import__("jax").random.key(0), 3, 1.0, 1.0),
                        "gmlm_lib.ising.model.random_model"),
                       (lambda: mple.fit_likelihood(np.ones((3, 2))), "exact enumeration (gmlm_lib.ising)"),
                       (lambda: mple.fit_pseudolikelihood(np.ones((3, 2)), np.eye(2, dtype=bool)[[0, 1, 0]]),
                        "gmlm_lib.ising.mple (fitting)"),
                       (lambda: ising.enumerate_states(3), "exact enumeration (gmlm_lib.ising)"),
                       (lambda: unmasking.families(__import__("jax").random.key(0), 3),
                        "gmlm_lib.ising.unmasking.families"),
                       (lambda: unmasking.exact_law(bare, unmasking.make_rule("random", 3, 2)),
                        "gmlm_lib.ising.unmasking.exact_law"),
                       (lambda: unmasking.mutual_information_sum(bare),
                        "gmlm_lib.ising.unmasking.mutual_information_sum")):
        with pytest.raises(RuntimeError) as err:  # each names itself: the first refusal on the way is its own
            call()
        assert re.match(re.escape(what) + r" computes exactly in float64, but JAX's 64-bit mode is off.*"
                        r"JAX_ENABLE_X64=1.*jax\.enable_x64\(True\)", str(err.value), re.S), str(err.value)


MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS: dict[str, str] = {}  # name -> why it is still longer (shrink it, then remove it here)


def _long_functions(root: pathlib.Path) -> dict[str, int]:
    import ast

    out = {}
    for path in sorted((root / "gmlm_lib").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    out[f"{path.relative_to(root)}::{node.name}"] = length
    return out


def test_no_function_is_longer_than_a_screen():
    """[The house issue] a newcomer reads a function on one screen: none in gmlm_lib over 80 lines but the
    listed ones, and each listed one is still long (else remove it from the list)."""
    found = _long_functions(ROOT)
    assert set(found) - set(LONG_FUNCTIONS) == set(), {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    assert set(LONG_FUNCTIONS) <= set(found), f"no longer over {MAX_FUNCTION_LINES} lines: {set(LONG_FUNCTIONS) - set(found)}"


def test_the_length_check_catches_a_long_function(tmp_path):
    (tmp_path / "gmlm_lib").mkdir()
    (tmp_path / "gmlm_lib" / "m.py").write_text("def f():\n" + "    x = 1\n" * 81)
    assert _long_functions(tmp_path) == {"gmlm_lib/m.py::f": 82}
