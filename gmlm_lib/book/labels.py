"""The paper-label index: every numbered result of the paper -> the library -> the tests -> the book.

Generated, never edited by hand (``python -m gmlm_lib.book labels`` writes ``book/labels.md``;
``make check`` and the tests fail when it is out of date). Its rows come from tags:

- a public function, class or method of ``gmlm_lib`` implements a label when its docstring
  carries it in square brackets, e.g. ``[Definition 2]``, ``[Definitions 4-6, 8]``, ``[Props. 3-4]``;
- a test checks it when its docstring carries it the same way;
- a chapter states it in a ``prf`` box whose title carries it (the box's ``:label:`` is linked),
  and reproduces a figure or table of the paper in a section whose heading says
  ``[paper Figure N]`` or ``[paper Table N]``; ``[paper Table N, on SETTING]`` marks an analogue in
  another setting (Multi30k in place of the paper's WMT), which the index calls so.

:data:`PAPER_LABELS` is the paper's inventory (Sections 2-3 and the appendices), each title in the
paper's words; a label the book does not treat has its reason in :data:`NOT_TREATED`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gmlm_lib.book import sources

PAGE = Path("book") / "labels.md"

KINDS = {"Definition": "Definitions", "Assumption": "Assumptions", "Theorem": "Theorems", "Lemma": "Lemmas",
         "Proposition": "Propositions", "Corollary": "Corollaries", "Figure": "Figures", "Table": "Tables"}
_ALIASES = {"Def.": "Definition", "Defs.": "Definition", "Prop.": "Proposition", "Props.": "Proposition",
            "Thm.": "Theorem", "Lem.": "Lemma", "Cor.": "Corollary"}
for _kind, _plural in KINDS.items():
    _ALIASES[_kind] = _ALIASES[_plural] = _kind
_WORD = "|".join(re.escape(w) for w in sorted(_ALIASES, key=len, reverse=True))
_ITEM = re.compile(rf"(?<![\w.])({_WORD})\s+(\d+(?:\s*[-–]\s*\d+)?(?:\s*,\s*\d+(?:\s*[-–]\s*\d+)?)*)")
_TAG = re.compile(r"\[([^\[\]]+)\]")
#: an unnumbered result named by its appendix: "Lemma, Appendix A", "Prop. (App. C.3)", "Propositions ...; Apps. F-H"
_UNNUMBERED = re.compile(r"(?<![\w.])(Lemmas?|Props?\.|Propositions?|Corollary|Corollaries)(?!\s*\d)")
_APPENDIX = re.compile(r"\bApp(?:endix|endices|s?\.)\s+([A-K](?:\.\d)?)(?:\s*[-–]\s*([A-K]))?")

PAPER_LABELS: dict[str, str] = {
    "Definition 1": "Maximum likelihood estimator (MLE)",
    "Definition 2": "Weighted maximum pseudolikelihood estimator (MPLE)",
    "Definition 3": "k-pseudolikelihood (Huang & Ogata, 2002)",
    "Definition 4": "Dirichlet form",
    "Definition 5": "Poincaré inequality",
    "Definition 6": "Weighted block dynamics",
    "Definition 7": "Adaptively-weighted MPLE",
    "Definition 8": "Adaptively-weighted block dynamics",
    "Definition 9": "Block approximate tensorization of entropy (Caputo & Parisi, 2021)",
    "Definition 10": "k-Gibbs sampler (Eq. 3)",
    "Definition 11": "Independent parallel sampler (Eq. 4)",
    "Definition 12": "Ising models (Eq. 5)",
    "Theorem 1": "Asymptotic variance under a Poincaré inequality (sample efficiency is mixing)",
    "Theorem 2": "Masking more is (statistically) better",
    "Theorem 3": "Asymptotic variance of adaptively-weighted MPLE under a Poincaré inequality",
    "Theorem 4": "Generalization bound for learning the joint distribution",
    "Theorem 5": "Van der Vaart (2000), Theorem 5.23, as cited in Lemma 9",
    "Lemma 1": "Asymptotic normality (Van der Vaart, 2000)",
    "Lemma 2": "The mask can carry information: adaptive conditionals differ from plain ones",
    "Lemma 3": "The conditional given an adaptive mask is proportional to p(x) w(S∣x)",
    "Lemma 4": "Hoeffding's inequality",
    "Lemma 5": "Point-wise generalization bound for learning conditional distributions",
    "Lemma 6": "Empirical PMF converges to population PMF",
    "Lemma 7": "Universal approximation by Transformers, informal (Yun et al., 2020)",
    "Lemma 8": "Transformers can simulate parallel solution to automata (Liu et al., 2023)",
    "Lemma 9": "Regularity conditions for asymptotic normality of M-estimators",
    "Proposition 1": "Excess pseudolikelihood loss bounds KL through approximate tensorization (App. D, Step 1)",
    "Proposition 2": "Bound on KL under bounded conditionals (App. D)",
    "Proposition 3": "Deterministic transitions are implementable by a parallel decoder (Section 2.4.1 formalized)",
    "Proposition 4": "Transformer transitions are product distributions given the state (Section 2.4.1 formalized)",
    "Corollary 1": "Point-wise generalization bound, special case",
    "Corollary 2": "Uniform convergence generalization bound for learning conditional distributions",
    "Assumption 1": "Finite gradient and Hessian",
    "Assumption 2": "Realizability",
    "Assumption 3": "Support margin",
    "Assumption 4": "Covering bound and Lipschitzness",
    "Assumption 5": "Strongly ferromagnetic Ising model",
    "Assumption 6": "Strong interactions in Ising model",
    "Assumption 7": "Large coordinate set per update",
    "Lemma (App. A)": "Generalized information matrix equality",
    "Lemma (App. C.2)": "Generalized information matrix equality, adaptive masking",
    "Proposition (App. C.3)": "Dirichlet form for adaptive weighted block dynamics",
    "Proposition (App. E)": "Modes of the strongly ferromagnetic Ising model",
    "Proposition (App. F)": "k-Gibbs sampler can reach the mode fast",
    "Proposition (App. G)": "Independent parallel sampling stuck in bad samples",
    "Corollary (App. H)": "Separation between k-Gibbs sampler and independent parallel sampling",
    "Proposition (App. K)": "Fitting an Ising model over the conditional distributions is convex",
    "Figure 1": "k-MPLE parameter error against k on a random Ising model (Section 3.1, App. L.6)",
    "Figure 2": "The same on a peaky two-mode ground truth (App. L.6)",
    "Figure 3": "k-Gibbs reaches the heavy mode, independent parallel is stuck (App. L.7)",
    "Table 1": "BLEU of PaDIR against autoregressive baselines, on all three language pairs: WMT14 DE-EN and EN-DE, "
               "WMT16 RO-EN and EN-RO, WMT17 ZH-EN and EN-ZH (App. L.4)",
    "Table 2": "BLEU of PaDIR against the non-autoregressive CMLM (Mask-Predict), DisCo and SUNDAE, on the same three "
               "language pairs (App. L.4)",
    "Table 3": "BLEURT of PaDIR against autoregressive baselines, on the same three language pairs (App. L.4)",
    "Table 4": "Stutter against decoder self-attention of adjacent positions (Section 3.4, App. L.5)",
    "Table 5": "Stutter against cross-attention similarity of adjacent positions (Section 3.4, App. L.5)",
}
"""Every numbered label of the paper (Sections 2-3 and the appendices), with the paper's title, and the results of
the appendices the paper states without a number, keyed by their appendix."""

APPENDIX_RESULTS = {"A": "Lemma (App. A)", "C.2": "Lemma (App. C.2)", "C.3": "Proposition (App. C.3)",
                    "E": "Proposition (App. E)", "F": "Proposition (App. F)", "G": "Proposition (App. G)",
                    "H": "Corollary (App. H)", "K": "Proposition (App. K)"}
"""The appendix of each unnumbered result: a tag such as ``[Lemma, Appendix A]`` or ``[Propositions; Apps. F-H]``
names the results of those appendices."""

ASSUMPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Assumption 1": ("the gradient and the Hessian of the per-pair loss exist and are finite at every parameter",
                     ("masking_more", "efficiency_is_mixing", "adaptive_masking")),
    "Assumption 2": ("realizability: the data come from the model class, p* = p_θ* for some θ*",
                     ("masking_more", "efficiency_is_mixing", "adaptive_masking")),
    "Assumption 3": ("support margin: every conditional probability the learned model gives, where positive, is at "
                     "least a constant", ("conditionals_to_joint",)),
    "Assumption 4": ("covering bound and Lipschitzness: the log-conditionals are Lipschitz in θ and the parameter set "
                     "has a finite cover at every scale", ("conditionals_to_joint",)),
    "Assumption 5": ("on the clique-plus-independent model (Eq. 6), the two modes carry all but a small share of the "
                     "mass and the heavy mode most of it", ("gmlm_ising_testbed", "kgibbs_vs_parallel")),
    "Assumption 6": ("on the same model, the clique coupling J is strong against the field h and the clique size c",
                     ("kgibbs_vs_parallel",)),
    "Assumption 7": ("k-Gibbs updates a large set: k is large with respect to the clique size c",
                     ("kgibbs_vs_parallel",)),
}
"""Each assumption in words, and the chapters whose results rest on it. The words are the book's: the formulas of
the paper's assumptions did not survive the text the book was built from, so each states the condition's meaning,
not its constants."""

RECONSTRUCTED = {
    "Theorem 1": "its number is the book's: the paper's text states this theorem without one (it is the first of its "
                 "theorems, between Definition 6 and Definition 7)",
    "Theorem 3": "its number is the book's: the paper's text states this theorem without one (the third of its "
                 "theorems, the adaptive form of Theorem 1)",
}
"""Labels whose number the book reconstructed from the order of the paper's results, and how; the index and the
chapters' boxes say so beside the number."""

NOT_TREATED: dict[str, str] = {
    "Theorem 5": "The paper's text has no result of its own numbered Theorem 5; its one mention is Van der Vaart's "
                 "Theorem 5.23, the source of Lemma 9.",
    "Lemma 4": "A textbook concentration inequality used inside the proof of Theorem 4; the book checks the theorem's "
               "key step exactly instead of its finite-sample constants.",
    "Lemma 5": "A step of the finite-sample proof of Theorem 4 whose constants this book does not reproduce.",
    "Lemma 6": "A step of the finite-sample proof of Theorem 4 (empirical frequencies converge); standard.",
    "Lemma 7": "An expressivity result of Yun et al. (2020) the paper cites; the book trains a Transformer to one "
               "parallel step instead (Proposition 4).",
    "Lemma 8": "An expressivity result of Liu et al. (2023) the paper cites; not a claim the book can compute.",
    "Lemma 9": "Regularity conditions of Van der Vaart's theorem; the book checks their conclusion (Lemma 1) on "
               "the Ising models it uses.",
    "Proposition 2": "A bound inside the proof of Theorem 4 whose constants this book does not reproduce.",
    "Corollary 1": "A step of the finite-sample proof of Theorem 4 whose constants this book does not reproduce.",
    "Corollary 2": "A step of the finite-sample proof of Theorem 4 whose constants this book does not reproduce.",
    "Table 3": "BLEURT scores translations with a learned checkpoint, which the book's offline runs cannot load; "
               "the PaDIR chapter reports chrF beside BLEU instead.",
}
"""Labels the book does not treat, and why."""


_UNMASK = "gmlm_lib.ising.unmasking"
_T = "tests/test_unmasking.py::"
_BRUTE, _MC = _T + "test_exact_law_matches_brute_force", _T + "test_monte_carlo_matches_exact_law"

BEYOND: dict[str, dict] = {
    "Dependency-aware parallel decoding (this book)": dict(
        box="def-dependency-aware",
        code=["gmlm_lib.ising.samplers.dependency_aware", "gmlm_lib.core.unmasking.dependency", "gmlm_lib.mt.decoding.StrategyOptions"],
        tests=["tests/test_dependency_aware.py::test_uncoupled_groups_make_an_exact_gibbs_block",
               "tests/test_dependency_aware.py::test_step_samples_the_kernel", _BRUTE, _MC,
               "tests/test_translation_models.py::test_dependency_aware_commits_by_confidence_and_dependency"]),
    "Confidence threshold and factor rules (Fast-dLLM, Wu et al. 2025)": dict(
        box="def-unmasking-rules", code=["gmlm_lib.core.unmasking.threshold", "gmlm_lib.core.unmasking.factor"], tests=[_BRUTE, _MC]),
    "Entropy-bounded unmasking (EB-Sampler, Ben-Hamu et al. 2025)": dict(
        box="def-unmasking-rules", code=["gmlm_lib.core.unmasking.entropy_bound"], tests=[_BRUTE, _MC]),
    "Dilated unmasking schedule (DUS, Luxembourg et al. 2025)": dict(
        box="def-unmasking-rules", code=["gmlm_lib.core.unmasking.dilated"], tests=[_BRUTE, _MC, _T + "test_schedules_and_dilation"]),
    "Li and Cai (2025), Theorem 1: KL error of parallel unmasking": dict(
        box="thm-li-cai", code=[f"{_UNMASK}.li_cai_rhs", f"{_UNMASK}.li_cai_bound", f"{_UNMASK}.mutual_information_sum"],
        tests=[_T + "test_li_cai_bound_is_tight_for_two_positions",
               _T + "test_li_cai_bound_holds_and_vanishes_with_one_position_a_pass"]),
}
"""Results from outside the paper that the book implements and checks: its own rule and the 2025
parallel-decoding rules and theory. Each names the ``prf`` box that states it, the library code and
the tests; :func:`problems` checks that every one of them exists."""


def _resolve(name: str) -> bool:
    import importlib

    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _box_chapters(root: Path) -> dict[str, str]:
    """``prf`` box label -> the chapter that holds it."""
    out = {}
    for name in sources.toc_notebooks(root):
        for label in re.findall(r"^:label:\s*(\S+)", sources.shown_text(root, name), re.M):
            out.setdefault(label, name)
    return out


def labels_in(text: str) -> list[str]:
    """The paper labels tagged in ``text``: inside square brackets, e.g. ``[Definitions 4-6, 8; Theorem 1]``
    gives Definitions 4, 5, 6 and 8 and Theorem 1. In order of first appearance."""
    found = []
    for tag in _TAG.findall(text):
        for word, numbers in _ITEM.findall(tag):
            kind = _ALIASES[word]
            for part in re.split(r"\s*,\s*", numbers):
                ends = re.split(r"\s*[-–]\s*", part)
                found += [f"{kind} {n}" for n in range(int(ends[0]), int(ends[-1]) + 1)]
        for part in tag.split(";"):  # results named by their appendix, in a part that names no number
            for first, last in _APPENDIX.findall(part) if _UNNUMBERED.search(part) else ():
                letters = [first] if not last else [chr(c) for c in range(ord(first), ord(last) + 1)]
                found += [APPENDIX_RESULTS[a] for a in letters if a in APPENDIX_RESULTS]
    return list(dict.fromkeys(found))


def _docstrings(path: Path, prefix: str):
    """``(qualified name, docstring)`` of the public functions, classes and methods of one file."""
    tree = ast.parse(path.read_text())

    def walk(body, outer):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                yield f"{outer}.{node.name}", ast.get_docstring(node) or ""
                if isinstance(node, ast.ClassDef):
                    yield from walk(node.body, f"{outer}.{node.name}")

    yield from walk(tree.body, prefix)


def library_tags(root: Path) -> dict[str, list[str]]:
    """Label -> the public names of ``gmlm_lib`` whose docstrings tag it (sorted)."""
    out: dict[str, set[str]] = {}
    for path in sorted((root / "gmlm_lib").rglob("*.py")):
        if (root / "gmlm_lib" / "book") in path.parents:  # the book's tools implement no result
            continue
        rel = path.relative_to(root).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        for name, doc in _docstrings(path, module):
            for label in labels_in(doc):
                out.setdefault(label, set()).add(name)
    return {k: sorted(v) for k, v in out.items()}


def test_tags(root: Path) -> dict[str, list[str]]:
    """Label -> the tests (``tests/FILE.py::NAME``) whose docstrings tag it (sorted)."""
    out: dict[str, set[str]] = {}
    for path in sorted((root / "tests").glob("test_*.py")):
        for name, doc in _docstrings(path, ""):
            if name.split(".")[-1].startswith("test"):
                for label in labels_in(doc):
                    out.setdefault(label, set()).add(f"tests/{path.name}::{name.lstrip('.').replace('.', '::')}")
    return {k: sorted(v) for k, v in out.items()}


_PRF = re.compile(r"^```\{prf:(\w+)\}\s*(.*?)\n((?::\w+:.*\n)*)", re.M)
_HEADING = re.compile(r"^(#{1,4})\s+(.*)$", re.M)


def chapter_tags(root: Path) -> dict[str, list[tuple[str, str, str]]]:
    """Label -> where the book treats it: ``(chapter, kind, target)`` with kind ``"prf"`` (target: the
    box's ``:label:``) or ``"section"`` (target: the heading's text), from prf titles and from headings
    that tag ``[paper Figure N]`` / ``[paper Table N]``. In book order."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for name in sources.toc_notebooks(root):
        text = sources.shown_text(root, name)
        for _, title, options in _PRF.findall(text):
            box = re.search(r"^:label:\s*(\S+)", options, re.M)
            for label in labels_in(title):
                out.setdefault(label, []).append((name, "prf", box.group(1) if box else ""))
        for _, heading in _HEADING.findall(text):
            for tag in _TAG.findall(heading):
                if not tag.startswith("paper "):
                    continue
                setting = _SETTING.search(tag)  # "[paper Tables 1-3, on Multi30k]": an analogue
                for label in labels_in("[" + _SETTING.sub("", tag).replace("paper ", "") + "]"):
                    out.setdefault(label, []).append((name, "analogue" if setting else "section", heading.strip()))
    return out


_SETTING = re.compile(r",\s*(on\s.+)$")


def _where(chapter: str, kind: str, target: str) -> str:
    if kind == "prf" and target:
        return f"{{prf:ref}}`stated here <{target}>` ({{doc}}`../notebooks/{chapter}`)"  # the boxes carry no number
    if kind in ("section", "analogue"):
        where = f"{{doc}}`../notebooks/{chapter}`, *{_TAG.sub('', target).strip()}*"
        if kind == "analogue":
            setting = next(_SETTING.search(t).group(1) for t in _TAG.findall(target) if _SETTING.search(t))
            where = f"analogue {setting}: {where}"
        return where
    return f"{{doc}}`../notebooks/{chapter}`"


def page(root: Path) -> str:
    """The text of ``book/labels.md``."""
    lib, tests, book = library_tags(root), test_tags(root), chapter_tags(root)
    lines = [
        "# The paper's results, label by label",
        "",
        "Every numbered definition, assumption, theorem, lemma, proposition, corollary, figure and table of the paper,",
        "and the results its appendices state without a number (named by their appendix, such as *Lemma (App. A)*),",
        "with the library code that implements each, the tests that check it and the place in the book that states or",
        "reproduces it. The page is generated from tags in the docstrings, the tests and the chapters",
        "(`gmlm_lib.book.labels`; `make check` fails when it is out of date), so a row cannot name code or a test",
        "that no longer exists. Titles quote the paper; where the book does not treat a label, the last column",
        "says why. Figure and table labels are the paper's: the chapter named beside each reproduces it in the",
        "paper's setting, or, where the row says *analogue*, measures the same quantity in the setting it names",
        "(the translation tables: Multi30k en→de, not WMT).",
        "",
    ]
    for kind, plural in KINDS.items():
        rows = [k for k in PAPER_LABELS if k.startswith(kind + " ")]
        # two narrow views of one index (a five-column table is wider than the page's column):
        # where each result is in the book, then the code and the tests behind it
        lines += [f"## {plural}", "", "| Label | In the paper | In the book |", "| --- | --- | --- |"]
        if kind == "Assumption":  # stated in words, with the chapters whose results rest on each
            lines[-2:] = ["| Label | In the paper | In the book's words | Used by |", "| --- | --- | --- | --- |"]
            for label in rows:
                words, chapters = ASSUMPTIONS[label]
                used = ", ".join(f"{{doc}}`../notebooks/{c}`" for c in chapters)
                lines.append(f"| {label} | {PAPER_LABELS[label]} | {words} | {used} |")
            lines.append("")
            continue
        for label in rows:
            where = "<br>".join(dict.fromkeys(_where(*w) for w in book.get(label, [])))
            if label in NOT_TREATED:
                where = (where + "<br>" if where else "") + f"not treated: {NOT_TREATED[label]}"
            name = f"{label} (number reconstructed: {RECONSTRUCTED[label]})" if label in RECONSTRUCTED else label
            cells = [name, PAPER_LABELS[label], where or "—"]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines += ["", f"Code and tests of the {plural.lower()}:", ""]
        for label in rows:
            code = ", ".join(f"`{n}`" for n in lib.get(label, [])) or "none"
            checks = ", ".join(f"`{t}`" for t in tests.get(label, [])) or "none"
            lines.append(f"- **{label}**: library {code}; tests {checks}")
        lines.append("")
    boxes = _box_chapters(root)
    lines += ["## Beyond the paper", "",
              "Results from outside the paper that the book implements and checks exactly: its own decoding rule,",
              "the 2025 parallel-decoding rules and the theory that judges them.", "",
              "| Result | In the book |", "| --- | --- |"]
    for result, entry in BEYOND.items():  # as above: where, then code and tests (one wide table would not fit)
        chapter = boxes.get(entry["box"])
        where = f"{{prf:ref}}`stated here <{entry['box']}>` ({{doc}}`../notebooks/{chapter}`)" if chapter else "—"
        lines.append(f"| {result} | {where} |")
    lines += ["", "Code and tests of the results beyond the paper:", ""]
    for result, entry in BEYOND.items():
        code = ", ".join(f"`{c}`" for c in entry["code"])
        checks = ", ".join(f"`{t}`" for t in entry["tests"])
        lines.append(f"- **{result}**: library {code}; tests {checks}")
    return "\n".join(lines).rstrip() + "\n"


def problems(root: Path) -> list[str]:
    """What is wrong with the index: a tag naming no label of the paper, a label neither treated
    anywhere nor given a reason, a label the library implements that no chapter states and no reason
    explains (its "In the book" cell would be empty), a reason for a label the book does treat, a page
    out of date."""
    out = []
    lib, tests, book = library_tags(root), test_tags(root), chapter_tags(root)
    for found, what in ((lib, "docstring"), (tests, "test"), (book, "chapter")):
        for label in sorted(set(found) - set(PAPER_LABELS)):
            out.append(f"labels: a {what} tags {label}, which the paper does not have ({found[label][0]}).")
    chapters = set(sources.toc_notebooks(root))
    for label, (_, used) in ASSUMPTIONS.items():
        out += [f"labels: {label} names the chapter {c!r}, which the book does not have (ASSUMPTIONS)."
                for c in used if c not in chapters]
    for label in (k for k in PAPER_LABELS if k.startswith("Assumption ")):
        if label not in ASSUMPTIONS:
            out.append(f"labels: {label} is not stated in ASSUMPTIONS; say it in words and name the chapters using it.")
    for label in (k for k in PAPER_LABELS if not k.startswith("Assumption ")):
        treated = label in lib or label in book
        if not treated and label not in NOT_TREATED:
            only_tests = " (only a test tags it)" if label in tests else ""
            out.append(f"labels: {label} is neither implemented nor stated in the book{only_tests}, and NOT_TREATED "
                       "gives no reason; tag it where it is treated or say why not.")
        elif label not in book and label not in NOT_TREATED:
            out.append(f"labels: {label} is implemented but no chapter states it (no prf box title or heading "
                       "carries it) and NOT_TREATED gives no reason; tag the chapter where it is used or say why not.")
        if label in NOT_TREATED and label in book and label in lib:
            out.append(f"labels: {label} is treated (library and book) but NOT_TREATED says it is not.")
    boxes = _box_chapters(root)
    for result, entry in BEYOND.items():
        if entry["box"] not in boxes:
            out.append(f"labels: {result}: no chapter of the book has the box {entry['box']!r} (BEYOND).")
        for name in entry["code"]:
            if not _resolve(name):
                out.append(f"labels: {result}: {name} does not exist (BEYOND names it).")
        for test in entry["tests"]:
            file, _, func = test.partition("::")
            path_ = root / file
            if not path_.is_file() or not re.search(rf"^def {re.escape(func)}\(", path_.read_text(), re.M):
                out.append(f"labels: {result}: the test {test} does not exist (BEYOND names it).")
    path = root / PAGE
    if not path.is_file() or path.read_text() != page(root):
        out.append(f"{PAGE} does not match the tags; run `make labels`.")
    return out


def write_page(root: Path) -> Path:
    """Write :func:`page` to ``root / PAGE``; returns that path."""
    path = root / PAGE
    path.write_text(page(root))
    return path
