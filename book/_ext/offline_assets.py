"""Sphinx extension: the book reads with the network off.

MathJax 3 comes from the pinned ``django-static-mathjax`` wheel (MathJax 3.2.2, Apache-2.0, its
licence copied beside it), not from a CDN: the TeX-to-HTML bundle, its fonts and the TeX
extensions it loads on demand are copied into the build's ``_static/mathjax/`` and
``mathjax_path`` points there (``_config.yml``). The "Open in Colab" badge is the book's own
``book/_static/colab-badge.svg``, not an image hot-linked from Colab.

It also drops repeated scripts from each page: Jupyter Book 1.x registers sphinx-thebe's and
sphinx-togglebutton's inline configuration twice, and the second ``const THEBE_JS_URL`` is a
JavaScript error on every page (the browser check in ``tests/test_browser.py`` reports it).
"""

from __future__ import annotations

import pathlib
import shutil

#: what the book's pages load from MathJax's es5 folder (the speech engine and the other
#: bundles are left out: the pages use tex-chtml.js only)
MATHJAX_PARTS = ("tex-chtml.js", "output/chtml", "input/tex/extensions", "ui", "a11y")


def mathjax_source() -> pathlib.Path:
    """The es5 folder of the installed MathJax distribution."""
    try:
        import mathjax  # the django-static-mathjax wheel's package: data files only
    except ImportError:
        raise RuntimeError("the book serves MathJax itself: install the pinned django-static-mathjax from "
                           "requirements.txt (make install)") from None
    return pathlib.Path(mathjax.__file__).parent / "static" / "mathjax"


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    src = mathjax_source()
    dest = pathlib.Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        s, d = src / "es5" / part, dest / part
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)
    shutil.copy2(src / "LICENSE", dest / "LICENSE")


def _unique_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        attributes = getattr(js, "attributes", {})
        key = (getattr(js, "filename", str(js)) or "", attributes.get("body"), attributes.get("src"))  # None and "" alike
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique  # the builder's own list: pages rendered later start from it too


def setup(app):
    mathjax_source()  # fail at the start of a build, not after it
    app.connect("build-finished", _copy_mathjax)
    # early: the event stops at the first handler that returns a template (sphinx-book-theme's does);
    # the scripts are all registered before any page is written
    app.connect("html-page-context", _unique_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
