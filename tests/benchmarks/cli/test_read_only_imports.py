"""The commands that read results answer at once: ``compare``, ``leaderboard``, ``report`` and
``list`` import neither torch nor Lightning (importing them took 7 s of a quiet machine and 21 s
of a busy one before the command looked at its arguments), a bad path is refused before any heavy
import, and what they write from the metrics kept for this source is what the registries say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import benchmarks
from benchmarks.cli import listing, main
from benchmarks.infra import source_cache
from benchmarks.run import metrics

ROOT = Path(benchmarks.__file__).resolve().parent.parent  # the code under test
#: What a command that reads results has no use for: the deep-learning stack, the protocols'
#: registry that imports it, Ray, scikit-learn, and matplotlib where no figure is drawn.
HEAVY = ("torch", "lightning", "torchvision", "ray", "sklearn", "matplotlib",
         "benchmarks.protocols", "modules.methods", "datamodules")


def heavy_imports(commands: list[list[str]], cache: Path, cwd: Path) -> tuple[list, list[str]]:
    """Each ``clusterbench`` command's exit status, run in turn in one fresh process, and the
    :data:`HEAVY` modules that process imported."""
    code = ("import json, sys\nfrom benchmarks.cli import main\ncodes = []\n"
            f"for argv in {commands!r}:\n"
            "    try:\n        codes.append(main(argv))\n"
            "    except SystemExit as err:\n        codes.append(err.code)\n"
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
            "print(json.dumps([codes, heavy]), file=sys.stderr)")
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    codes, imported = json.loads(done.stderr.strip().splitlines()[-1])
    return codes, imported


def test_bad_paths_are_refused_before_any_heavy_import(tmp_path):
    """With nothing kept yet (a fresh install), every refusal of a path comes first."""
    missing = str(tmp_path / "missing")
    codes, imported = heavy_imports(
        [["compare", "a.csv", "b.csv"], ["leaderboard", missing], ["report", missing],
         ["report", "--check", missing], ["--help"], ["lst"]], tmp_path / "cache", tmp_path)
    assert codes == [2, 2, 2, 2, 0, 2]
    assert imported == []


def test_results_are_read_without_torch_and_shown_as_the_registries_say(tmp_path, monkeypatch):
    """Once this source's metrics and listing are kept (by the first such command in a process
    that imports the registries), ``leaderboard``, ``report``, ``compare`` and ``list`` import
    none of :data:`HEAVY`, and the files they write are those written from the registries."""
    from fake_results import write_all
    results, pages = tmp_path / "results" / "smoke", tmp_path / "pages"
    write_all(results)
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    metrics.kept_protocol_metrics.__wrapped__()  # kept in this test's cache folder
    source_cache.keep(listing.cache_folder() / f"registries-{listing.source_fingerprint()}.json",
                      listing.registry_entries())

    codes, imported = heavy_imports(
        [["leaderboard", str(results)], ["report", str(results), "--out", str(pages)],
         ["compare", str(results), str(results), "--out", str(tmp_path / "compared.md")],
         ["list"]], cache, tmp_path)
    assert codes == [0, 0, 0, 0]
    assert imported == []
    written = {path: path.read_bytes() for path in [
        *(results / f"leaderboard.{kind}" for kind in ("md", "csv", "html")),
        pages / "smoke.md", tmp_path / "compared.md"]}
    assert b"Linear probe top-1 (%)" in written[results / "leaderboard.md"]

    monkeypatch.chdir(tmp_path)  # the page names the command as it was run, from here
    assert main(["leaderboard", str(results)]) == 0  # from the registry, in this process
    assert main(["report", str(results), "--out", str(pages)]) == 0
    assert main(["compare", str(results), str(results), "--out",
                 str(tmp_path / "compared.md")]) == 0
    assert {path: path.read_bytes() for path in written} == written
