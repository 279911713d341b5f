#!/usr/bin/env python3
"""Write README.md from nbs/index.ipynb without Quarto (nbdev_readme needs Quarto, which this machine cannot install).

Markdown cells are copied as they are; code cells are shown as python blocks with their text outputs.
Usage: python tools/build_readme.py [--check]   (--check exits 1 if README.md is stale)
"""

import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(nb_path: Path) -> str:
    nb = json.loads(nb_path.read_text())
    out = ["<!-- generated from nbs/index.ipynb by tools/build_readme.py; edit the notebook, not this file -->\n"]
    for cell in nb["cells"]:
        src = "".join(cell["source"]).strip()
        if not src or src.startswith("#| hide"):
            continue
        if cell["cell_type"] == "markdown":
            out.append(src + "\n")
        else:
            if not src.startswith("#| echo: false"):  # as nbdev shows such a cell: its output without its code
                out.append("```python\n" + src + "\n```\n")
            for o in cell.get("outputs", []):
                text = "".join(o.get("text", []) or o.get("data", {}).get("text/plain", []))
                if text.strip():
                    out.append("```\n" + text.rstrip() + "\n```\n")
    return for_the_root("\n".join(out))


def for_the_root(text: str) -> str:
    "The notebook's links are relative to nbs/ (where it lives); README's to the repository's root."
    return re.sub(r"\]\((images/[^)]+|\w+\.ipynb)\)", r"](nbs/\1)", text)


if __name__ == "__main__":
    text = render(ROOT / "nbs" / "index.ipynb")
    readme = ROOT / "README.md"
    if "--check" in sys.argv:
        if not readme.exists() or readme.read_text() != text:
            print("README.md is stale: run `python tools/build_readme.py` and commit it.")
            sys.exit(1)
    else:
        readme.write_text(text)
