"""The decisions chapter stays true: every test it names exists, and every rule a comment or a chapter cites by name
(`(rule: NAME)`) is a rule of nbs/01_decisions.ipynb."""

import json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "nbs" / "01_decisions.ipynb"
CITE = re.compile(r"\(rule: ((?:[^()]|\([^()]*\))+)\)")  # a name may hold one (...)


def chapter_text() -> str:
    cells = json.loads(CHAPTER.read_text())["cells"]
    assert all(c["cell_type"] == "markdown" for c in cells), "the decisions chapter is prose only: it exports nothing"
    return "\n\n".join("".join(c["source"]) for c in cells)


def rule_names() -> list[str]:
    return re.findall(r"^## (.+?)\s*$", chapter_text(), re.M)


def test_every_test_the_chapter_names_exists():
    text = chapter_text()
    named = re.findall(r"`tests/(test_\w+\.py)::(test_\w+)`", text)
    assert len(named) >= 20, f"the chapter names {len(named)} tests: each rule needs the tests that prove it"
    gone = [f"{f}::{t}" for f, t in named if not re.search(rf"^def {t}\(", (ROOT / "tests" / f).read_text(), re.M)]
    assert not gone, f"nbs/01_decisions.ipynb names tests that do not exist: {gone}"


def test_every_rule_has_a_unique_name_and_its_proof():
    names = rule_names()
    assert len(names) == len(set(names)) and len(names) >= 8, names
    for section in re.split(r"^## ", chapter_text(), flags=re.M)[1:]:
        assert "Proved by:" in section, f"rule {section.splitlines()[0]!r} names no test"


def test_every_cited_rule_is_a_rule_of_the_chapter():
    names = set(rule_names())
    files = [*ROOT.glob("dormouse/*.py"), *ROOT.glob("nbs/*.ipynb"), *ROOT.glob("tests/*.py"), *ROOT.glob("tools/*.py")]
    here = Path(__file__)
    cited = {(p.relative_to(ROOT).as_posix(), n) for p in files if p != here for n in CITE.findall(p.read_text())}
    unknown = sorted((f, n) for f, n in cited if n not in names)
    assert not unknown, f"these cite a rule the decisions chapter does not have (names: {sorted(names)}): {unknown}"
    assert cited, "no comment cites a rule by name"
