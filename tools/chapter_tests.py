#!/usr/bin/env python3
"""Write, at the end of every chapter, the line that names the tests guarding it, so a reader who changes a module
finds its tests from the chapter.

A chapter (`nbs/*.ipynb` but `index`) is guarded by its own test cells (`nbdev_test --path`), by every test file that
imports its module (`dormouse.<module>`) or names the chapter's notebook, and by every test file and notebook in the
kill set of a mutant of `tools/mutants.py` that edits its module. The line is the chapter's last cell (id `chaptests`),
generated here and never edited by hand; `tests/test_prose.py` fails when one is stale or missing.
Usage: python tools/chapter_tests.py --write | --check   (--check exits 1 naming each stale chapter)
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELL_ID = "chaptests"
LEAD = "**Tests that guard this chapter:**"


def chapters() -> list[Path]:
    "Every chapter: the notebooks but `index`, which is README."
    return [p for p in sorted((ROOT / "nbs").glob("*.ipynb")) if p.stem != "index"]


def module_of(nb: Path) -> str | None:
    "The module a chapter exports (`#| default_exp NAME`), or None for a chapter of prose and demos."
    m = re.search(r"#\| default_exp (\w+)", nb.read_text())
    return m[1] if m else None


def mutant_guards(root: Path = ROOT) -> dict[str, set[str]]:
    "{module: the test files and notebooks in the kill sets of the mutants that edit it}."
    spec = importlib.util.spec_from_file_location("_chapter_tests_mutants", root / "tools" / "mutants.py")
    mutants = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))  # dataclasses look it up
    spec.loader.exec_module(mutants)
    out: dict[str, set[str]] = {}
    for m in mutants.MUTANTS:
        kill = {k.split("::")[0] for k in m.kill}
        for file, *_ in m.edits:
            out.setdefault(Path(file).stem, set()).update(kill)
    return out


def guards(root: Path = ROOT) -> dict[str, list[str]]:
    "{chapter file name: the test files and notebooks that guard it, sorted}."
    tests = {p.relative_to(root).as_posix(): p.read_text() for p in sorted((root / "tests").glob("test_*.py"))}
    by_mutant = mutant_guards(root)
    out = {}
    for nb in chapters():
        mod = module_of(nb)
        found = set(by_mutant.get(mod, set())) if mod else set()
        for path, text in tests.items():
            if nb.stem in text or (mod and re.search(rf"\bdormouse\.{mod}\b", text)):
                found.add(path)
        found.discard(f"nbs/{nb.name}")
        out[nb.name] = sorted(found, key=lambda p: (p.startswith("nbs/"), p))
    return out


def line(nb_name: str, found: list[str]) -> str:
    "The chapter's closing line."
    own = f"its own test cells (`nbdev_test --path nbs/{nb_name}`)"
    files = [f"`{p}`" for p in found if p.startswith("tests/")]
    notebooks = [f"`{p}`" for p in found if p.startswith("nbs/")]
    parts = [own] + ([", ".join(files)] if files else [])
    parts += [f"the notebooks {', '.join(notebooks)}"] if notebooks else []
    return f"{LEAD} {'; '.join(parts)} (written by `tools/chapter_tests.py`)."


def current(nb: Path) -> str | None:
    "The chapter's closing line as it stands (None: it has none)."
    cells = json.loads(nb.read_text())["cells"]
    last = cells[-1] if cells else {}
    return "".join(last["source"]) if last.get("id") == CELL_ID else None


def write(nb: Path, text: str) -> None:
    "Put `text` as the chapter's last cell, replacing the generated one if there is one."
    d = json.loads(nb.read_text())
    if d["cells"] and d["cells"][-1].get("id") == CELL_ID:
        d["cells"].pop()
    d["cells"].append({"cell_type": "markdown", "id": CELL_ID, "metadata": {}, "source": [text]})
    nb.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")


def stale() -> list[str]:
    "Chapters whose closing line is missing or not what the tests and mutants say today."
    return [name for name, found in guards().items() if current(ROOT / "nbs" / name) != line(name, found)]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        bad = stale()
        if bad:
            print(f"stale or missing test lines in {', '.join(bad)}: run `python tools/chapter_tests.py --write`")
        return 1 if bad else 0
    if argv == ["--write"]:
        for name, found in guards().items():
            text = line(name, found)
            if current(ROOT / "nbs" / name) != text:
                write(ROOT / "nbs" / name, text)
                print(f"nbs/{name}: {len(found)} guards")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
