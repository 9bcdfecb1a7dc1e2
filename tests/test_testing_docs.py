"""docs/testing.md's examples run, in order, as one test: the test kit's documentation is true."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_testing_docs_examples_run():
    blocks = code_blocks(DOC.read_text())
    assert len(blocks) >= 5
    namespace: dict = {"__name__": "testing_docs"}
    for number, block in enumerate(blocks, start=1):
        code = compile(block, f"{DOC.name} block {number}", "exec")
        exec(code, namespace)
