"""docs/trainer-contract.md: its example is the reference trainer's code, and the advice that lost work
(exit with any code, sys.exit(0) after the emergency checkpoint, os.makedirs on an s3:// URI) is gone."""

from __future__ import annotations

import ast
import re

from .conftest import ROOT

DOC = ROOT / "docs" / "trainer-contract.md"


def test_the_example_is_the_trainer_loop() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- BEGIN generated: trainer-loop -->\n```python\n# [^\n]*\n(.*?)```", text, re.S)
    assert block, "the generated trainer-loop block is missing"
    source = (ROOT / "placement" / "trainer" / "loop.py").read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert block.group(1) == "\n".join(source.splitlines()[fn.lineno - 1:fn.end_lineno]) + "\n"


def test_the_wrong_advice_is_gone() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert "Exit with any code" not in text
    assert "sys.exit(0)" not in text
    code = "".join(re.findall(r"```python\n(.*?)```", text, re.S))
    assert "os.makedirs" not in code and "return env.retry_exit_code" in code
