"""The worked examples of docs/contributing.md, as the tests run them: the code block that
follows a line of the guide, executed as a module of its own (so that the guide cannot drift
from what works)."""

from __future__ import annotations

import sys
import types

from repository import ROOT

GUIDE = ROOT / "docs" / "contributing.md"


def documented_block(after: str, language: str = "python") -> str:
    """The first ``language`` code block of the guide after the text ``after``."""
    text = GUIDE.read_text(encoding="utf-8")
    if after not in text:
        raise AssertionError(f"docs/contributing.md no longer says {after!r}")
    fence = f"```{language}\n"
    start = text.index(fence, text.index(after)) + len(fence)
    return text[start:text.index("\n```", start)]


def documented_module(after: str, name: str, preamble: str = "") -> types.ModuleType:
    """The python block after ``after``, run as the module ``name`` (``preamble``: the imports a
    fragment of a longer file takes from around it)."""
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses and pickling look classes up here
    exec(compile(preamble + documented_block(after), str(GUIDE), "exec"), module.__dict__)
    return module
