"""The training-throughput benchmark runs on a CPU at toy sizes, so that it never rots."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_the_throughput_benchmark_times_the_three_pipelines_and_writes_its_record(tmp_path,
                                                                                   capsys):
    from benchmarks.perf.train_throughput import main

    out = tmp_path / "train.json"
    record = main(["--tiny", "--repeats", "2", "--steps", "1", "--warmup", "1", "--output",
                   str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    (case,) = record["results"].values()
    assert set(case) == {"clusterbench", "bare loop", "anchors' pipeline"}
    for timing in case.values():
        assert len(timing["samples_per_second"]) == 2
        assert all(rate > 0 for rate in timing["samples_per_second"])
    assert case["clusterbench"]["flops_per_step"] > 0
    printed = capsys.readouterr().out
    assert "| pipeline | samples/s | vs clusterbench | MFU |" in printed
    assert "data generated" in printed and record["machine"] in printed


@pytest.mark.slow
def test_the_search_start_up_benchmark_compares_fresh_and_reused_workers(tmp_path, capsys):
    from benchmarks.perf.search_startup import main

    record = main(["--trials", "2", "--output", str(tmp_path / "startup.json")])
    assert record["fresh_workers_seconds"] > 0 and record["reused_workers_seconds"] > 0
    assert "Start-up saved per trial" in capsys.readouterr().out


def test_a_worker_keeps_the_prepared_datamodule_for_its_next_trial():
    """Trials with the same data settings and seed share one set-up datamodule in a worker;
    another seed gets its own."""
    from benchmarks.run import RunSpec
    from tune.trial import TrialSpec, build_trial

    run = RunSpec(name="r", method="simclr", model={"backbone_width": 4},
                  data={"name": "digits", "limit_per_class": 10}, trainer={"max_epochs": 1})
    first, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 1e-3}, callbacks=[], logger=False)
    again, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 3e-3}, callbacks=[], logger=False)
    other, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=1),
                              {}, callbacks=[], logger=False)
    assert again is first and other is not first
    assert first.split_sizes() == other.split_sizes()  # same sizes, its own draw


@pytest.mark.slow
def test_the_small_model_benchmark_times_the_step_now_before_and_bare(tmp_path, capsys):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from benchmarks.perf.step_host import main

    out = tmp_path / "small.json"
    record = main(["--tiny", "--rounds", "2", "--repeats", "1", "--steps", "2", "--warmup",
                   "1", "--output", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert set(record["results"]) == {"clusterbench", "before", "bare loop"}
    for timing in record["results"].values():
        assert len(timing["samples_per_second"]) == 2  # a window in each of the two rounds
        assert all(rate > 0 for rate in timing["samples_per_second"])
        assert all(ms > 0 for ms in timing["host_ms_per_step"])
    assert _get_current_dispatch_mode_stack() == []  # no counter left on
    printed = capsys.readouterr().out
    assert "| pipeline | samples/s | vs clusterbench | host ms/step |" in printed
    assert "TransFusion standalone, 5 blocks" in printed and "data generated" in printed


@pytest.mark.parametrize("batches, counted", [(1 + 2 * 3, True), (1 + 2 * 2, False)])
def test_host_reads_are_counted_after_the_timed_windows_and_never_left_on(batches, counted):
    """The read counter intercepts every operation in Python: it slowed the window it timed
    (and, when the data ran out before its window ended, every operation after the run)."""
    import lightning.pytorch as pl
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from benchmarks.perf.train_throughput import WindowTimer

    timer = WindowTimer(warmup=1, steps=2, repeats=2, batch=4, device=torch.device("cpu"))
    assert WindowTimer.batches_needed(1, 2, 2) == 1 + 2 * 3
    stacks = []

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            stacks.append((len(timer.rates), len(_get_current_dispatch_mode_stack())))

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(4 * batches, 3))
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, callbacks=[timer, Watch()],
                         enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False)
    fit = lambda: trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))  # noqa: E731
    if counted:
        fit()
        assert len(timer.rates) == 2 and timer.counted
        # the counter was off through the warm-up and the timed steps (the last one ended the
        # second window), and on only once both windows had ended
        assert [on for done, on in stacks if done < 2] == [0] * 4
        assert any(on for done, on in stacks if done == 2)
    else:
        with pytest.raises(RuntimeError, match="the data ran out after 2 of 2 timed windows"):
            fit()
    assert _get_current_dispatch_mode_stack() == []
