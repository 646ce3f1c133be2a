"""Where the repository is, for the tests that read its own files (suites, docs, sources)."""

from pathlib import Path

#: The repository's root folder: this file is ``tests/repository.py``.
ROOT = Path(__file__).resolve().parent.parent
