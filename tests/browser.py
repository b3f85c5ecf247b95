"""The built book as a reader sees it: every page loaded in headless Chromium, offline.

:func:`check_book` opens each HTML page of a build (``file://``, with every network request sent
to an unreachable proxy, so a page that needs the network shows it), waits for MathJax, and
reports what a reader would see as broken:

- untypeset TeX: ``\\(``, ``\\[`` or ``$$`` left in the page's text outside code, math that MathJax
  did not render, or a MathJax error box;
- unrendered markup: a backtick or a MyST role (``{glue:text}``, ``{ref}``, ...) left in the page's text
  outside code, as a role nested in a code span leaves it;
- a broken image (not loaded, or zero width);
- a table wider than the content column, or a table cell with a number of more than
  :data:`MAX_DECIMALS` digits after the decimal point (a reader cannot compare ``1411.006051``), or
  with :data:`UNGROUPED_DIGITS` or more digits not grouped by thousands (``12728``: a reader counts
  them; four digits may be a year);
- a figure a reader cannot read: a raster image (PNG, JPEG) with fewer than :data:`MIN_DENSITY`
  image pixels per displayed pixel, or a figure whose smallest text renders under :data:`MIN_TEXT_PT`
  points at its displayed size (an SVG's from its font sizes and its scale; a PNG's from the size its
  notebook recorded in it, :func:`png_text_pt`, where it did);
- a cross-reference without its number ("Proposition " where "Proposition 3" was meant: a
  reference to a box that has no number needs its own text);
- a "What this run found" box taller than one 1400 x 900 screen;
- a chapter (a page under ``notebooks/``) whose "Verdict of this run." paragraph is missing or ends
  below that first screen, where a reader who has not scrolled cannot see it;
- a JavaScript error or a failed request in the browser's console;
- a formula cut off: a typeset formula reaching past the right edge of a box that hides its overflow
  (the theme clips an inline ``span.math``), so a reader can neither see its end nor scroll to it;
- a redirect-only page (Jupyter Book's root ``index.html``) whose target is not in the build: such a
  page is read, not loaded (:func:`redirect_target`).

Then it loads each page again on a phone's screen (:data:`PHONE`, emulated: :func:`check_phone`) and
reports a page wider than the screen (a reader would scroll the whole page sideways), a table
wider than its box that shows no scroll cue (the box's shadow at the edge, ``book/_static/book.css``,
missing or painted over by a row), a scroll cue whose covers are not the colour of the box under them
(they would paint a band over the table's first and last columns), in the theme's light and dark modes
both, a formula cut off, as above, by the narrower column, and a formula that scrolls but does not fade
out at an edge with more of it behind that edge (or fades at an edge with nothing behind it).

It saves a screenshot of each loaded page (the first screen, 1400 x 900) for review. It drives Debian's
``chromium`` and ``chromedriver`` through Selenium, which is imported only here; Selenium is told
where the driver is, so it never downloads one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

WINDOW = (1400, 900)  # the screen a "What this run found" box must fit
PHONE = (390, 844)
"""A phone's screen in CSS pixels (an iPhone 14's), emulated at 3 device pixels per CSS pixel."""
MAX_DECIMALS = 4
"""The most digits after the decimal point a number in a table cell may show."""
UNGROUPED_DIGITS = 5
"""The fewest digits in a row that a table cell's number may not show without thousands separators
(``12,728``, not ``12728``); four are allowed, since a year has four."""
MIN_DENSITY = 2.0
"""The fewest image pixels per displayed (CSS) pixel of a raster figure: sharp on a high-density screen."""
MIN_TEXT_PT = 9.0
"""The smallest text size, in points (1 pt = 4/3 CSS px), of a figure at its displayed size."""
FIGURE_WIDTH = 768
"""The widest a chapter's figure is shown on the ``WINDOW`` screen, in CSS px (the theme's cell output box;
the browser test measures it): a figure drawn wider is scaled down to it, its text with it."""
NUMBERED = ("Proposition", "Definition", "Theorem", "Lemma", "Corollary", "Figure", "Fig.", "Table", "Equation",
            "Example", "Exercise", "Remark", "Algorithm", "Assumption", "Conjecture", "Axiom", "Claim", "Listing")
"""The words a numbered cross-reference starts with; one of them alone is a reference that lost its number."""
SKIP = ("genindex.html", "search.html", "py-modindex.html")  # Sphinx's generated index pages

_AFTER_MATHJAX = r"""
const done = arguments[arguments.length - 1];
const limits = arguments;
const ready = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
const timeout = new Promise(r => setTimeout(() => r("timeout"), 90000));
Promise.race([ready.then(() => "ok", e => "error: " + e), timeout]).then(state => {
  try {
"""
"""The opening both page scripts share: once MathJax has typeset the page (or failed, or 90 s passed) the
rest runs with ``state`` saying which, ``limits`` holding the script's arguments, and answers through
``done``."""

_FORMULAS = r"""  const formulaBoxes = article => {
    const cut = [], scrolled = [];
    for (const m of article.querySelectorAll("mjx-container")) {
      const r = m.getBoundingClientRect();
      const text = m.textContent.replace(/[\u2061-\u2064]/g, "").replace(/\s+/g, " ").trim().slice(0, 60).trimEnd();
      for (let a = m; a && a !== document.documentElement; a = a.parentElement) {
        const overflow = getComputedStyle(a).overflowX;
        if (overflow === "auto" || overflow === "scroll") {  // a box the reader can scroll
          if (a.scrollWidth > a.clientWidth + 1) scrolled.push({over: a.scrollWidth - a.clientWidth, text, box: a});
          break;
        }
        const hidden = Math.round(r.right - a.getBoundingClientRect().right);
        if ((overflow === "hidden" || overflow === "clip") && hidden > 1) {
          cut.push({hidden, text});
          break;
        }
      }
    }
    return {cut, scrolled};
  };
"""
"""A script fragment both page scripts share: ``formulaBoxes(article)`` lists as ``cut`` each typeset
formula that reaches more than a pixel past the right edge of a box hiding its overflow, with no box
that scrolls in between (``hidden``: the pixels out of sight; ``text``: the start of its text), and as
``scrolled`` each formula whose nearest box that scrolls (a display formula's own, an inline one's
``span.math``) is more than a pixel wider inside than out (``over``: by how much), where a desktop
browser draws a scroll bar (``box``: that box, an element of the page)."""

_PAGE_SCRIPT = _AFTER_MATHJAX + _FORMULAS + r"""  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const column = article.getBoundingClientRect().width;
  const clone = article.cloneNode(true);
  clone.querySelectorAll("pre, code, script, style, mjx-container, .highlight").forEach(e => e.remove());
  const text = clone.textContent;
  const tex = [];
  for (const m of ["\\(", "\\[", "$$"]) { if (text.includes(m)) tex.push(m); }
  const markup = [];  // a MyST role or code span that did not render leaves its backticks or braces in the text
  for (const m of text.matchAll(/[^\s]{0,30}(`|\{(glue|glue:[a-z]+|ref|numref|eq|doc|cite|cite:[a-z]+|prf:ref|term|download|math)\})[^\s]{0,30}/g)) {
    if (markup.length < 5) markup.push(m[0]);
  }
  const mathSpans = article.querySelectorAll("span.math, div.math").length;
  const rendered = article.querySelectorAll("mjx-container").length;
  const images = Array.from(document.images)
    .filter(i => !i.complete || i.naturalWidth === 0)
    .map(i => i.getAttribute("src"));
  const tables = Array.from(article.querySelectorAll("table"))
    .map(t => ({width: Math.round(t.getBoundingClientRect().width), text: t.innerText.slice(0, 60)}))
    .filter(t => t.width > column + 1);
  const cells = Array.from(article.querySelectorAll("td, th")).map(c => c.innerText.trim());
  const numbers = t => t.replace(/arXiv[:\s]*\d{4}\.\d{4,5}(v\d+)?/g, "");  // an arXiv number is a name
  const decimals = cells
    .filter(t => new RegExp("(^|[^\\w.])\\d+\\.\\d{" + (limits[0] + 1) + ",}(?![\\d.])").test(numbers(t)))
    .slice(0, 5);
  const ungrouped = cells
    .filter(t => new RegExp("(^|[^\\w.,])\\d{" + limits[2] + ",}(?![\\w,])").test(numbers(t)))
    .slice(0, 5);
  const figures = "figure img, .cell_output img, .output img";  // figures, not badges or icons in the text
  const rasters = Array.from(article.querySelectorAll(figures))
    .filter(i => i.complete && i.naturalWidth > 0 && !/\.svg(\?|#|$)|^data:image\/svg/i.test(i.currentSrc || i.src))
    .map(i => ({src: (i.getAttribute("src") || "").slice(0, 80), density: i.naturalWidth / Math.max(1, i.getBoundingClientRect().width),
                path: i.getAttribute("src") || "", shown: i.getBoundingClientRect().width}));
  const svgImages = Array.from(article.querySelectorAll(figures))
    .filter(i => i.complete && /\.svg(\?|#|$)/i.test(i.currentSrc || i.src))
    .map(i => ({src: i.getAttribute("src"), shown: i.getBoundingClientRect().width}));
  const svgText = Array.from(article.querySelectorAll("figure svg text, .cell_output svg text"))
    .filter(t => !t.closest("mjx-container"))
    .map(t => t.getBoundingClientRect().height ? parseFloat(getComputedStyle(t).fontSize) * (t.getScreenCTM() ? Math.hypot(t.getScreenCTM().b, t.getScreenCTM().d) : 1) : Infinity);
  const smallestSvgText = svgText.length ? Math.min(...svgText) : null;
  const words = limits[1];
  const unnumbered = Array.from(article.querySelectorAll("a.reference.internal"))
    .map(a => a.textContent.replace(/\s+/g, " ").trim())
    .filter(t => words.includes(t));
  const boxes = Array.from(article.querySelectorAll(".admonition"))
    .filter(b => (b.querySelector(".admonition-title") || {}).textContent === "What this run found")
    .map(b => Math.round(b.getBoundingClientRect().height));
  const verdict = Array.from(article.querySelectorAll("p"))
    .find(v => v.textContent.trim().startsWith("Verdict of this run."));
  const verdictBottom = verdict ? Math.round(verdict.getBoundingClientRect().bottom + window.scrollY) : null;
  const formulas = formulaBoxes(article);
  done({state, column: Math.round(column), tex, markup, mathSpans, rendered,
        mathErrors: document.querySelectorAll("mjx-merror").length, images, tables, boxes, decimals, ungrouped, rasters,
        svgImages, smallestSvgText, unnumbered, verdictBottom, formulas: {
          cut: formulas.cut, scrolled: formulas.scrolled.map(({over, text}) => ({over, text}))}});
  } catch (e) { done({state: "the check's script failed: " + e}); }
});
"""

_PHONE_SCRIPT = _AFTER_MATHJAX + _FORMULAS + r"""  const root = document.documentElement;
  const article = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
  const scrolls = e => ["auto", "scroll"].includes(getComputedStyle(e).overflowX);
  const inScrollBox = e => {
    for (let a = e.parentElement; a && a !== root; a = a.parentElement) { if (scrolls(a)) return true; }
    return false;
  };
  const shown = e => (e.innerText || e.textContent).replace(/\s+/g, " ").trim().slice(0, 60).trimEnd();
  let widest = "";
  if (root.scrollWidth > root.clientWidth + 1) {  // name what reaches furthest right, outside the boxes that scroll
    let right = root.clientWidth + 1;
    for (const e of article.querySelectorAll("*")) {
      const r = e.getBoundingClientRect().right;
      if (r >= right && !inScrollBox(e)) {
        right = r;
        widest = e.tagName.toLowerCase() + " " + JSON.stringify(shown(e));
      }
    }
  }
  // a scroll cue: the box's shadows (a gradient background), with no row or cell painted over them
  const seeThrough = colour => /^rgba\(.*,\s*0\)$|^transparent$/.test(colour);
  const clear = c => seeThrough(getComputedStyle(c).backgroundColor);
  const tableBoxes = Array.from(article.querySelectorAll("*")).filter(b => scrolls(b) && b.querySelector("table"));
  const uncued = tableBoxes
    .filter(b => b.scrollWidth > b.clientWidth + 1)
    .filter(b => !getComputedStyle(b).backgroundImage.includes("gradient")
                 || !Array.from(b.querySelectorAll("tr, th, td")).every(clear))
    .map(shown);
  // the cue's covers (its first colour) must be the colour of the box they sit on, in either theme: a cover of
  // another colour paints a band over the table's first and last columns, and hides text of its own colour
  const under = b => {
    for (let a = b; a; a = a.parentElement) {
      const colour = getComputedStyle(a).backgroundColor;
      if (!seeThrough(colour)) return colour;
    }
    return "rgb(255, 255, 255)";  // the browser's canvas
  };
  const miscoloured = [];
  const theme = root.dataset.theme;
  for (const t of ["light", "dark"]) {
    root.dataset.theme = t;
    for (const b of tableBoxes) {
      const image = getComputedStyle(b).backgroundImage;
      if (!image.includes("gradient")) continue;
      const cover = (image.match(/rgba?\([^)]*\)/) || [""])[0], box = under(b);
      if (cover.replace(/^rgba\((.*), 1\)$/, "rgb($1)") !== box) {
        miscoloured.push({theme: t, cover, box, text: shown(b)});
      }
    }
  }
  if (theme === undefined) delete root.dataset.theme; else root.dataset.theme = theme;
  // a formula that scrolls fades out at an edge with more of it behind that edge, and only there: read at
  // either end of its scroll, a frame after scrolling (the fade follows the scroll position on the next frame)
  const formulas = formulaBoxes(article);
  const frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const fades = b => ["left", "right"].map(
    side => parseFloat(getComputedStyle(b).getPropertyValue("--gmlm-fade-" + side)) || 0);
  (async () => {
    const unfaded = [];
    for (const {box, text} of formulas.scrolled) {
      const was = box.scrollLeft;
      box.scrollLeft = 0;
      await frame();
      const [startLeft, startRight] = fades(box);
      box.scrollLeft = box.scrollWidth;
      await frame();
      const [endLeft, endRight] = fades(box);
      box.scrollLeft = was;
      if (!(startLeft === 0 && startRight > 0 && endLeft > 0 && endRight === 0)) unfaded.push(text);
    }
    done({state, width: root.clientWidth, scrollWidth: root.scrollWidth, widest, uncued, miscoloured,
          cut: formulas.cut, unfaded});
  })().catch(e => done({state: "the check's script failed: " + e}));
  } catch (e) { done({state: "the check's script failed: " + e}); }
});
"""


@dataclass
class PageReport:
    """What one page showed: ``problems`` is empty when a reader sees nothing broken."""

    page: str
    problems: list[str] = field(default_factory=list)
    screenshot: Path | None = None


def find_browser() -> tuple[str, str]:
    """Paths of ``chromium`` and ``chromedriver``; ``FileNotFoundError`` with the install command."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        raise FileNotFoundError("the browser check needs Chromium and its driver: `apt-get install chromium "
                                "chromium-driver` (Debian's packages; .ci/run installs them in CI).")
    return browser, driver


def open_browser():
    """Headless Chromium at ``WINDOW``, offline: every request goes to an unreachable proxy."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = find_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars",
                "--allow-file-access-from-files", "--proxy-server=http://127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    drv.set_script_timeout(240)  # a loaded 2-core CI machine can stall a long page past a minute
    drv.set_page_load_timeout(60)
    return drv


def check_page(drv, path: Path, html_root: Path, screenshots: Path | None = None) -> PageReport:
    """Load ``path`` (a page of the build under ``html_root``) and report what is broken."""
    name = path.relative_to(html_root).as_posix()
    target = redirect_target(path)
    if target is not None:  # Jupyter Book's root index.html: loading it races the browser's own redirect
        report = PageReport(name)
        if not target.is_file():
            shown = target.relative_to(root) if target.is_relative_to(root := html_root.resolve()) else target
            report.problems.append(f"redirects to {shown.as_posix()}, which is not a file of the build")
        return report
    drv.get_log("browser")  # drop what earlier pages logged
    drv.get(path.resolve().as_uri())
    seen = drv.execute_async_script(_PAGE_SCRIPT, MAX_DECIMALS, list(NUMBERED), UNGROUPED_DIGITS)
    report = PageReport(name)
    p = report.problems
    if seen["state"].startswith("the check's script failed"):
        raise RuntimeError(f"{name}: {seen['state']}")
    if seen["state"] != "ok":
        p.append(f"MathJax did not finish typesetting ({seen['state']})")
    if seen["tex"]:
        p.append(f"untypeset TeX in the text: {', '.join(seen['tex'])}")
    p += [f"unrendered markup in the text: {m!r}" for m in seen["markup"]]
    if seen["mathSpans"] and not seen["rendered"]:
        p.append(f"{seen['mathSpans']} formulas and none rendered by MathJax")
    if seen["mathErrors"]:
        p.append(f"{seen['mathErrors']} MathJax error(s)")
    p += [f"broken image: {src}" for src in seen["images"]]
    p += [f"table {t['width']} px wide in a {seen['column']} px column: {t['text']!r}" for t in seen["tables"]]
    p += [f"table cell with more than {MAX_DECIMALS} decimals: {t!r}" for t in seen["decimals"]]
    p += [f"table cell with a number of {UNGROUPED_DIGITS} or more digits not grouped by thousands: {t!r}"
          for t in seen["ungrouped"]]
    p += [f"raster figure with {r['density']:.2f} image pixels per displayed pixel (at least {MIN_DENSITY:g}): "
          f"{r['src']}" for r in seen["rasters"] if r["density"] < MIN_DENSITY]
    for img in seen["rasters"]:
        smallest = png_text_pt(_local(path, img["path"]), img["shown"])
        if smallest is not None and smallest < MIN_TEXT_PT:
            p.append(f"figure text renders at {smallest:.1f} pt (at least {MIN_TEXT_PT:g}): {img['src']}")
    for img in seen["svgImages"]:
        smallest = svg_text_pt(_local(path, img["src"]), img["shown"])
        if smallest is not None and smallest < MIN_TEXT_PT:
            p.append(f"SVG figure text renders at {smallest:.1f} pt (at least {MIN_TEXT_PT:g}): {img['src']}")
    if seen["smallestSvgText"] is not None and seen["smallestSvgText"] * 0.75 < MIN_TEXT_PT:
        p.append(f"inline SVG text renders at {seen['smallestSvgText'] * 0.75:.1f} pt (at least {MIN_TEXT_PT:g})")
    p += [f"cross-reference without its number: {t!r}" for t in seen["unnumbered"]]
    p += [f"formula cut off, {c['hidden']} px out of sight and no way to scroll to it: {c['text']!r}"
          for c in seen["formulas"]["cut"]]
    p += [f"formula {c['over']} px wider than its box, which scrolls sideways on a {WINDOW[0]} px screen: {c['text']!r}"
          for c in seen["formulas"]["scrolled"]]
    p += [f"'What this run found' box is {h} px tall, more than the {WINDOW[1]} px screen" for h in seen["boxes"]
          if h > WINDOW[1]]
    if name.startswith("notebooks/"):  # a chapter opens with its verdict, on the first screen
        if seen["verdictBottom"] is None:
            p.append("no 'Verdict of this run.' paragraph")
        elif seen["verdictBottom"] > WINDOW[1]:
            p.append(f"the verdict ends {seen['verdictBottom']} px down, below the first {WINDOW[1]} px screen")
    for entry in drv.get_log("browser"):
        if entry.get("level") == "SEVERE":
            p.append(f"console: {entry.get('message', '')[:200]}")
    if screenshots is not None:
        shot = screenshots / (name.replace("/", "__").removesuffix(".html") + ".png")
        shot.parent.mkdir(parents=True, exist_ok=True)
        drv.save_screenshot(str(shot))
        report.screenshot = shot
    return report


def check_phone(drv, path: Path, html_root: Path) -> list[str]:
    """Load ``path`` on an emulated phone screen (:data:`PHONE`) and return what is broken there: the
    page wider than the screen (with what reaches furthest right), a table wider than its box with
    no visible scroll cue, a table's scroll cue in another colour than its box (in the light or the dark
    theme), a formula cut off by its box, or a formula that scrolls without the book's fade at the edge
    that has more of it (``--gmlm-fade-left`` and ``--gmlm-fade-right``, book/_static/book.css). The
    browser's own screen is put back afterwards."""
    name = path.relative_to(html_root).as_posix()
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 3, "mobile": True})
    try:
        drv.get(path.resolve().as_uri())
        seen = drv.execute_async_script(_PHONE_SCRIPT)
    finally:
        drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    if seen["state"].startswith("the check's script failed"):
        raise RuntimeError(f"{name} (phone): {seen['state']}")
    problems = []
    if seen["scrollWidth"] > seen["width"] + 1:
        problems.append(f"page {seen['scrollWidth']} px wide on a {PHONE[0]} px phone screen: "
                        f"{seen['widest'] or 'nothing in the article'}")
    problems += [f"table wider than a phone screen with no scroll cue: {t!r}" for t in seen["uncued"]]
    problems += [f"table's scroll cue painted {m['cover']} on a {m['box']} box in the {m['theme']} theme: {m['text']!r}"
                 for m in seen["miscoloured"]]
    problems += [f"formula cut off on a phone screen, {c['hidden']} px out of sight and no way to scroll to it: "
                 f"{c['text']!r}" for c in seen["cut"]]
    problems += [f"formula wider than a phone screen without a fade at just the edges with more of it: {t!r}"
                 for t in seen["unfaded"]]
    return problems


def redirect_target(page: Path) -> Path | None:
    """The local file a redirect-only page (``<meta http-equiv="Refresh" content="0; url=...">`` and
    nothing a reader sees, as Jupyter Book's root ``index.html``) sends the reader to; ``None`` for a
    page with content. A redirect page is not loaded: the browser leaves it at once, and the check's
    script would run on whichever document is there at that moment. Its target is checked as a page
    of its own."""
    import re

    text = page.read_text(errors="replace")
    meta = re.search(r"""<meta\s+http-equiv=["']?refresh["']?\s+content=["']\s*\d+\s*;\s*url=([^"'>]+)["']""",
                     text, flags=re.IGNORECASE)
    if meta is None or re.search(r"<(body|article|main|p|div)\b", text, flags=re.IGNORECASE):
        return None
    url = meta.group(1).strip()
    return _local(page, url) or Path(url)  # a URL off the build is no file: reported as broken offline


def _local(page: Path, src: str) -> Path | None:
    """The file an ``<img src>`` of ``page`` names, when it is a local relative path."""
    if not src or "://" in src or src.startswith("data:"):
        return None
    return (page.parent / src.split("#")[0].split("?")[0]).resolve()


def png_text_pt(png: Path | None, shown_px: float) -> float | None:
    """The smallest text of the PNG figure ``png``, in points, when it is displayed ``shown_px`` CSS pixels
    wide: the size in image pixels its notebook recorded in the PNG (``gmlm_lib.core.plotting.TEXT_SIZE_KEY``,
    a ``tEXt`` chunk) times the displayed width over the image's width, in points (0.75 pt a CSS pixel).
    ``None`` when the file cannot be read, is not a PNG or records no text size (a figure made elsewhere)."""
    import struct
    import zlib

    if png is None or not png.is_file() or shown_px <= 0:
        return None
    data = png.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    width, pos, text_px = None, 8, None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos: pos + 8])
        body = data[pos + 8: pos + 8 + length]
        if kind == b"IHDR":
            width = struct.unpack(">I", body[:4])[0]
        elif kind in (b"tEXt", b"zTXt", b"iTXt"):
            key, _, rest = body.partition(b"\0")
            if key.decode("latin-1") == "gmlm:smallest-text-px":
                value = zlib.decompress(rest[1:]) if kind == b"zTXt" else rest.split(b"\0")[-1] if kind == b"iTXt" else rest
                text_px = float(value.decode("latin-1"))
        elif kind == b"IEND":
            break
        pos += 12 + length
    if not width or text_px is None:
        return None
    return text_px * shown_px / width * 0.75


def svg_text_pt(svg: Path | None, shown_px: float) -> float | None:
    """The smallest text of the SVG file ``svg``, in points, when it is displayed ``shown_px`` CSS pixels
    wide: each font size (a ``font-size`` attribute or style, in px or pt) times the displayed width
    over the SVG's own width (its ``viewBox``, else its ``width``). Matplotlib's SVGs draw text as glyph
    paths in a group scaled by the font size over 100, so such a ``scale(s -s)`` counts as size
    ``100 s``. ``None`` when the file cannot be read or holds no text."""
    import re

    if svg is None or not svg.is_file() or shown_px <= 0:
        return None
    text = svg.read_text(errors="replace")
    head = re.search(r"<svg\b[^>]*>", text)
    if head is None:
        return None
    width = re.search(r'\bwidth="([\d.]+)(pt|px)?"', head.group(0))
    view = re.search(r'viewBox="[\d.\-]+ [\d.\-]+ ([\d.]+) [\d.]+"', head.group(0))
    own = float(view.group(1)) if view else float(width.group(1)) if width else None
    if not own:
        return None
    sizes = [float(v) * (4 / 3 if unit == "pt" else 1.0) for v, unit in  # in the SVG's user units
             re.findall(r"font-size(?:=\"|:\s*)([\d.]+)(px|pt)?", text)]
    sizes += [100 * float(v) for v in re.findall(r'<g [^>]*transform="translate\([^)]*\) scale\(([\d.]+) -[\d.]+\)"', text)]
    if not sizes:
        return None
    return min(sizes) * shown_px / own * 0.75  # user units -> displayed CSS px -> points (1 px = 0.75 pt)


def book_pages(html_root: Path) -> list[Path]:
    """The reader-facing pages of a build: every ``.html`` except Sphinx's index and search pages
    and the build's own folders (``_static``, ``_sources``, ...)."""
    return sorted(p for p in html_root.rglob("*.html")
                  if p.name not in SKIP and not any(part.startswith("_") for part in p.relative_to(html_root).parts))


def check_book(html_root: Path, screenshots: Path | None = None) -> list[PageReport]:
    """Every page of the build at ``html_root`` through :func:`check_page`, then each loaded page again
    through :func:`check_phone` (its problems added to the page's report), in one browser."""
    html_root = Path(html_root)
    if not (html_root / "index.html").is_file():
        raise FileNotFoundError(f"no built book at {html_root} (no index.html); run `make book` first.")
    pages = book_pages(html_root)
    drv = open_browser()
    try:
        reports = [check_page(drv, page, html_root, screenshots) for page in pages]
        for page, report in zip(pages, reports):
            if redirect_target(page) is None:
                report.problems += check_phone(drv, page, html_root)
        return reports
    finally:
        drv.quit()
