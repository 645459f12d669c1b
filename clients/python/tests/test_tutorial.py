"""The README's tutorial runs (issue 20: "a README tutorial ... whose code a test runs"): every
```python block of clients/python/README.md after the "Tutorial" heading, in order, in one
namespace, against the real binary, with HISTORYD_ADDR pointing at it. The blocks' own asserts
are the checks; this test adds that there are blocks and that they ran to the end."""

from __future__ import annotations

import os
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def tutorial_blocks() -> list:
    text = README.read_text()
    tutorial = text[text.index("## Tutorial") :]
    return re.findall(r"^```python\n(.*?)^```$", tutorial, flags=re.S | re.M)


def test_readme_tutorial_runs(server, monkeypatch, capsys) -> None:
    blocks = tutorial_blocks()
    assert len(blocks) >= 8, "the tutorial's code blocks were found"
    monkeypatch.setenv("HISTORYD_ADDR", server.addr)
    namespace: dict = {"__name__": "tutorial"}
    for i, block in enumerate(blocks):
        code = compile(block, f"{README}:block{i + 1}", "exec")
        exec(code, namespace)  # noqa: S102 (the README's own code)
    out = capsys.readouterr().out
    assert "ERROR_REASON_SEQUENCE_MISMATCH 6" in out, "the error example printed its reason and head"
    assert "Output: 42" in out
    assert os.environ["HISTORYD_ADDR"] == server.addr
