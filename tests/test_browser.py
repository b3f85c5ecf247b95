"""The built book in a real browser (headless Chromium, network unused): what a reader sees.

CI installs Debian's ``chromium`` and ``chromium-driver`` (.ci/run); elsewhere the tests are skipped,
with the install command, when the browser is missing.
"""

import os
import re
import shutil

import pytest

from gmlm_lib.book import sources

from conftest import ROOT
import browser


# Problems known on pages whose chapters wait for a rerun: page -> the start of each problem it still shows.
# The stutter chapter's committed notebook counts its pairs without separators; its source (notebooks/stutter.md,
# awaiting an accelerator run) groups them (tables.present).
KNOWN: dict[str, tuple[str, ...]] = {
    "notebooks/stutter.html": ("table cell with a number of 5 or more digits not grouped by thousands: ",),
}


def _png_base64(side: int) -> str:
    """A ``side`` x ``side`` PNG, base64-encoded for a data URL."""
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (side, side), "white").save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _need_browser():
    try:
        browser.find_browser()
    except FileNotFoundError as err:
        if os.environ.get("CI"):
            raise  # CI must run the browser check: .ci/run installs the browser
        pytest.skip(str(err))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.xdist_group("book")
def test_every_page_reads_in_a_browser(built_book):
    """Every page of the build: MathJax typeset everything (no TeX left, no error), every image
    loads, no table is wider than the content column, every "What this run found" box fits a
    1400 x 900 screen, every chapter's verdict ends on that first screen, and the console holds no
    error; on a phone's screen no page is wider than the screen and every table wider than its box
    shows the scroll cue. A screenshot of each page is saved under ``_build/screenshots/`` for review."""
    _need_browser()
    proc, html = built_book
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shots = ROOT / "_build" / "screenshots"
    shutil.rmtree(shots, ignore_errors=True)
    reports = browser.check_book(html, shots)
    pages = {r.page for r in reports}
    assert {f"notebooks/{name}.html" for name in sources.toc_notebooks(ROOT)} <= pages
    by_page = {r.page: r.problems for r in reports}
    for page, starts in KNOWN.items():  # still there (else remove it from KNOWN), and nothing else on that page
        for start in starts:
            assert any(p.startswith(start) for p in by_page[page]), f"{page} no longer shows {start!r}: remove it from KNOWN"
        by_page[page] = [p for p in by_page[page] if not p.startswith(starts)]
    broken = {page: problems for page, problems in by_page.items() if problems}
    assert not broken, "\n".join(f"{page}: {'; '.join(p)}" for page, p in broken.items())
    redirects = [r for r in reports if browser.redirect_target(html / r.page) is not None]
    assert [r.page for r in redirects] == ["index.html"] and redirects[0].screenshot is None
    assert all(r.screenshot.is_file() and r.screenshot.stat().st_size > 10_000 for r in reports if r not in redirects)


_UNFADED = {  # a formula's style that takes away the book's fade (book/_static/book.css), or one of its edges
    "without its fade": "animation: none",
    "with no fade on the left": "animation-name: none, gmlm-fade-right",  # nothing at the end says "more on the left"
    "with no fade on the right": "animation-name: gmlm-fade-left, none",
    "faded on the left all along": "animation-name: none, gmlm-fade-right; --gmlm-fade-left: 2em",  # at the start too
    "faded on the right all along": "animation-name: gmlm-fade-left, none; --gmlm-fade-right: 2em",
}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.xdist_group("book")
def test_the_browser_check_sees_what_a_reader_would(built_book, tmp_path):
    """The check fails a page without MathJax (raw TeX), with a MathJax error, with a role left unrendered,
    with a broken image link, with a table wider than the column, with an error on the browser's console
    (and only that page), with a MathJax whose startup fails, with the chapter's verdict missing or pushed
    below the first screen (one ending on the screen's last pixel passes), and the other planted faults
    below; the unchanged page passes, and its screenshot is saved. A page that the check's own script
    cannot read stops the check with an error naming the page, not a report. On a phone's screen: a page
    wider than the screen, and a table wider than its box without the book's scroll cue, or with a row
    painted over it; a long name in code breaks instead of widening the page. A formula wider than its
    box is cut off where it hides its overflow (the theme's rule for inline formulas), on either screen;
    with the book's style it scrolls, which passes on a phone and fails on the desktop screen (a scroll
    bar under it), as does every formula of the built page there if MathJax's hidden copy for screen
    readers made its box scroll. On the phone a formula that scrolls with no fade, without the fade at an
    edge with more formula behind it, or with a fade at an edge with nothing behind it, fails."""
    _need_browser()
    proc, html = built_book
    assert proc.returncode == 0
    site = tmp_path / "html"
    shutil.copytree(html, site)
    page = site / "notebooks" / f"{sources.toc_notebooks(ROOT)[0]}.html"
    text = page.read_text()
    verdict = "<p><strong>Verdict of this run.</strong>"  # how a chapter's opening paragraph renders
    fold = browser.WINDOW[1]  # the first screen's height: a verdict or a findings box must end above it
    assert "mathjax/tex-chtml.js" in text and "</article>" in text and verdict in text
    long_sum = " + ".join(f"a_{{{i}}}" for i in range(1, 41))  # some 1,000 px of typeset formula

    def formula(clip):  # an inline formula as Sphinx writes it, in a theorem box; `clip`: the theme's own rule
        style = ' style="overflow: hidden"' if clip else ""
        return (f'<div class="proof theorem admonition"><p>so <span class="math notranslate nohighlight"{style}>'
                f"\\({long_sum}\\)</span> holds</p></div>")

    variants = {
        "as built": text,
        "no MathJax": re.sub(r'<script[^>]*mathjax/tex-chtml\.js[^>]*></script>', "", text),
        "broken image": text.replace("</article>", '<img src="no-such-figure.png" alt="gone"></article>', 1),
        "wide table": text.replace("</article>", "<table><tr>" + "<td>1234567.891</td>" * 60 + "</tr></table></article>", 1),
        "long decimals": text.replace("</article>", "<table><tr><td>1411.006051</td><td>0.5000</td></tr></table></article>", 1),
        "ungrouped digits": text.replace("</article>", "<table><tr><td>12728 pairs</td><td>12,728</td><td>2025</td>"
                                         "<td>56bcb7e3cb65</td><td>arXiv:2505.12345</td><td>1.5e+05</td><td>0.1234"
                                         "</td></tr><tr><th>30000</th></tr></table></article>", 1),
        "unnumbered reference": text.replace("</article>", '<p><a class="reference internal" href="#top">Proposition '
                                             "</a> and <a class=\"reference internal\" href=\"#top\">Theorem 2</a></p></article>", 1),
        "blurry figure": text.replace("</article>", f'<figure><img src="data:image/png;base64,{_png_base64(1)}" '
                                      'style="width: 400px" alt="one pixel"></figure></article>', 1),
        "raw role": text.replace("</article>", "<p>preset <code>{glue:text}</code>preset_name``, "
                                 "{glue:text}`hardware` and <code>`code`</code></p></article>", 1),
        "small svg text": text.replace("</article>", '<figure><svg width="400" height="100" viewBox="0 0 400 100"><text '
                                       'x="10" y="50" font-size="10">tiny</text></svg></figure></article>', 1),
        "svg text at the limit": text.replace(
            "</article>", '<figure><svg width="400" height="100" viewBox="0 0 400 100"><text x="10" y="50" '
            'font-size="12">9 pt</text></svg></figure></article>', 1),
        "svg figures": text.replace("</article>", '<figure><img src="at-limit.svg" style="width: 400px" alt="9 pt">'
                                    '<img src="small.svg" style="width: 400px" alt="7.5 pt"></figure></article>', 1),
        "png figures": text.replace("</article>", '<figure><img src="at-limit.png" style="width: 400px" alt="9 pt">'
                                    '<img src="small.png" style="width: 400px" alt="7.5 pt">'
                                    '<img src="unrecorded.png" style="width: 400px" alt="no record"></figure></article>', 1),
        "sharp figure": text.replace("</article>", f'<figure><img src="data:image/png;base64,{_png_base64(4)}" '
                                     'style="width: 2px" alt="two pixels a pixel"></figure></article>', 1),
        "boxes": text.replace("</article>", "".join(
            f'<div class="admonition" style="height: {h}px; box-sizing: border-box; margin: 0; padding: 0">'
            '<p class="admonition-title">What this run found</p></div>' for h in (fold, fold + 1)) + "</article>", 1),
        **{f"formula {how} in a narrow box": text.replace(
            "</article>", f'<div style="width: 200px">{formula(clip)}</div></article>', 1)
           for how, clip in (("clipped", True), ("scrolling", False))},
        "screen-reader copies unbounded": text.replace(  # without the book's bound on MathJax's hidden copy
            "</head>", "<style>span.math mjx-assistive-mml {max-width: none !important}</style></head>", 1),
        "math error": text.replace("</article>", r'<p><span class="math notranslate nohighlight">\(x^1^2\)</span></p>'
                                   "</article>", 1),
        "console error": text.replace("</article>", '<script>console.error("planted failure")</script></article>', 1),
        "after a console error": text,  # a page's console holds only its own messages
        "verdict below the fold": text.replace(verdict, f'<div style="height: {fold}px"></div>' + verdict, 1),
        **{f"verdict ending at {bottom} px": text.replace(verdict, verdict.replace(  # the fold itself is on the screen
            "<p>", f'<p style="position: fixed; top: 0; height: {bottom}px; margin: 0; box-sizing: border-box">'), 1)
           for bottom in (fold, fold + 1)},
        "no verdict": text.replace(verdict, "<p><strong>Summary.</strong>", 1),
        "MathJax startup fails": re.sub(  # its startup promise rejects after the check has begun to wait on it
            r'<script[^>]*mathjax/tex-chtml\.js[^>]*></script>',
            '<script>window.MathJax = {startup: {promise: new Promise((_, no) => setTimeout(() => '
            'no(new Error("planted startup failure")), 300))}};</script>', text),
    }
    for name, size in [("at-limit", 12), ("small", 10)]:  # 400 user units shown 400 px wide: size * 0.75 pt
        (page.parent / f"{name}.svg").write_text(
            '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="100" viewBox="0 0 400 100">'
            f'<text y="50" font-size="{size}">a</text></svg>')
    from PIL import Image, PngImagePlugin

    for name, text_px in [("at-limit", 24), ("small", 20), ("unrecorded", None)]:  # 800 px shown at 400: 0.375 pt a px
        info = PngImagePlugin.PngInfo()
        if text_px is not None:
            info.add_text("gmlm:smallest-text-px", str(text_px))
        Image.new("RGB", (800, 200), "white").save(page.parent / f"{name}.png", "PNG", pnginfo=info)
    drv = browser.open_browser()
    try:
        found = {}
        for name, body in variants.items():
            probe = page.with_name(f"probe-{name.replace(' ', '-')}.html")
            probe.write_text(body)
            shots = tmp_path / "shots" if name == "as built" else None
            report = browser.check_page(drv, probe, site, screenshots=shots)
            found[name] = report.problems
            if name == "as built":
                assert report.screenshot == tmp_path / "shots" / f"notebooks__{probe.stem}.png"
                assert report.screenshot.stat().st_size > 0
                widest = drv.execute_script("return document.querySelector('.cell_output img').parentElement"
                                            ".clientWidth")
                assert widest == browser.FIGURE_WIDTH, widest  # the width the figure-text test scales figures to
        probe = page.with_name("probe-script-failure.html")  # the check's own script cannot read the page
        probe.write_text(text.replace("</head>", "<script>Node.prototype.cloneNode = function () { "
                                      'throw new Error("planted script failure"); };</script></head>', 1))
        with pytest.raises(RuntimeError, match=r"^notebooks/probe-script-failure\.html: the check's script failed: "
                                               r"Error: planted script failure$"):
            browser.check_page(drv, probe, site)
        wide = "<tr>" + "<td>1234567.891</td>" * 12 + "</tr>"
        box = '<div class="pst-scrollable-table-container"><table class="table">{}</table></div>'  # the theme's

        def at_end(html):
            return text.replace("</article>", html + "</article>", 1)

        phone_variants = {  # on a phone's screen
            "as built": text,
            "fixed-width block": at_end('<div style="width: 600px">a block 600 px wide</div>'),
            "long code name": at_end('<p>see <code class="docutils literal notranslate"><span class="pre">'
                                     f'tests/test_{"x" * 120}.py</span></code></p>'),
            "table with its cue": at_end(box.format(wide)),
            "long formula": at_end(formula(clip=False)),
            "long formula clipped": at_end(formula(clip=True)),
            **{f"long formula {how}": at_end(formula(clip=False).replace(
                '<span class="math notranslate nohighlight">', f'<span class="math notranslate nohighlight" '
                f'style="{style}">', 1)) for how, style in _UNFADED.items()},
            "table without a cue": at_end(f'<div style="overflow-x: auto"><table>{wide}</table></div>'),
            "cue painted over": at_end(box.format(wide.replace("<tr>", '<tr style="background: #eee">'))),
            "cue on a red box": at_end(box.format(wide).replace('-container"', '-container" style="background-color: '
                                                                'rgb(200, 0, 0)"', 1)),
            **{f"page {over} px over": text.replace(  # the page's own width plus `over`, from its left edge
                "</body>", f'<div style="position: absolute; left: 0; top: 0; height: 1px; '
                f'width: {browser.PHONE[0] + over}px"></div></body>', 1) for over in (1, 2)},
        }
        found_phone = {}
        for name, body in phone_variants.items():
            probe = page.with_name(f"phone-{name.replace(' ', '-')}.html")
            probe.write_text(body)
            found_phone[name] = browser.check_phone(drv, probe, site)
        assert drv.execute_script("return window.innerWidth") == browser.WINDOW[0]  # the browser's own screen is back
        dark = drv.execute_script("document.documentElement.dataset.theme = 'dark'; "  # the dark theme's page colour
                                  "return getComputedStyle(document.body).backgroundColor")
        probe = page.with_name("phone-script-failure.html")
        probe.write_text(text.replace("</head>", "<script>window.getComputedStyle = function () { "
                                      'throw new Error("planted phone failure"); };</script></head>', 1))
        with pytest.raises(RuntimeError, match=r"^notebooks/phone-script-failure\.html \(phone\): the check's script "
                                               r"failed: Error: planted phone failure$"):
            browser.check_phone(drv, probe, site)
        assert drv.execute_script("return window.innerWidth") == browser.WINDOW[0]  # back after a failure too
    finally:
        drv.quit()
    assert found["as built"] == [], found["as built"]
    assert any(p.startswith("untypeset TeX in the text: ") for p in found["no MathJax"]) and \
        any(p.endswith(" formulas and none rendered by MathJax") for p in found["no MathJax"]), found["no MathJax"]
    assert any(p.startswith("broken image: no-such-figure.png") for p in found["broken image"]), found["broken image"]
    assert any(p.startswith("table ") and "px wide" in p for p in found["wide table"]), found["wide table"]
    assert found["long decimals"] == ["table cell with more than 4 decimals: '1411.006051'"], found["long decimals"]
    ungrouped = "table cell with a number of 5 or more digits not grouped by thousands: "
    assert found["ungrouped digits"] == [ungrouped + "'12728 pairs'", ungrouped + "'30000'"], found["ungrouped digits"]
    assert found["unnumbered reference"] == ["cross-reference without its number: 'Proposition'"]
    assert len(found["blurry figure"]) == 1 and found["blurry figure"][0].startswith(
        "raster figure with 0.00 image pixels per displayed pixel (at least 2)"), found["blurry figure"]
    assert found["raw role"] == ["unrendered markup in the text: 'preset_name``,'",
                                 "unrendered markup in the text: '{glue:text}`hardware`'"], found["raw role"]
    assert found["small svg text"] == ["inline SVG text renders at 7.5 pt (at least 9)"], found["small svg text"]
    assert found["svg text at the limit"] == [] and found["sharp figure"] == [], found
    assert found["svg figures"] == ["SVG figure text renders at 7.5 pt (at least 9): small.svg"], found["svg figures"]
    assert found["png figures"] == ["figure text renders at 7.5 pt (at least 9): small.png"], found["png figures"]
    assert found["boxes"] == [f"'What this run found' box is {fold + 1} px tall, more than the {fold} px screen"], found
    scrolls = found["formula scrolling in a narrow box"]  # on a phone, fine; on a desktop screen, a scroll bar
    assert len(scrolls) == 1 and re.fullmatch(r"formula \d+ px wider than its box, which scrolls sideways on a 1400 px "
                                              r"screen: 'a1\+a2\+a3\+.*'", scrolls[0]), scrolls
    cut = found["formula clipped in a narrow box"]
    assert len(cut) == 1 and re.fullmatch(r"formula cut off, \d+ px out of sight and no way to scroll to it: "
                                          r"'a1\+a2\+a3\+.*'", cut[0]), cut
    assert int(cut[0].split()[3]) > 500, cut  # some 1,000 px of formula in a 200 px box
    unbounded = found["screen-reader copies unbounded"]
    assert len(unbounded) >= 5 and all(re.fullmatch(r"formula \d+ px wider than its box, which scrolls sideways on a "
                                                    r"1400 px screen: '.+'", u) for u in unbounded), unbounded
    assert found["math error"] == ["1 MathJax error(s)"], found["math error"]
    assert len(found["console error"]) == 1 and found["console error"][0].startswith("console: ") and \
        "planted failure" in found["console error"][0], found["console error"]
    assert found["after a console error"] == [], found["after a console error"]
    assert len(found["verdict below the fold"]) == 1 and re.fullmatch(
        rf"the verdict ends \d+ px down, below the first {fold} px screen", found["verdict below the fold"][0]), found
    assert found[f"verdict ending at {fold} px"] == [], found[f"verdict ending at {fold} px"]
    below = f"the verdict ends {fold + 1} px down, below the first {fold} px screen"
    assert found[f"verdict ending at {fold + 1} px"] == [below], found
    assert found["no verdict"] == ["no 'Verdict of this run.' paragraph"], found["no verdict"]
    assert found["MathJax startup fails"][0] == "MathJax did not finish typesetting (error: Error: planted startup " \
        "failure)", found["MathJax startup fails"]
    assert found_phone["as built"] == found_phone["long code name"] == found_phone["table with its cue"] == \
        found_phone["long formula"] == [], found_phone
    for how in _UNFADED:  # the fade says which edge has more formula, at either end of the scroll
        unfaded = found_phone[f"long formula {how}"]
        assert len(unfaded) == 1 and re.fullmatch(
            r"formula wider than a phone screen without a fade at just the edges with more of it: 'a1\+a2\+a3\+.*'",
            unfaded[0]), (how, unfaded)
    cut = found_phone["long formula clipped"]
    assert len(cut) == 1 and re.fullmatch(r"formula cut off on a phone screen, \d+ px out of sight and no way to "
                                          r"scroll to it: 'a1\+a2\+a3\+.*'", cut[0]), cut
    assert len(found_phone["fixed-width block"]) == 1 and re.fullmatch(
        r'page \d+ px wide on a 390 px phone screen: div "a block 600 px wide"', found_phone["fixed-width block"][0])
    assert found_phone["table without a cue"] == ["table wider than a phone screen with no scroll cue: "
                                                  "'1234567.891 1234567.891 1234567.891 1234567.891 1234567.891'"]
    assert found_phone["cue painted over"] == found_phone["table without a cue"], found_phone
    red = found_phone["cue on a red box"]  # its covers, the page's colour in each theme, paint bands on the red
    assert [m.split(": ")[0] for m in red] == [
        "table's scroll cue painted rgb(255, 255, 255) on a rgb(200, 0, 0) box in the light theme",
        f"table's scroll cue painted {dark} on a rgb(200, 0, 0) box in the dark theme"], red
    assert dark != "rgb(255, 255, 255)" and all(m.endswith(": '1234567.891 1234567.891 1234567.891 1234567.891 "
                                                           "1234567.891'") for m in red), red
    assert found_phone["page 1 px over"] == [], found_phone  # a pixel of slack for sub-pixel layout
    over = found_phone["page 2 px over"]
    assert len(over) == 1 and over[0].startswith(f"page {browser.PHONE[0] + 2} px wide on a {browser.PHONE[0]} px "
                                                 "phone screen: "), found_phone


def test_svg_figure_text_is_measured_at_its_displayed_size(tmp_path):
    """Matplotlib's path-drawn text: 6 pt ticks shown at the figure's own width are 6 pt, at half its
    width 3 pt; a font-size attribute in user units scales with the displayed width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    ax.plot([0, 1])
    ax.tick_params(labelsize=6)
    ax.set_title("title", fontsize=14)
    fig.savefig(tmp_path / "f.svg")
    plt.close(fig)
    assert browser.svg_text_pt(tmp_path / "f.svg", 6.4 * 96) == pytest.approx(6.0)
    assert browser.svg_text_pt(tmp_path / "f.svg", 6.4 * 48) == pytest.approx(3.0)
    (tmp_path / "g.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50" viewBox="0 0 100 50">'
                                    '<text font-size="12px">a</text><text style="font-size: 16px">b</text></svg>')
    assert browser.svg_text_pt(tmp_path / "g.svg", 50) == pytest.approx(12 * 0.5 * 0.75)
    assert browser.svg_text_pt(tmp_path / "g.svg", 1) == pytest.approx(12 / 100 * 0.75)
    assert browser.svg_text_pt(tmp_path / "g.svg", 0) is None  # not shown: no size to judge
    (tmp_path / "p.svg").write_text('<svg width="100" height="50"><text font-size="9pt">a</text></svg>')
    assert browser.svg_text_pt(tmp_path / "p.svg", 100) == pytest.approx(9.0)  # 9 pt = 12 user units at scale 1
    (tmp_path / "h.svg").write_text('<svg width="100" height="50"><rect width="1" height="1"/></svg>')
    assert browser.svg_text_pt(tmp_path / "h.svg", 50) is None and browser.svg_text_pt(None, 50) is None


def test_png_figure_text_is_read_from_what_the_notebook_recorded(tmp_path):
    """A notebook's retina PNG records its smallest text in image pixels (plotting.retina_png); at half the
    image's width (the retina display) 6 pt ticks of a 110 dpi figure read 6 x 110 / 96 pt, at a quarter
    half that. A PNG without the record, a file that is no PNG, or a figure not shown is not judged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gmlm_lib.core import plotting

    fig, ax = plt.subplots(figsize=(4, 3), dpi=110)
    ax.plot([0, 1])
    ax.tick_params(labelsize=6)
    ax.set_title("title", fontsize=14)
    hidden = fig.add_axes([0.1, 0.1, 0.1, 0.1])
    hidden.set_title("tiny", fontsize=2)
    hidden.set_visible(False)  # a hidden axes' text is not read
    assert plotting.smallest_text_pt(fig) == 6
    png, meta = plotting.retina_png(fig)
    plain = tmp_path / "plain.png"
    fig.savefig(plain)
    plt.close(fig)
    (tmp_path / "f.png").write_bytes(png)
    assert browser.png_text_pt(tmp_path / "f.png", meta["width"]) == pytest.approx(6 * 110 / 96, rel=5e-3)
    assert browser.png_text_pt(tmp_path / "f.png", meta["width"] / 2) == pytest.approx(3 * 110 / 96, rel=5e-3)
    assert browser.png_text_pt(plain, 100) is None and browser.png_text_pt(tmp_path / "f.png", 0) is None
    (tmp_path / "no.png").write_text("not a png")
    assert browser.png_text_pt(tmp_path / "no.png", 100) is None and browser.png_text_pt(None, 100) is None
    empty = plt.figure()
    assert plotting.smallest_text_pt(empty) is None
    plt.close(empty)


def test_the_book_pages_are_the_readers_pages(tmp_path):
    """Sphinx's index and search pages and the build's own folders (``_static``, ``_sources``) are no
    reader's page, wherever they sit; every other ``.html`` is one."""
    for page in ("index.html", "genindex.html", "search.html", "py-modindex.html", "book/intro.html",
                 "book/genindex.html", "_static/x.html", "_sources/book/intro.html", "notebooks/_sub/y.html"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("<html></html>")
    found = [p.relative_to(tmp_path).as_posix() for p in browser.book_pages(tmp_path)]
    assert found == ["book/intro.html", "index.html"]


def test_the_book_check_needs_a_built_book(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no built book at .* \(no index.html\); run `make book` first"):
        browser.check_book(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_book_check_reads_each_page_on_a_phone_too(tmp_path):
    """check_book adds each loaded page's phone problems to its report: a block 600 px wide passes on the
    1400 px screen and fails on the phone's; the redirect page is read, not loaded, on either."""
    _need_browser()
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/page.html" />\n')
    (tmp_path / "book").mkdir()
    body = ('<html><head><meta name="viewport" content="width=device-width, initial-scale=1"></head>'  # as the theme's
            '<body><article class="bd-article"><p>{}</p></article></body></html>')
    (tmp_path / "book" / "page.html").write_text(body.format('<div style="width: 600px">a block 600 px wide</div>'))
    (tmp_path / "book" / "narrow.html").write_text(body.format("fits a phone"))
    reports = {r.page: r.problems for r in browser.check_book(tmp_path)}
    assert reports.keys() == {"index.html", "book/page.html", "book/narrow.html"}
    assert reports["index.html"] == reports["book/narrow.html"] == [], reports
    assert len(reports["book/page.html"]) == 1 and re.fullmatch(
        r'page \d+ px wide on a 390 px phone screen: div "a block 600 px wide"', reports["book/page.html"][0]), reports


def test_a_redirect_page_is_read_not_loaded(tmp_path):
    """Jupyter Book's root index.html only redirects: loading it races the browser's own navigation (the
    check's script once ran on a document without a body), so the check reads its target instead and
    needs no browser for it; a redirect to a page the build lacks is reported, a page with content is
    no redirect."""
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text("<html><body><p>intro</p></body></html>")
    index = tmp_path / "index.html"
    index.write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />\n')
    assert browser.redirect_target(index) == (tmp_path / "book" / "intro.html").resolve()
    assert browser.check_page(None, index, tmp_path).problems == []
    index.write_text('<meta http-equiv="Refresh" content="0; url=book/gone.html" />\n')
    assert browser.check_page(None, index, tmp_path).problems == [
        "redirects to book/gone.html, which is not a file of the build"]
    assert browser.redirect_target(tmp_path / "book" / "intro.html") is None
    page = tmp_path / "page.html"
    page.write_text('<html><head><meta http-equiv="refresh" content="30; url=x.html"></head><body><p>text</p></body></html>')
    assert browser.redirect_target(page) is None


def test_the_browser_and_its_driver_are_found_or_named(monkeypatch):
    """Chromium under either of its names, and its driver; without one of them the error names the install."""
    import shutil as shutil_module

    def which(have):
        return lambda name: f"/usr/bin/{name}" if name in have else None

    monkeypatch.setattr(shutil_module, "which", which({"chromium-browser", "chromedriver"}))
    assert browser.find_browser() == ("/usr/bin/chromium-browser", "/usr/bin/chromedriver")
    monkeypatch.setattr(shutil_module, "which", which({"chromium", "chromium-browser", "chromedriver"}))
    assert browser.find_browser() == ("/usr/bin/chromium", "/usr/bin/chromedriver")
    for have in ({"chromium"}, {"chromedriver"}, set()):
        monkeypatch.setattr(shutil_module, "which", which(have))
        with pytest.raises(FileNotFoundError, match="apt-get install chromium chromium-driver"):
            browser.find_browser()


def test_only_a_local_relative_source_names_a_file_of_the_build(tmp_path):
    """A figure's ``src`` names a file next to its page, without its query or fragment; a URL, a data URL or
    nothing names none (an SVG given so is not measured from a file)."""
    page = tmp_path / "notebooks" / "page.html"
    assert browser._local(page, "fig.svg?v=2#top") == (tmp_path / "notebooks" / "fig.svg").resolve()
    assert browser._local(page, "../_images/a.svg") == (tmp_path / "_images" / "a.svg").resolve()
    for src in ("", "https://example.org/a.svg", "data:image/svg+xml;base64,PHN2Zz4="):
        assert browser._local(page, src) is None
