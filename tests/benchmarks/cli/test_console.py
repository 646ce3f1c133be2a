"""What the commands print: Lightning's boilerplate off the console, whole sentences in
``clusterbench list``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

import benchmarks
from benchmarks.cli import main

ROOT = Path(benchmarks.__file__).resolve().parent.parent  # the code under test
#: Lines Lightning prints on every run that say nothing about it.
BOILERPLATE = ("GPU available", "TPU available", "Tip:", "💡", "litlogger", "LitLogger",
               "litmodels", "deprecated", "Seed set to", "Loading `train_dataloader`",
               "was configured so",
               # Ray's and W&B's own: start-up, authentication, Tune's tables and hints
               "Started a local Ray instance", "Token authentication", "Trial status",
               "View detailed results", "TensorBoard", "╭", "INFO", "wandb:")


def clusterbench(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command as a user runs it: its own process, warnings and logging as they come."""
    env = {**os.environ, "WANDB_MODE": "disabled", "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "benchmarks.cli", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def boilerplate(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(b in line for b in BOILERPLATE)]


def test_bench_and_evaluate_print_no_lightning_boilerplate(tmp_path):
    suite = tmp_path / "quiet.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "quiet", "seeds": [0], "data": {"name": "digits", "batch_size": 64},
        "trainer": {"max_epochs": 1, "limit_train_batches": 2, "limit_val_batches": 1,
                    "accelerator": "cpu", "log_every_n_steps": 1},
        "evaluation": {"knn": {"k": [5], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]}))
    done = clusterbench("bench", str(suite), "--results", "results", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "simclr/seed-0: knn5_top1" in done.stderr  # what the run itself says stays
    assert re.search(r"simclr/seed-0: knn5_top1 [0-9.]+, online_val_acc [0-9.]+ \([0-9.]+ s; "
                     r"1 of 1\)", done.stderr)  # with how far the suite is
    assert re.search(r"^simclr +digits", done.stdout, re.M)  # and the leaderboard
    assert boilerplate(done.stdout + done.stderr) == []
    scored = clusterbench("evaluate", "results/quiet/runs/simclr/seed-0", "--suite", str(suite),
                          cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    assert "simclr@evaluated seed 0: knn5_top1" in scored.stdout
    assert boilerplate(scored.stdout + scored.stderr) == []


def test_fit_prints_no_lightning_boilerplate_but_where_its_results_are(tmp_path):
    done = clusterbench("fit", "--model", "simclr", "--data", "digits",
                        "--model.backbone_width", "4", "--data.limit_per_class", "10",
                        "--trainer.max_epochs", "1", "--trainer.accelerator", "cpu",
                        "--trainer.log_every_n_steps", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert boilerplate(done.stdout + done.stderr) == []
    assert ("SimCLR on DigitsDataModule: trained to epoch 1 (step 1); config, metrics and "
            "environment in results/fit/lightning_logs/version_0") in done.stdout


def test_list_descriptions_are_whole_sentences_wrapped_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["list"]) == 0
    entries: list[list[str]] = []
    for line in capsys.readouterr().out.splitlines():
        assert len(line) <= 100, line
        if re.match(r"  \S", line):  # a name and the start of its description
            entries.append([line.split(maxsplit=1)[1]])
        elif line.startswith("   "):  # the description goes on
            entries[-1].append(line.strip())
    assert len(entries) > 30
    for entry in entries:
        description = " ".join(entry)
        assert description.endswith((".", "!", "?")), description
        assert "``" not in description and ":math:" not in description  # reST markup


def test_list_after_the_first_imports_no_torch_and_prints_the_same(tmp_path, capsys,
                                                                    monkeypatch):
    """``clusterbench list`` took 14 s on two cores, nearly all of it importing torch, Lightning
    and torchvision with the registries: their sentences are kept in a cache keyed on the
    source, so the next ``list`` in a fresh process prints the same without those imports. A
    process that imported the registries (and added to one) lists them as they are."""
    code = ("import sys; from benchmarks.cli import main; code = main(['list']); "
            "print(code, sorted(m for m in ('torch', 'lightning', 'torchvision', 'ray', "
            "'modules.methods', 'datamodules') if m in sys.modules), file=sys.stderr)")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "100",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    first, then = (subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, timeout=300, check=True) for _ in range(2))
    assert first.stderr.strip().startswith("0 [") and first.stderr.strip() != "0 []"
    assert then.stderr.strip() == "0 []", then.stderr  # none of them imported
    assert then.stdout == first.stdout
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["list"]) == 0  # in this process, from the registries themselves
    assert capsys.readouterr().out == first.stdout
    from modules.methods import METHODS

    monkeypatch.setitem(METHODS, "added_here", type("AddedHere", (), {"__doc__": "Added."}))
    assert main(["list"]) == 0
    assert "  added_here" in capsys.readouterr().out


def test_a_list_cache_that_is_no_listing_is_not_read(tmp_path):
    from benchmarks.cli.listing import kept_entries

    kept = tmp_path / "registries-0.json"
    for text in ('{"Methods (--model NAME):": ["not", "a listing"]}', "{", "\udcff", "[]"):
        kept.write_text(text, errors="surrogateescape")
        assert kept_entries(kept) is None
    kept.write_text('{"Methods (--model NAME):": {"simclr": "SimCLR\\u001b]0;x\\u0007."}}')
    assert kept_entries(kept) == {"Methods (--model NAME):": {"simclr": "SimCLR?]0;x?."}}
    assert kept_entries(tmp_path / "none.json") is None


def test_the_list_cache_is_keyed_on_the_source(tmp_path, monkeypatch):
    """A change to any Python file of the packages the registries come from is a new key: a
    description edited in a docstring is never listed as it was."""
    from benchmarks.cli import listing

    package = tmp_path / "listed_here"
    package.mkdir()
    (package / "__init__.py").write_text('"""A method. More."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(listing, "LISTED_PACKAGES", ("listed_here",))
    before = listing.source_fingerprint()
    assert listing.source_fingerprint() == before
    (package / "__init__.py").write_text('"""Another method. More."""\n')
    assert listing.source_fingerprint() != before
