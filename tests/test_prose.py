"""The prose stays true to the code: every object the chapters and README name (`dormouse.module.name`, or `module.name`
in backticks for a kit module) exists; the counts the decisions chapter states are the code's; every rule is cited in
one form; and each chapter's closing line names the tests that guard it as `tools/chapter_tests.py` generates it."""

import importlib, importlib.util, json, re, sys
from pathlib import Path

from dormouse.config import PROGRESS_KEYS, field_names

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
MODULES = sorted(p.stem for p in (ROOT / "dormouse").glob("*.py") if not p.stem.startswith("_"))
FULL = re.compile(r"\bdormouse(?:\.[A-Za-z_][A-Za-z0-9_]*)+")  # dormouse.module.name
AMBIGUOUS = {"model"}  # `model.x` in prose is the network a chapter holds (`model.compile()`) or a plan key
NAMES = "|".join(sorted(set(MODULES) - AMBIGUOUS))
SHORT = re.compile(rf"`({NAMES})((?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")  # `module.name` in backticks
FILE_SUFFIXES = {"toml", "jsonl", "json", "py", "ipynb", "png", "dmck", "ngram", "ngdelta", "db", "lock", "tmp"}
NOT_OBJECTS = {"dormouse.run_id", "dormouse.run_dir", "dormouse.version"}  # MLflow tag names the track chapter lists
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def prose(comments: bool = True) -> dict[str, list[str]]:
    "The prose of every chapter (markdown cells, and the comments of code cells) and of README (outside code blocks)."
    out = {}
    for nb in NBS:
        texts = []
        for c in json.loads(nb.read_text())["cells"]:
            src = "".join(c["source"])
            if c["cell_type"] == "markdown":
                texts.append(src)
            elif comments:
                texts += [line[line.index("#"):] for line in src.splitlines() if "#" in line]
        out[nb.relative_to(ROOT).as_posix()] = texts
    readme = re.sub(r"```.*?```", "", (ROOT / "README.md").read_text(), flags=re.S)
    out["README.md"] = [readme]
    return out


def resolve(dotted: str) -> bool:
    "Whether `dotted` (dormouse.module.name...) names a real object: the longest importable module, then attributes."
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def references(texts: dict[str, list[str]]) -> set[tuple[str, str]]:
    "(file, dotted name) for every object the prose names."
    config_keys = set(field_names())
    refs = set()
    for f, chunks in texts.items():
        for t in chunks:
            refs |= {(f, m.rstrip(".")) for m in FULL.findall(t) if m.rstrip(".") not in NOT_OBJECTS}
            for mod, rest in SHORT.findall(t):
                if rest.rsplit(".", 1)[-1] in FILE_SUFFIXES or f"{mod}{rest}" in config_keys:
                    continue  # a file name (`config.toml`), or a dotted plan key (`model.depth`)
                refs.add((f, f"dormouse.{mod}{rest}"))
    return refs


def test_every_object_the_prose_names_exists():
    refs = references(prose())
    assert len(refs) > 100, f"only {len(refs)} references found: the scan is broken"
    gone = sorted(f"{f}: {r}" for f, r in refs if not resolve(r))
    assert not gone, "the prose names objects the library does not have:\n" + "\n".join(gone)


def test_the_scan_can_fail():
    texts = {"x.ipynb": ["see `dormouse.data.no_such_thing` and `checkpoints.plan_missing`, then `config.toml`"]}
    refs = references(texts)
    assert refs == {("x.ipynb", "dormouse.data.no_such_thing"), ("x.ipynb", "dormouse.checkpoints.plan_missing")}
    assert not any(resolve(r) for _, r in refs) and resolve("dormouse.parts.plan_lacks")


def test_every_function_the_map_places_a_step_in_exists():
    "The decisions chapter's 'where things happen': every row names a function, and each exists."
    table = re.search(r"^## where things happen\n(.*?)\nProved by:", decisions(), re.S | re.M)
    assert table, "the decisions chapter has no 'where things happen' table"
    rows = [r for r in table[1].splitlines() if r.startswith("| ") and not r.startswith("| what")]
    named = [(r, FULL.findall(r)) for r in rows]
    assert len(rows) >= 10 and all(n for _, n in named), [r for r, n in named if not n]
    gone = [n for _, ns in named for n in ns if not resolve(n)]
    assert not gone, f"the map names functions that do not exist: {gone}"


def readme_layers() -> list[tuple[str, list[str]]]:
    "README's layers in order: (name, its modules), the showcase (notebooks, not modules) left out."
    chapters = re.search(r"^## The chapters\n(.*?)(?=^## |\Z)", (ROOT / "README.md").read_text(), re.S | re.M)
    assert chapters, "README has no '## The chapters' section"
    lines = [ln for ln in chapters[1].splitlines() if ln.startswith("- **")]
    out = [(re.match(r"- \*\*(.+?)\*\*", ln)[1], re.findall(r"`(\w+)`", ln)) for ln in lines]
    return [(name, mods) for name, mods in out if name != "Showcase"]


def kit_imports(module: str) -> set[str]:
    "The kit's modules `module` imports, at its top or inside a function: `from .x import`, `import dormouse.x`."
    src = (ROOT / "dormouse" / f"{module}.py").read_text()
    found = re.findall(r"^\s*from \.(\w+) import", src, re.M) + re.findall(r"^\s*import dormouse\.(\w+)", src, re.M)
    return set(found)


def test_readme_lists_every_module_in_its_layers():
    listed = [m for _, mods in readme_layers() for m in mods]
    missing = sorted(set(MODULES) - set(listed))
    assert not missing, f"README's layer list omits the modules {missing}"
    assert len(listed) == len(set(listed)), f"README places a module in two layers: {listed}"


def test_no_module_imports_a_module_of_a_later_layer():
    "The layers are the imports: a module reads only its own layer and the ones before it in README's list."
    layer = {m: i for i, (_, mods) in enumerate(readme_layers()) for m in mods}
    names = [name for name, _ in readme_layers()]
    up = [f"{m} ({names[layer[m]]}) imports {i} ({names[layer[i]]})" for m in MODULES if m in layer
          for i in sorted(kit_imports(m)) if i in layer and layer[i] > layer[m]]
    assert not up, f"modules import from a later layer than README places them in: {up}"
    assert kit_imports("train") >= {"step", "view"}  # the scan sees imports (a test that reads nothing passes all)


def decisions() -> str:
    cells = json.loads((ROOT / "nbs" / "01_decisions.ipynb").read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells)


def test_the_counts_the_decisions_chapter_states_are_the_codes():
    from dormouse.replay import VERIFY_STEPS

    text = decisions()
    m = re.search(r"Exactly (\w+) keys may change on a resume: ([^(]+)\(`PROGRESS_KEYS`\)", text)
    assert m, "the decisions chapter no longer states how many keys may change on a resume"
    listed = set(re.findall(r"\w+", m[2].replace("`", "")))
    assert WORDS[m[1]] == len(PROGRESS_KEYS) and listed == PROGRESS_KEYS, (m[0], sorted(PROGRESS_KEYS))
    m = re.search(r"(\d+) by default, `replay\.VERIFY_STEPS`", text)
    assert m and int(m[1]) == VERIFY_STEPS, (m and m[0], VERIFY_STEPS)
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"Change anything but `([^`]+)`", readme)
    assert m and set(m[1].split(", ")) == PROGRESS_KEYS, (m and m[0], sorted(PROGRESS_KEYS))
    m = re.search(r"the first (\d+) steps of the interval before its checkpoint \(`verify_steps`\)", readme)
    assert m and int(m[1]) == VERIFY_STEPS, (m and m[0], VERIFY_STEPS)


def tool(name: str):
    "A module of tools/ (not a package), imported by path."
    spec = importlib.util.spec_from_file_location(f"_tools_{name}", ROOT / "tools" / f"{name}.py")
    mod = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))  # dataclasses look it up
    spec.loader.exec_module(mod)
    return mod


def test_mutants_the_decisions_chapter_names_exist():
    names = {m.name for m in tool("mutants").MUTANTS}
    cited = re.findall(r"`(\w+)`", re.search(r"the mutants (.+)", decisions())[1])
    assert cited and not set(cited) - names, sorted(set(cited) - names)


def rule_names() -> set[str]:
    return set(re.findall(r"^## (.+?)\s*$", decisions(), re.M))


ITALIC = re.compile(r"\(\*([A-Za-z][\w ',]* [\w ',]*\w)\*")  # a rule or a section cited in italics, in brackets


def odd_citations(text: str, rules: set[str], headings: set[str]) -> list[str]:
    "Italic citations that are a rule (cited with `rule: ` in brackets instead) or no section of any chapter."
    return [n for n in ITALIC.findall(text) if n.lower() in rules or n.lower() not in headings]


def test_rules_are_cited_in_one_form():
    rules = {r.lower() for r in rule_names()}
    headings = {h.strip().lower() for chunks in prose(False).values() for t in chunks
                for h in re.findall(r"^#+ (.+)$", t, re.M)}
    files = [*ROOT.glob("dormouse/*.py"), *ROOT.glob("tests/*.py"), *(nb for nb in NBS if nb.stem != "01_decisions")]
    files = [p for p in files if p != Path(__file__)]
    odd = sorted((p.relative_to(ROOT).as_posix(), n) for p in files
                 for n in odd_citations(p.read_text(), rules, headings))
    assert not odd, f"cite a rule by its name after `(rule: `, as test_decisions.py checks: {odd}"
    planted = "kept (*nothing lost*), named (*indexed data*), shown (*the overlap check*)"
    assert odd_citations(planted, rules, headings) == ["nothing lost", "indexed data"]


def test_every_chapter_ends_with_the_tests_that_guard_it():
    tool_ = tool("chapter_tests")
    assert tool_.stale() == [], "run `python tools/chapter_tests.py --write`"
    found = tool_.guards()
    assert {"tests/test_prose.py", "tests/test_decisions.py"} <= set(found["01_decisions.ipynb"])  # they read it
    assert "tests/test_background_ckpt.py" in found["30_commit.ipynb"]  # it imports dormouse.commit
    assert "nbs/32_view.ipynb" in found["31_rundir.ipynb"]  # a mutant of rundir.py is killed there
    line = tool_.line("x.ipynb", ["tests/test_a.py", "nbs/y.ipynb"])
    assert "`tests/test_a.py`" in line and "`nbs/y.ipynb`" in line and line != tool_.line("x.ipynb", [])


def test_readme_is_a_landing_page():
    """README is at most 1,200 words outside code blocks, shows the continuity figure (which its chapter writes) in its
    first 40 lines, and types no measured figure by hand: every decimal it shows is printed from a result file."""
    text = (ROOT / "README.md").read_text()
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    assert len(prose.split()) <= 1200, f"README is {len(prose.split())} words outside code blocks"
    head = "\n".join(text.splitlines()[:40])
    assert "](nbs/images/continuity.png)" in head and (ROOT / "nbs" / "images" / "continuity.png").is_file()
    chapter = (ROOT / "nbs" / "00_resume_continuity.ipynb").read_text()
    assert "fig.savefig(" in chapter and '\\"continuity.png\\"' in chapter, "the continuity chapter no longer writes it"
    typed = re.findall(r"\b\d+\.\d+\b", re.sub(r"`[^`]*`", "", prose))
    assert not typed, f"README's prose types figures by hand (print them from bench/results instead): {typed}"


def test_the_sidebar_and_the_numbering_follow_readmes_layers():
    "One list of layers, README's: the sidebar's sections are its layers in order, and `ls nbs/` reads as the sidebar."
    import yaml

    contents = yaml.safe_load((ROOT / "nbs" / "sidebar.yml").read_text())["website"]["sidebar"]["contents"]
    sections = [(item["section"], [re.sub(r"^\d+_", "", Path(n).stem) for n in item["contents"]])
                for item in contents if isinstance(item, dict)]
    want = [(name, [m for m in mods if (ROOT / "dormouse" / f"{m}.py").exists()]) for name, mods in readme_layers()]
    assert sections == want, f"nbs/sidebar.yml's sections are not README's layers: {sections} != {want}"
    order = [n for item in contents for n in ([item] if isinstance(item, str) else item["contents"])][1:]
    assert order[0] == "00_resume_continuity.ipynb" and contents[0] == "index.ipynb", order[:2]
    assert order == sorted(order) and all(re.fullmatch(r"\d\d_[a-z_]+\.ipynb", n) for n in order), order


def test_no_chapter_types_a_figure_of_the_report_by_hand():
    """The default run's report figures (bench/results/default_run.json) reach a chapter only as printed output: no
    markdown cell and no comment line of a chapter's code types one (each would go stale at the next measurement)."""
    report = json.loads((ROOT / "bench" / "results" / "default_run.json").read_text())["report"]
    figures = set(re.findall(r"\b\d\.\d{3}\b", "\n".join(report)))
    assert len(figures) > 20, figures  # the scan reads the report
    typed = []
    for p in NBS:
        for c in json.loads(p.read_text())["cells"]:
            src = "".join(c["source"])
            text = src if c["cell_type"] == "markdown" else "\n".join(re.findall(r"^\s*#.*", src, re.M))
            typed += [f"{p.name} {c.get('id')}: {f}" for f in sorted(set(re.findall(r"\b\d\.\d{3}\b", text)) & figures)]
    assert not typed, f"chapters type the report's figures by hand (print them from the result file): {typed}"


MEASURED = re.compile(r"(?<![\w.^-])\d[\d,]*(?:\.\d+)?(?:\s*[–-]\s*\d[\d.]*)?\s*(?:x\b|×|ms\b|s\b|seconds?\b|GB/s|MB/s|"
                      r"GiB/s|steps/s|tokens/s|%|s/MB|min\b|minutes?\b|bits/byte|bits per byte)")
DEFINED = {  # (where, phrase): figures the prose states that no bench measures: a definition, a constant, arithmetic
    ("nbs/02_fsio.ipynb", "30 seconds"),  # the FIFO watchdog's wait, a constant of the code beside it
    ("nbs/03_config.ipynb", "5 minutes"),  # the default run's target length
    ("nbs/14_quant.ipynb", "50x"),  # the outlier the example constructs
    ("nbs/15_digest.ipynb", "3%"),  # 8 bytes against 4 * 64: arithmetic
    ("nbs/18_stress.ipynb", "99.9%"),  # the definition of the p99.9 norm
    ("nbs/21_mix.ipynb", "10%"), ("nbs/21_mix.ipynb", "5%"),  # the dev and test corpora's held-out fractions
    ("nbs/51_ab_stats.ipynb", "95%"), ("nbs/52_ab.ipynb", "95%"),  # the interval's level
    ("nbs/index.ipynb", "95%"), ("README.md", "95%"),  # the same
}


def test_no_chapter_types_a_measured_figure():
    """A time, a rate, a ratio, a share or a score in prose (markdown, code comments, README) is a measurement: it is
    printed from a result file under bench/results/ by a code cell (so a rerun of the bench changes it), never typed.
    What is defined rather than measured is listed in DEFINED with its reason."""
    typed = [f"{where}: {m.group(0)!r}" for where, texts in prose().items() for text in texts
             for m in MEASURED.finditer(text) if (where, m.group(0)) not in DEFINED]
    assert not typed, f"measured figures typed in prose (print them from bench/results/*.json): {typed}"


def test_the_measured_figure_scan_can_fail():
    "The scan finds the figures it is meant to: a time, a rate, a ratio, a share, a score."
    text = "a step took 137 ms, xxh3_64 27 GB/s, 1.04–1.14x, 0.65% of CPU, 0.007 bits/byte, 27.8 steps/s, 3–4 s"
    assert len(MEASURED.findall(text)) == 7
    assert not MEASURED.findall("2^22 slots, 4 MiB slices, order 32, 2 GiB, xxh3_64, 83 files, step 40")
