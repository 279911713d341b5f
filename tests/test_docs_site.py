"""The docs site in a real browser: every notebook is a page that loads offline with no console error and no failed or
external request, every navigation link resolves, and the saved plots are there (the resume-continuity figure above
all).

The site is built by tools/build_docs.py (the Quarto-free build), served from a loopback http.server, and opened in
headless Chromium through playwright. No browser is a failure, not a skip: a docs check that silently does not run
checks nothing.
"""

import functools, http.server, importlib.util, json, subprocess, sys, threading, urllib.error, urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CONTINUITY_NB = NBS / "00_resume_continuity.ipynb"
ARTIFACTS = ROOT / "tests" / "artifacts"  # the screenshots of the landing pages (gitignored)


def _build_docs():
    spec = importlib.util.spec_from_file_location("build_docs", ROOT / "tools" / "build_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bd = _build_docs()


def shown_images(nb_path: Path) -> int:
    "Image outputs of the cells the page shows (not `#| hide` cells)."
    nb = json.loads(nb_path.read_text())
    n = 0
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        dirs, _ = bd.split_directives("".join(c["source"]))
        if (
            "hide" in dirs
            or "exporti" in dirs
            or dirs.get("include", "").lower() == "false"
            or dirs.get("output", "").lower() == "false"
        ):
            continue
        n += sum(any(k.startswith("image/") for k in o.get("data", {})) for o in c.get("outputs", []))
    return n


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "_docs"
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_docs.py"), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"tools/build_docs.py failed (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    handler = functools.partial(_QuietHandler, directory=str(out))
    srv = _QuietServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield out, f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a browser dropping a connection is not a site error
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.fail(
            f"playwright is not importable ({e}): pip install playwright (the browser itself comes from apt, see below)"
        )
    pw = sync_playwright().start()
    try:
        try:
            b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        except Exception as e:
            pytest.fail(
                f"cannot launch headless Chromium at {CHROMIUM}: {str(e).splitlines()[0]}\n"
                "Install it with: apt-get update && apt-get install -y chromium chromium-driver"
            )
        yield b
        b.close()
    finally:
        pw.stop()


def test_every_notebook_has_a_page(site):
    out, _ = site
    want = {bd.page_name(p) for p in bd.notebooks(NBS)}
    got = {p.name for p in out.glob("*.html")}
    assert "index.html" in want and want <= got, f"pages missing: {sorted(want - got)}"
    for p in got:
        text = (out / p).read_text()
        assert "#|" not in text.split("<main>", 1)[1], f"{p} shows a #| directive line"
        assert "cdn." not in text.lower() and "mathjax" not in text.lower(), f"{p} references a CDN"
        assert bd.NO_ALT not in text, f"{p} shows an image without alt text (give its cell a `#| fig-alt:` line)"


def test_sidebar_yml_is_valid():
    import yaml

    y = yaml.safe_load((NBS / "sidebar.yml").read_text())
    contents = y["website"]["sidebar"]["contents"]
    assert contents and contents[0] == "index.ipynb"
    listed = [c for item in contents for c in ([item] if isinstance(item, str) else item["contents"])]
    missing = [c for c in listed if not (NBS / c).exists()]
    assert not missing, (
        f"nbs/sidebar.yml lists notebooks that do not exist: {missing} (python tools/build_docs.py --sidebar)"
    )
    assert len(listed) == len(set(listed)), "nbs/sidebar.yml lists a notebook twice"
    unlisted = sorted({p.name for p in bd.notebooks(NBS)} - set(listed))
    assert not unlisted, f"nbs/sidebar.yml does not place {unlisted} in a layer (add each under its section)"
    sections = [item["section"] for item in contents if isinstance(item, dict)]
    assert len(sections) >= 4, f"the sidebar groups the chapters into layers; it has sections {sections}"
    assert (NBS / "sidebar.yml").read_text() == bd.sidebar_yml(NBS), "`build_docs.py --sidebar` would rewrite it"
    assert "sidebar.yml" in (NBS / "_quarto.yml").read_text()


def test_the_navigation_shows_the_layers_of_sidebar_yml(site):
    out, _ = site
    groups = [(t, [bd.page_name(p) for p in ps]) for t, ps in bd.layout(NBS)[0]]
    nav = (out / "index.html").read_text().split('<nav class="sidebar">', 1)[1].split("</nav>", 1)[0]
    at = 0
    for title, pages in groups:  # each title, then its pages, in the file's order
        for needle in ([f'<p class="section">{title}</p>'] if title else []) + [f'href="{n}"' for n in pages]:
            found = nav.find(needle, at)
            assert found >= 0, f"the navigation lacks {needle} after position {at} (section {title!r})"
            at = found


def test_pages_in_browser(site, browser):
    out, base = site
    host = urlsplit(base).netloc
    pages = [bd.page_name(p) for p in bd.notebooks(NBS)]
    nb_of = {bd.page_name(p): p for p in bd.notebooks(NBS)}
    img_page = "resume_continuity.html" if CONTINUITY_NB.exists() else "train.html"
    assert img_page in pages, f"{img_page} is not built"
    ctx = browser.new_context()
    problems, external, checked_links = [], [], set()

    def route(r):
        if urlsplit(r.request.url).netloc == host or r.request.url.startswith("data:"):
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    try:
        for name in pages:
            page = ctx.new_page()
            errs = []
            page.on(
                "console",
                lambda m, errs=errs: errs.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e, errs=errs: errs.append(f"page error: {e}"))
            page.on("requestfailed", lambda r, errs=errs: errs.append(f"request failed: {r.url} ({r.failure})"))
            page.on(
                "response", lambda r, errs=errs: errs.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None
            )
            resp = page.goto(f"{base}/{name}", wait_until="load", timeout=60_000)
            assert resp is not None and resp.status == 200, f"{name}: HTTP {resp and resp.status}"
            # "load" has every image and script of the page in: a static page, it fetches nothing after (no wait for
            # network idle, half a second a page)
            problems += [f"{name}: {e}" for e in errs]
            # navigation: every page is linked, every link resolves
            hrefs = page.eval_on_selector_all("nav a[href]", "els => els.map(e => e.href)")
            linked = {urlsplit(urldefrag(h)[0]).path.lstrip("/") for h in hrefs}
            missing = set(pages) - linked
            if missing:
                problems.append(f"{name}: the navigation does not link {sorted(missing)}")
            for h in hrefs:
                url, frag = urldefrag(h)
                if urlsplit(url).netloc != host:
                    problems.append(f"{name}: navigation leaves the site: {h}")
                    continue
                if url not in checked_links:
                    try:
                        with urllib.request.urlopen(url, timeout=30) as r:
                            st = r.status
                    except urllib.error.HTTPError as e:
                        st = e.code
                    if st != 200:
                        problems.append(f"{name}: navigation link {url} -> HTTP {st}")
                    checked_links.add(url)
                if frag and url.endswith("/" + name) and not page.evaluate("id => !!document.getElementById(id)", frag):
                    problems.append(f"{name}: anchor #{frag} has no target")
            # images: every one loaded, and as many as the notebook saved
            imgs = page.evaluate(
                "() => Array.from(document.images).map(i => [i.src.slice(0, 60), i.complete && i.naturalWidth > 0])"
            )
            broken = [s for s, ok in imgs if not ok]
            if broken:
                problems.append(f"{name}: {len(broken)} image(s) did not load: {broken[:3]}")
            want = shown_images(nb_of[name])
            if len(imgs) < want:
                problems.append(f"{name}: the notebook saved {want} image(s), the page shows {len(imgs)}")
            if name in ("index.html", img_page):  # the landing pages: the figure on the first screen, and a look
                top = page.evaluate("() => { const i = document.querySelector('main img');"
                                    " return i ? [i.getBoundingClientRect().top, innerHeight] : null; }")
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / f"docs_{name[:-5]}.png"))
                if not top or top[0] >= top[1]:
                    problems.append(f"{name}: its figure is not on the first screen (top, screen height: {top})")
            if name == img_page and CONTINUITY_NB.exists() and not imgs:
                problems.append(
                    f"{name}: no images — the continuity figure must be saved in {CONTINUITY_NB.name} "
                    "(execute it, keep outputs)"
                )
            page.close()
    finally:
        ctx.close()
    assert not external, (
        f"pages tried to load external resources (the site must work offline): {sorted(set(external))[:5]}"
    )
    assert not problems, "\n".join(problems)
