"""The library reads in small pieces: no function's body runs over 40 lines (its signature, one line per argument
with its docments comment, and its docstring not counted), so a reader sees each one whole on a screen."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LONGEST = 40


def body_lines(fn: ast.FunctionDef) -> int:
    "Lines from the first statement after the docstring to the function's end."
    first = fn.body[1] if len(fn.body) > 1 and isinstance(fn.body[0], ast.Expr) and isinstance(
        getattr(fn.body[0], "value", None), ast.Constant) else fn.body[0]
    return fn.end_lineno - first.lineno + 1


def long_functions(src: str) -> list[tuple[str, int]]:
    return [(n.name, body_lines(n)) for n in ast.walk(ast.parse(src))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(n) > LONGEST]


def test_no_function_body_is_over_40_lines():
    long = [(p.name, *f) for p in sorted((ROOT / "dormouse").glob("*.py")) if p.name != "_modidx.py"
            for f in long_functions(p.read_text())]
    assert not long, f"functions whose body is over {LONGEST} lines (split them where they change subject): {long}"


def test_the_length_scan_can_fail():
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST + 1))
    assert long_functions(f'def f(a,  # a\n      b):\n    "Doc."\n{body}\n') == [("f", LONGEST + 1)]
    assert long_functions('def f():\n    "Doc."\n' + "\n".join(body.splitlines()[:LONGEST]) + "\n") == []
