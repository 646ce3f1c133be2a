"""The paper-budget plan's CPU rehearsal: a step cut at the call's end keeps its checkpoint and
what finished, the next call (``--resume-from``) finishes it without training anything again,
and the record and the page say where each step stands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import paper_budget


def cut_at_first_checkpoint(monkeypatch) -> None:
    """The call's time runs out the moment the 5-block model's first checkpoint is written: a
    budget too short for step 1, on a machine of any speed."""
    def cut_now(deadline: float, watch: Path | None) -> bool:
        return watch is not None and any(watch.glob("**/seed-*.attempt/checkpoints/last.ckpt"))

    monkeypatch.setattr(paper_budget, "cut_now", cut_now)


def result_times(out: Path) -> dict[str, float]:
    return {str(p.relative_to(out)): p.stat().st_mtime
            for p in (out / "transfusion").glob("**/runs/*/seed-0/result.json")}


def test_a_cut_step_keeps_its_checkpoint_and_the_next_call_finishes_it(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    cut_at_first_checkpoint(monkeypatch)
    assert paper_budget.main(["--cpu", "--out", str(first), "--steps", "transfusion",
                              "--budget", "600"]) == 0
    step = json.loads((first / paper_budget.RECORD).read_text())["steps"]["transfusion"]
    assert step["runs"]["fashionmnist/pixels"] == "finished"
    cut = step["runs"]["fashionmnist/5-blocks"]
    assert cut.startswith("cut at epoch ") and cut.endswith(f" of {paper_budget.CPU_EPOCHS}")
    assert step["status"] == cut
    checkpoint = "transfusion/**/fashionmnist__5-blocks/seed-0.attempt/checkpoints/last.ckpt"
    assert list(first.glob(checkpoint))
    page = (first / "fashion-paper-budget.md").read_text()
    assert page.startswith(paper_budget.GENERATED)
    assert "--resume-from results/paper_budget-previous --cpu" in page
    kept = result_times(first)
    assert len(kept) == 1  # the baseline's

    monkeypatch.undo()
    assert paper_budget.main(["--cpu", "--resume-from", str(first), "--out", str(second),
                              "--steps", "transfusion", "--budget", "600"]) == 0
    record = json.loads((second / paper_budget.RECORD).read_text())
    step = record["steps"]["transfusion"]
    assert step["status"] == "finished", step
    assert len(record["calls"]) == 2
    now = result_times(second)
    assert len(now) == 2
    for path, mtime in kept.items():  # the finished baseline was not evaluated again
        assert now[path] == mtime
    trained = [json.loads(p.read_text())
               for p in second.glob("**/fashionmnist__5-blocks/seed-0/result.json")]
    assert trained[0]["resumed_from_epoch"] is not None  # from the first call's checkpoint
    page = (second / "fashion-paper-budget.md").read_text()
    assert "| 1. TransFusion section 5.1" in page and "| finished |" in page
    assert "fashionmnist/5-blocks" in page and "Linear" in page


@pytest.mark.slow
def test_the_rehearsal_runs_figure_10_and_the_simclr_losses_for_the_epochs_that_fit(tmp_path):
    out = tmp_path / "out"
    assert paper_budget.main(["--cpu", "--out", str(out), "--steps", "tensorized", "simclr",
                              "--budget", "900"]) == 0
    steps = json.loads((out / paper_budget.RECORD).read_text())["steps"]
    assert steps["tensorized"]["status"] == "finished", steps["tensorized"]
    simclr = steps["simclr"]
    assert simclr["status"] == "finished", simclr
    assert set(simclr["runs"]) == set(paper_budget.simclr_runs())
    assert 1 <= simclr["epochs"] <= paper_budget.MAX_SIMCLR_EPOCHS["cpu"]
    assert simclr["epoch_seconds"] > 0
    assert steps["transfusion"]["status"] == "not reached"
    page = (out / "fashion-paper-budget.md").read_text()
    assert "Figure 10: VAE vs TVAE" in page
    assert all(run in page for run in paper_budget.simclr_runs())
    assert "Steps transfusion." in page  # still to run


@pytest.mark.parametrize("budget", ["0", "-5", "abc", "nan"])
def test_a_bad_budget_is_one_line_and_exit_2(tmp_path, capsys, budget) -> None:
    code = paper_budget.main(["--cpu", "--out", str(tmp_path / "out"), "--budget", budget])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("clusterbench: error: --budget ")
    assert repr(budget) in err and "above 0" in err
    assert not (tmp_path / "out").exists()
