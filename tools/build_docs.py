#!/usr/bin/env python3
"""Build the docs site from nbs/*.ipynb without Quarto (which `nbdev_docs` needs and this machine cannot install).

Every notebook becomes one page (index.ipynb -> index.html, 03_config.ipynb -> config.html, as nbdev names them), with
a navigation sidebar that shows nbs/sidebar.yml: its pages and its named sections (the layers of the kit), each
section's pages under its title, in the file's order; a notebook the file does not list comes last. Cells are
shown the way nbdev shows them: `#|` directive lines are stripped, `#| hide` cells are dropped, the source of
`#| export` cells is replaced by API docs (signature, docstring and docments parameter table of each public function and
class the cell defines), and saved outputs — the notebooks' plots and tables — are embedded as they are.

The pages are self-contained: nbconvert's "basic" template (no MathJax, no require.js, no CDN links) with inline CSS and
images as data: URIs, so the site opens offline, from a file or any static server.

Usage: python tools/build_docs.py [--out _docs] [--sidebar]
  --out DIR   where to write the site (default: the doc_path of settings.ini, _docs); DIR is replaced
  --sidebar   also (re)write nbs/sidebar.yml, the navigation `nbdev_docs` uses where Quarto is installed: its sections
              are kept, a notebook that no longer exists is dropped, and a new one is added at the top level
Exits 1 if any notebook fails to render or nbs/sidebar.yml names a notebook that does not exist (the rest is written).
"""

from __future__ import annotations
import argparse, ast, base64, configparser, copy, hashlib, html, io, json, re, shutil, sys, tokenize, warnings
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DIRECTIVE = re.compile(r"^\s*#\|\s*(.*?)\s*$")
WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")


# ---------------------------------------------------------------- notebooks and page names
def notebooks(nbs: Path) -> list[Path]:
    "The notebooks of the site: nbs/*.ipynb (not _ or . names), index first, then by file name (nbdev's sidebar order)."
    nbs_list = [p for p in nbs.glob("*.ipynb") if not p.name.startswith(("_", "."))]
    return sorted(nbs_list, key=lambda p: ("0" if p.stem == "index" else "1") + p.name)


def page_name(nb: Path) -> str:
    "index.ipynb -> index.html; 03_config.ipynb -> config.html (nbdev strips the number prefix)."
    return re.sub(r"^\d+[a-z]?_", "", nb.stem) + ".html"


def read_sidebar(nbs: Path) -> list[tuple[str, list[str]]]:
    "nbs/sidebar.yml as [(section title, notebook names)]; top-level pages are the sections titled \"\"."
    path = nbs / "sidebar.yml"
    if not path.exists():
        return []
    groups: list[tuple[str, list[str]]] = []
    for item in yaml.safe_load(path.read_text())["website"]["sidebar"]["contents"]:
        if isinstance(item, str):
            if groups and groups[-1][0] == "":
                groups[-1][1].append(item)
            else:
                groups.append(("", [item]))
        else:
            groups.append((str(item["section"]), [str(c) for c in item.get("contents") or []]))
    return groups


def layout(nbs: Path) -> tuple[list[tuple[str, list[Path]]], list[str]]:
    "([(section title, notebooks)] of the navigation, names sidebar.yml lists that do not exist)."
    have = {p.name: p for p in notebooks(nbs)}
    groups, missing, placed = [], [], set()
    for title, names in read_sidebar(nbs):
        missing += [n for n in names if n not in have]
        placed |= set(names)
        groups.append((title, [have[n] for n in names if n in have]))
    rest = [p for n, p in have.items() if n not in placed]
    return groups + ([("", rest)] if rest else []), missing


def sidebar_yml(nbs: Path) -> str:
    "nbs/sidebar.yml in Quarto's layout: its sections kept, a missing notebook dropped, a new one at the top level."
    lines = ["website:", "  sidebar:", "    contents:"]
    for title, pages in layout(nbs)[0]:
        if title:
            lines += [f"      - section: {json.dumps(title)}", "        contents:"]
            lines += [f"          - {p.name}" for p in pages]
        else:
            lines += [f"      - {p.name}" for p in pages]
    return "\n".join(lines) + "\n"


def title_of(nb) -> str:
    "The notebook's first level-1 heading."
    for c in nb.cells:
        if c.cell_type == "markdown":
            m = re.search(r"^#\s+(.+)$", c.source, re.M)
            if m:
                return m.group(1).strip()
    return ""


# ---------------------------------------------------------------- API docs from exported cells
def _comments(src: str) -> dict[int, str]:
    "line number -> text of the comment on that line."
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, comments: dict[int, str], skip_self: bool) -> list[tuple]:
    "(name, annotation, default, comment) per parameter, in order."
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    rows = []

    def add(arg, default, prefix=""):
        end = (default or arg.annotation or arg).end_lineno
        line_args = [x for x in pos + a.kwonlyargs + [a.vararg, a.kwarg] if x is not None and x.lineno == arg.lineno]
        mine = comments.get(end) if line_args and line_args[-1] is arg else None
        rows.append(
            (
                prefix + arg.arg,
                ast.unparse(arg.annotation) if arg.annotation else "",
                ast.unparse(default) if default is not None else "",
                mine or "",
            )
        )

    for i, (arg, d) in enumerate(zip(pos, defaults)):
        if i == 0 and skip_self and arg.arg in ("self", "cls"):
            continue
        add(arg, d)
    if a.vararg:
        add(a.vararg, None, "*")
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        add(arg, d)
    if a.kwarg:
        add(a.kwarg, None, "**")
    return rows


def _sig(keyword: str, name: str, params: list[tuple], returns: str = "") -> str:
    parts = [p + (f": {t}" if t else "") + (f" = {d}" if d and t else f"={d}" if d else "") for p, t, d, _ in params]
    one = f"{keyword} {name}({', '.join(parts)})" + (f" -> {returns}" if returns else "")
    if len(one) <= 100:
        return one
    return f"{keyword} {name}(\n" + "".join(f"    {p},\n" for p in parts) + ")" + (f" -> {returns}" if returns else "")


def _md(text: str) -> str:
    from nbconvert.filters.markdown import markdown2html

    return markdown2html(text) if text else ""


def _table(params: list[tuple], ret: tuple | None = None) -> str:
    rows = [p for p in params if p[3]] + ([ret] if ret and ret[3] else [])
    if not rows:
        return ""
    body = "".join(
        f"<tr><td><code>{html.escape(n)}</code></td><td>{'<code>' + html.escape(t) + '</code>' if t else ''}</td>"
        f"<td>{'<code>' + html.escape(d) + '</code>' if d else ''}</td><td>{_md(c)}</td></tr>"
        for n, t, d, c in rows
    )
    return (
        '<table class="params"><thead><tr><th></th><th>type</th><th>default</th><th>details</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _func_doc(fn, comments, module: str, level: int, owner: str = "") -> str:
    params = _params(fn, comments, skip_self=bool(owner))
    ret = ast.unparse(fn.returns) if fn.returns else ""
    is_prop = any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
    ret_row = ("returns", ret, "", comments.get(fn.returns.end_lineno, "")) if fn.returns and not is_prop else None
    if ret_row and any(ret_row[3] == p[3] for p in params):
        ret_row = None  # that comment belongs to the last parameter
    full = f"{owner}.{fn.name}" if owner else fn.name
    sig = (
        f"{full}" + (f": {ret}" if ret else "")
        if is_prop
        else _sig("async def" if isinstance(fn, ast.AsyncFunctionDef) else "def", full, params, ret)
    )
    return (
        f'<div class="api api-l{level}"><h{2 + level} class="api-name" id="{html.escape(full)}">'
        f"<code>{html.escape(full)}</code>"
        f'{" <small>property</small>" if is_prop else ""}'
        f'<a class="anchor-link" href="#{html.escape(full)}">¶</a></h{2 + level}>'
        f'<pre class="sig">{html.escape(sig)}</pre><div class="doc">{_md(ast.get_docstring(fn) or "")}</div>'
        f"{_table(params, ret_row)}</div>"
    )


def _class_doc(cls: ast.ClassDef, comments, module: str) -> str:
    bases = ", ".join(ast.unparse(b) for b in cls.bases)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    fields = [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    if init is not None:
        params = _params(init, comments, skip_self=True)
    else:  # a dataclass: its annotated fields are its parameters
        params = [
            (
                f.target.id,
                ast.unparse(f.annotation),
                ast.unparse(f.value) if f.value is not None else "",
                comments.get(f.end_lineno, ""),
            )
            for f in fields
        ]
    sig = (
        _sig("class", cls.name + (f"({bases})" if bases and init is None and not fields else ""), params)
        if (params or init)
        else f"class {cls.name}" + (f"({bases})" if bases else "")
    )
    methods = [
        n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
    ]
    inner = "".join(_func_doc(m, comments, module, 2, cls.name) for m in methods)
    return (
        f'<div class="api api-l1"><h3 class="api-name" id="{cls.name}"><code>{cls.name}</code>'
        f'<a class="anchor-link" href="#{cls.name}">¶</a></h3><pre class="sig">{html.escape(sig)}</pre>'
        f'<div class="doc">{_md(ast.get_docstring(cls) or "")}</div>{_table(params)}{inner}</div>'
    )


def api_docs(src: str, module: str) -> tuple[str, list[str]]:
    "(HTML docs, names) of the public functions and classes an exported cell defines."
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise ValueError(f"exported cell does not parse: {e}") from None
    comments, out, names = _comments(src), [], []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            out.append(_func_doc(node, comments, module, 1))
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out.append(_class_doc(node, comments, module))
            names.append(node.name)
    return "".join(out), names


# ---------------------------------------------------------------- notebook -> page
def split_directives(src: str) -> tuple[dict, str]:
    "({directive: argument text}, source without `#|` lines)."
    dirs, keep = {}, []
    for line in src.splitlines():
        m = DIRECTIVE.match(line)
        if m:
            key, _, rest = m.group(1).replace(":", " ", 1).partition(" ")
            dirs[key.strip().lower()] = rest.strip()
        else:
            keep.append(line)
    return dirs, "\n".join(keep).strip("\n")


def _clean_outputs(outputs: list) -> list:
    out = []
    for o in outputs:
        data = o.get("data")
        if data is not None:
            for k in WIDGET_MIMES:
                data.pop(k, None)
            if not data:
                continue
        out.append(o)
    return out


def prepare(nb, nb_path: Path):
    "A copy of `nb` as the page shows it, and the exported names it documents."
    import nbformat

    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    module, cells, names = "", [], []
    alts = nb.metadata.setdefault("alt_text", {})  # image -> its cell's `#| fig-alt:` (the page sets it on the image)
    for c in nb.cells:
        if c.cell_type != "code":
            cells.append(c)
            continue
        dirs, src = split_directives(c.source)
        if "default_exp" in dirs:
            module = dirs["default_exp"]
        if "hide" in dirs or "exporti" in dirs or dirs.get("include", "").lower() == "false":
            continue
        c.outputs = _clean_outputs(c.get("outputs", []))
        for o in c.outputs if "fig-alt" in dirs else []:  # the cell's alt text, for each image it shows
            if "image/png" in o.get("data", {}):
                alts[_png_key(o["data"]["image/png"])] = dirs["fig-alt"]
        if dirs.get("output", "").lower() == "false":
            c.outputs = []
        if "export" in dirs or "exports" in dirs:
            docs, defined = api_docs(src, module)
            names += defined
            if "exports" in dirs:
                c.source = src
                cells.append(c)
            if docs:
                cells.append(
                    nbformat.v4.new_code_cell(
                        source="",
                        metadata={"tags": ["remove_input"]},
                        outputs=[nbformat.v4.new_output("display_data", data={"text/html": docs})],
                    )
                )
            continue
        c.source = src
        if dirs.get("echo", "").lower() == "false":
            c.metadata.setdefault("tags", []).append("remove_input")
        if not src.strip() and not c.outputs:
            continue
        if not src.strip():
            c.metadata.setdefault("tags", []).append("remove_input")
        cells.append(c)
    nb.cells = cells
    nb.nbformat, nb.nbformat_minor = 4, max(5, nb.get("nbformat_minor", 0))
    for i, c in enumerate(nb.cells):
        c["id"] = f"cell-{i}"  # clean notebooks carry no ids; nbformat 4.5 wants them
    return nb, names


CSS = """
*{box-sizing:border-box}
body{margin:0;font:16px/1.55 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;\
color:#1f2328;background:#fff}
.sidebar{position:fixed;top:0;left:0;bottom:0;width:250px;overflow-y:auto;padding:1.2rem 1rem;background:#f6f8fa;\
border-right:1px solid #d0d7de}
.sidebar .brand{display:block;font-weight:700;font-size:1.25rem;color:#1f2328;text-decoration:none;margin-bottom:1rem}
.sidebar ul{list-style:none;margin:0;padding:0}
.sidebar p.section{margin:1rem 0 .3rem;font-size:.8rem;font-weight:700;text-transform:uppercase;\
letter-spacing:.04em;color:#57606a}.sidebar li{margin:.15rem 0}
.sidebar a{color:#0969da;text-decoration:none}.sidebar a:hover{text-decoration:underline}
.sidebar li.current>a{font-weight:700;color:#1f2328}
.sidebar ul.api-toc{margin:.2rem 0 .5rem .8rem;font-size:.85rem}
main{margin-left:250px;padding:1.5rem 2.5rem 4rem;max-width:1150px}
h1,h2,h3,h4{line-height:1.25}h1{border-bottom:1px solid #d0d7de;padding-bottom:.3rem}
a.anchor-link{visibility:hidden;margin-left:.3rem;text-decoration:none;color:#8c959f}
h1:hover a.anchor-link,h2:hover a.anchor-link,h3:hover a.anchor-link,h4:hover a.anchor-link{visibility:visible}
code{font:.88em/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#eff1f3;padding:.1em .3em;\
border-radius:4px}
pre{font:.85rem/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;overflow-x:auto}
pre code{background:none;padding:0}
blockquote{margin:0 0 1rem;padding:.1rem 1rem;border-left:4px solid #d0d7de;color:#57606a}
.cell{margin:.8rem 0}
.input_area{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.1rem .8rem}
.output_area pre,.output_subarea pre{margin:.3rem 0;padding:.3rem .8rem;background:#fff;border-left:3px solid #d0d7de}
.output_stderr pre{background:#fff5f5;border-left-color:#cf222e}
.output_png img,.output_jpeg img,.output_svg svg,.output_area img{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.3rem .6rem;text-align:left;vertical-align:top}
thead th{background:#f6f8fa}
.rendered_html table td p,.params td p{margin:0}
.api{margin:1.2rem 0 1.6rem;padding:.2rem 0 .2rem 1rem;border-left:4px solid #0969da}
.api .api{border-left-color:#8c959f;margin:1rem 0}
.api-name{margin:.4rem 0}.api-name small{font-weight:400;color:#57606a}
pre.sig{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.5rem .8rem;white-space:pre-wrap}
.doc p{margin:.4rem 0}
footer{margin-top:3rem;color:#57606a;font-size:.85rem}
"""


def page_html(title: str, body: str, nav: str, css: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="data:,"><title>{html.escape(title)}</title><style>{css}</style></head>\n'
        f'<body><nav class="sidebar">{nav}</nav>\n<main>{body}\n'
        f'<footer>Generated from the notebook by tools/build_docs.py.</footer></main></body></html>\n'
    )


def _png_key(b64: str) -> str:
    "An image output's key: the hash of its base64 text without line breaks (as the page's `src` holds it)."
    return hashlib.sha256(re.sub(r"\s", "", b64).encode()).hexdigest()


NO_ALT = 'alt="No description has been provided for this image"'  # what nbconvert gives an image without one


def with_alt_text(body: str, alts: dict) -> str:
    "Each output image gets its cell's `#| fig-alt:` text in place of nbconvert's placeholder."
    def one(m: re.Match) -> str:
        src = re.search(r'src="data:image/png;base64,([^"]+)"', m[0])
        alt = src and alts.get(_png_key(src[1]))
        return m[0].replace(NO_ALT, f'alt="{html.escape(alt)}"') if alt else m[0]
    return re.sub(r"<img\b[^>]*>", one, body)


def local_refs(body: str, nbs: Path) -> str:
    "Links to another notebook point at its page; images from nbs/images/ are inlined, as every output image is."
    body = re.sub(r'href="(\w+)\.ipynb"', lambda m: f'href="{page_name(Path(m[1] + ".ipynb"))}"', body)
    return re.sub(r'src="(images/[\w.-]+\.png)"',
                  lambda m: f'src="data:image/png;base64,{base64.b64encode((nbs / m[1]).read_bytes()).decode()}"', body)


def _trusted(element) -> str:
    "nbconvert's `clean_html` for pages made from this repository's notebooks: the HTML as it is."
    return element.decode() if isinstance(element, bytes) else str(element)


def render(nb_path: Path) -> tuple[str, str, list[str]]:
    "(title, body HTML, documented names) of one notebook."
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    with warnings.catch_warnings():  # clean notebooks carry no cell ids; nbformat warns about it on read
        warnings.simplefilter("ignore")
        nb = nbformat.read(nb_path, as_version=4)
    title = title_of(nb) or nb_path.stem
    page_nb, names = prepare(nb, nb_path)
    ex = HTMLExporter(template_name="basic", exclude_input_prompt=True, exclude_output_prompt=True)
    ex.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    ex.register_filter("clean_html", _trusted)  # our own notebooks: bleach's sanitizing was 40% of the build
    body, _ = ex.from_notebook_node(page_nb)
    body = with_alt_text(local_refs(body, nb_path.parent), page_nb.metadata.get("alt_text", {}))
    ext = re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*[\"']?(?:https?:)?//", body, re.I)
    if ext:
        raise ValueError(
            f"the page would load {len(ext)} external resource(s), e.g. {ext[0]!r}: the site must work offline"
        )
    return title, body, names


def nav_html(groups: list[tuple[str, list[tuple[str, str]]]], current: str, names: list[str]) -> str:
    "The sidebar: each section's title over its (page, label) links; the current page lists its API."
    out = ['<a class="brand" href="index.html">dormouse</a>']
    for title, pages in groups:
        head = f'<p class="section">{html.escape(title)}</p>' if title else ""
        out.append(f'{head}<ul>{"".join(_nav_items(pages, current, names))}</ul>')
    return "".join(out)


def _nav_items(pages: list[tuple[str, str]], current: str, names: list[str]) -> list[str]:
    items = []
    for name, label in pages:
        cur = name == current
        toc = (
            (
                "<ul class=\"api-toc\">"
                + "".join(f'<li><a href="#{html.escape(n)}"><code>{html.escape(n)}</code></a></li>' for n in names)
                + "</ul>"
            )
            if cur and names
            else ""
        )
        cls = ' class="current"' if cur else ""
        items.append(f'<li{cls}><a href="{name}">{html.escape(label)}</a>{toc}</li>')
    return items


def build(out: Path, nbs: Path) -> list[str]:
    "Write the site into `out` (replaced); returns the failures, one line each."
    from pygments.formatters import HtmlFormatter

    paths = notebooks(nbs)
    if not paths:
        return [f"no notebooks in {nbs}"]
    if out.resolve() in (ROOT.resolve(), nbs.resolve()) or (out / ".git").exists():
        return [f"refusing to replace {out}: not a build directory"]
    css = CSS + HtmlFormatter(style="default").get_style_defs(".highlight")
    extra = nbs / "styles.css"
    if extra.exists():
        css += "\n" + extra.read_text()
    rendered, failures = [], []
    for p in paths:
        try:
            rendered.append((p, *render(p)))
        except Exception as e:  # report every broken notebook, not just the first
            failures.append(f"{p.relative_to(nbs.parent) if nbs.parent in p.parents else p}: {type(e).__name__}: {e}")
    names = [page_name(p) for p in paths]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        failures.append(f"two notebooks map to the same page: {sorted(dup)}")
    label = {p: "dormouse" if p.stem == "index" else (t.split(" — ")[0].strip() or p.stem) for p, t, _, _ in rendered}
    groups, missing = layout(nbs)
    fix = "python tools/build_docs.py --sidebar"
    failures += [f"nbs/sidebar.yml lists {n}, which does not exist ({fix})" for n in missing]
    nav = [(title, [(page_name(p), label[p]) for p in ps if p in label]) for title, ps in groups]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for p, title, body, api in rendered:
        (out / page_name(p)).write_text(
            page_html(title, body, nav_html(nav, page_name(p), api), css), encoding="utf-8"
        )
    return failures


def _doc_path() -> str:
    cp = configparser.ConfigParser()
    cp.read(ROOT / "settings.ini")
    return cp.get("DEFAULT", "doc_path", fallback="_docs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="output directory (default: settings.ini doc_path, _docs); replaced")
    ap.add_argument("--nbs", default=str(ROOT / "nbs"), help="notebook directory")
    ap.add_argument("--sidebar", action="store_true", help="also write nbs/sidebar.yml (the Quarto sidebar)")
    a = ap.parse_args(argv)
    nbs, out = Path(a.nbs), Path(a.out) if a.out else ROOT / _doc_path()
    if a.sidebar:
        (nbs / "sidebar.yml").write_text(sidebar_yml(nbs))
    failures = build(out, nbs)
    n = len(list(out.glob("*.html"))) if out.exists() else 0
    for f in failures:
        print(f"FAILED {f}", file=sys.stderr)
    print(f"wrote {n} page(s) to {out}" + (f"; {len(failures)} notebook(s) failed" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
