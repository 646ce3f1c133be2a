"""The training-throughput benchmark runs on a CPU at toy sizes, so that it never rots."""

from __future__ import annotations

import json

import pytest


def test_the_anchors_and_clusterbench_train_the_cases_own_resnet():
    """The anchors' pipeline was a ResNet18 in every case, its ResNet50 row a ResNet18 scored
    with ResNet50's FLOPs: each pipeline now builds the case's depth, read from its blocks."""
    import torch

    from benchmarks.perf.train_throughput import (
        AnchorsPipeline,
        Case,
        architecture,
        simclr_model,
    )

    for backbone in ("resnet18", "resnet50"):
        case = Case(backbone, 4, 8)
        anchors = AnchorsPipeline(case, torch.device("cpu"), workers=0)
        assert anchors.architecture() == backbone
        assert architecture(simclr_model(case, channels_last=False).backbone) == backbone
        stem = anchors.net.conv1
        assert (stem.kernel_size, stem.stride) == ((3, 3), (1, 1))  # the CIFAR stem, as ours


def _window(name, steps=16):
    """A window's event as the benchmark writes it on a GPU: the anchors' 8 loader workers
    (their queue 2 batches each) refilled by untimed steps before it; the others load in the
    stepping process."""
    workers = 8 if name == "anchors' pipeline" else 0
    return {"event": "window", "pipeline": name, "counting_passes": 0, "dispatch_modes": 0,
            "steps": steps, "workers": workers, "queue": 2 * workers, "warm_steps": 2 * workers}


def _timeline(names, windows=5, per_pipeline=None):
    """A case's events in the order the benchmark keeps: each pipeline built, warmed up, its
    peak and host reads measured alone; then rounds of one window each; then the FLOP passes
    and the optimisers' signatures."""
    events = []
    for name in names:
        events += [{"event": "build", "pipeline": name},
                   {"event": "warm-up", "pipeline": name, "cudnn_benchmark": True},
                   {"event": "reset peak", "pipeline": name},
                   {"event": "read peak", "pipeline": name},
                   {"event": "count host reads", "pipeline": name}]
    for round_ in range(windows):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            events.append(_window(name))
    lars = {"optimizer": "Lars", "groups": [{"lr": 0.6, "params": 3}, {"lr": 0.6, "params": 5},
                                            {"lr": 0.01, "params": 2}],
            "scheduler": "LambdaLR", "interval": "step", "steps": 107}
    events += [{"event": "flops", "pipeline": "bare loop, eager"},
               {"event": "flops", "pipeline": "anchors' pipeline"},
               {"event": "signatures", "pipeline": "",
                "signatures": {n: (None if n == "anchors' pipeline" else lars) for n in names}}]
    return events


def _timings(names, backbone="resnet50"):
    return {n: {"architecture": backbone,
                "compile": "eager" if n.endswith(", eager") or n == "anchors' pipeline"
                else "compiled (inductor)"} for n in names}


def _sgd_bare_loop(events):
    signatures = events[-1]["signatures"]
    signatures["bare loop"] = {"optimizer": "SGD", "groups": [{"lr": 0.1, "params": 10}],
                               "scheduler": "none", "interval": "step", "steps": 107}


def _first_method(events):
    """The first page's order: each pipeline's windows one after another, two of them."""
    others = [e for e in events if e["event"] != "window"]
    names = list(dict.fromkeys(e["pipeline"] for e in events if e["event"] == "window"))
    windows = [_window(n) for n in names for _ in range(2)]
    events[:] = others[:5 * len(names)] + windows + others[5 * len(names):]


def _counted_window(events):
    window = next(e for e in events if e["event"] == "window")
    window["counting_passes"] = 1


def _flops_in_peak(events):
    read = next(i for i, e in enumerate(events) if e["event"] == "read peak")
    events.insert(read, {"event": "flops", "pipeline": "clusterbench"})


def _peak_before_autotuning(events):
    """The peak reset before the warm-up: cuDNN's autotuning (and compilation) in the peak."""
    warm = next(i for i, e in enumerate(events) if e["event"] == "warm-up")
    events[warm], events[warm + 1] = events[warm + 1], events[warm]
    events[warm + 1], events[warm + 2] = events[warm + 2], events[warm + 1]


def _cold_anchors_window(events):
    """The anchors' queue thrown away and the window timed at once: every worker idle."""
    window = next(e for e in events if e["event"] == "window"
                  and e["pipeline"] == "anchors' pipeline")
    window["warm_steps"] = 0


def _flops_among_windows(events):
    """A FLOP pass moved between the first timed window and the next."""
    flops = next(i for i, e in enumerate(events) if e["event"] == "flops")
    window = next(i for i, e in enumerate(events) if e["event"] == "window")
    events.insert(window + 1, events.pop(flops))


def _uneven_anchors_window(events):
    """A window of 12 steps from 8 workers: a round of them cut in the middle."""
    for e in events:
        if e["event"] == "window" and e["pipeline"] == "anchors' pipeline":
            e["steps"] = 12


@pytest.mark.parametrize("failed, spoil", [
    ({"windows"}, _first_method),
    ({"clean_windows"}, _counted_window),
    ({"peak", "flops_last"}, _flops_in_peak),  # a FLOP pass in a peak is before the windows
    ({"warm_up"}, _peak_before_autotuning),
    ({"optimiser"}, _sgd_bare_loop),
    ({"warm_windows"}, _cold_anchors_window),
    ({"flops_last"}, _flops_among_windows),
    ({"window_steps"}, _uneven_anchors_window),
])
def test_each_rule_of_the_measurement_catches_what_an_earlier_method_did(failed, spoil):
    """The rules pass on the benchmark's order of events and fail, each on its own, on one of
    the earlier methods' faults (the first page's, and the anchors' windows started cold)."""
    from benchmarks.perf.train_throughput import PIPELINES, check_rules

    names = list(PIPELINES)
    case = "SimCLR resnet50, batch 256, 32x32"
    rules = check_rules(case, _timings(names), _timeline(names), "cuda")
    assert all(r["passed"] for r in rules.values()), rules
    events = _timeline(names)
    spoil(events)
    rules = check_rules(case, _timings(names), events, "cuda")
    assert {name for name, r in rules.items() if not r["passed"]} == failed, rules


def test_the_rules_name_a_pipeline_on_another_backbone_or_compiled_otherwise():
    from benchmarks.perf.train_throughput import ANCHORS, PIPELINES, check_rules

    names = list(PIPELINES)
    timings = _timings(names)
    timings[ANCHORS]["architecture"] = "resnet18"  # the first page's ResNet50 row
    timings["clusterbench"]["compile"] = "eager"
    rules = check_rules("SimCLR resnet50, batch 256, 32x32", timings, _timeline(names), "cuda")
    assert not rules["backbone"]["passed"] and "anchors' pipeline trains resnet18" in \
        rules["backbone"]["detail"]
    assert not rules["compile"]["passed"] and "clusterbench: eager" in rules["compile"]["detail"]
    events = _timeline(names)
    events[1]["cudnn_benchmark"] = False
    assert not check_rules("SimCLR resnet50, batch 256, 32x32", _timings(names), events,
                           "cuda")["warm_up"]["passed"]


@pytest.fixture(scope="module")
def anchors_rehearsal():
    """A real CPU rehearsal of the measurement (the tiny case) on the anchors' pipeline with 2
    loader workers, the one pipeline whose batches come from workers: its case's name, timings
    and order of events."""
    from dataclasses import asdict

    import torch

    from benchmarks.perf import train_throughput as tt

    case, timeline = tt.TINY_CASES[0], tt.Timeline()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tt, "case_pipelines", lambda case: (tt.ANCHORS,))
        timings = tt.measure_case(case, torch.device("cpu"), warmup=1, steps=2,
                                  windows=tt.MIN_WINDOWS, workers=2, timeline=timeline,
                                  peak_steps=1)
    return case.name, {p: asdict(t) for p, t in timings.items()}, timeline.events


def test_a_cpu_rehearsal_starts_each_anchors_window_warm_and_keeps_every_rule(anchors_rehearsal):
    """Each of the anchors' windows is whole rounds of its 2 workers and follows untimed steps
    that refill their queue (2 batches a worker, the DataLoader's prefetch factor), and the
    FLOPs are counted after the last window: every rule passes on the run's own events."""
    from benchmarks.perf.train_throughput import MIN_WINDOWS, check_rules

    case, timings, events = anchors_rehearsal
    rules = check_rules(case, timings, events, "cpu")
    assert all(r["passed"] for r in rules.values()), rules
    windows = [e for e in events if e["event"] == "window"]
    assert len(windows) == MIN_WINDOWS
    assert all(e["workers"] == 2 and e["steps"] % 2 == 0 and e["warm_steps"] >= 2 * 2
               for e in windows), windows
    flops = [i for i, e in enumerate(events) if e["event"] == "flops"]
    assert flops and min(flops) > events.index(windows[-1])


@pytest.mark.parametrize("failed, detail, spoil", [
    ("warm_windows", "1 windows started cold", _cold_anchors_window),
    ("flops_last", "FLOP passes before the last timed window", _flops_among_windows),
])
def test_the_rules_catch_a_cold_window_or_a_flop_pass_planted_in_a_cpu_rehearsal(
        anchors_rehearsal, failed, detail, spoil):
    """The rehearsal's own events with one window timed straight after its queue was thrown
    away, or with the FLOP pass moved between the windows: that rule, and only it, fails."""
    import copy

    from benchmarks.perf.train_throughput import check_rules

    case, timings, events = anchors_rehearsal
    events = copy.deepcopy(events)
    spoil(events)
    rules = check_rules(case, timings, events, "cpu")
    assert {name for name, r in rules.items() if not r["passed"]} == {failed}, rules
    assert detail in rules[failed]["detail"]


def test_the_anchors_refill_their_loaders_queue_with_untimed_steps_before_a_window():
    """Before a window the anchors' pipeline trains as many steps as its workers' queue holds
    (2 workers, the DataLoader's 2 batches each), and says so."""
    import torch

    from benchmarks.perf.train_throughput import AnchorsPipeline, Case

    anchors = AnchorsPipeline(Case("resnet18", 4, 8), torch.device("cpu"), workers=2)
    anchors.start()
    try:
        trained = []
        step = anchors.step
        anchors.step = lambda views, labels: trained.append(step(views, labels))
        assert anchors.before_window() == len(trained) == 2 * 2
    finally:
        anchors.close()


def test_the_fashion_cpu_case_builds_both_pipelines_from_the_suite_file():
    """clusterbench (the runner's Trainer) and the bare loop of fashion_cpu's simclr/nt_xent
    train the run's own model, precision and memory format, from the same weights, with equal
    optimiser groups, learning rates and schedule after the same steps; eager, as the runner
    trains on a CPU. Generated images: the suite's batch of 512, three steps an epoch."""
    import torch

    from benchmarks.perf.train_throughput import (
        FASHION_CPU,
        SuiteBareLoop,
        SuiteRunPipeline,
        case_pipelines,
        load_run,
        suite_case,
    )

    case = suite_case(*FASHION_CPU)
    _, run = load_run(FASHION_CPU)
    assert (case.backbone, case.batch_size, case.size, case.width) == (
        run.model["backbone"], run.data["batch_size"], 28, run.model["backbone_width"])
    assert case_pipelines(case) == ("clusterbench, eager", "bare loop, eager")
    images = case.batch_size * 3 * 100 // 95 + 1  # 5% held out for validation: 3 batches left
    ours = SuiteRunPipeline("clusterbench, eager", case, batches=3, generated=images)
    bare = None
    try:
        ours.start()
        bare = SuiteBareLoop("bare loop, eager", case, ours.total_steps, ours.steps_per_epoch,
                             generated=images)
        weights, bare_weights = ours.model.state_dict(), bare.model.state_dict()
        assert weights.keys() == bare_weights.keys()
        assert all(torch.equal(weights[k], bare_weights[k]) for k in weights)
        bare.start()
        ours.run(2)
        bare.run(2)
        assert ours.signature() == bare.signature()
        assert ours.signature()["steps"] == 2 and ours.total_steps == 12 * 3  # max_epochs: 12
        assert ours.architecture() == bare.architecture() == "five_layer_cnn"
        assert ours.compile_status == bare.compile_status == "eager"
        assert ours.trainer.precision == "bf16-mixed" and bare.autocast is torch.bfloat16
        for pipeline in (ours, bare):
            assert pipeline.model.hparams["projector_hidden"] == run.model["projector_hidden"]
            assert pipeline.model.channels_last and pipeline.data().startswith("GENERATED")
            conv = pipeline.model.backbone.features[0].weight
            assert conv.is_contiguous(memory_format=torch.channels_last)
    finally:
        ours.close()
        if bare is not None:
            bare.close()


@pytest.mark.parametrize("argv, message", [
    (["--windows", "2"], "--windows 2: at least 5 timed windows per pipeline"),
    (["--steps", "0"], "--steps 0: a whole number of at least 1"),
    (["--case", "gpu", "--generated"], "--generated is for --case fashion-cpu"),
    (["--tiny", "--case", "fashion-cpu"], "--tiny is --case tiny, not --case fashion-cpu"),
    (["--device", "cpu", "--workers", "2", "--steps", "3"],
     "--steps 3: a multiple of the anchors' 2 loader workers"),
])
def test_bad_arguments_are_named_in_one_line(argv, message, capsys):
    from benchmarks.perf.train_throughput import parse

    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_the_search_start_up_benchmark_compares_fresh_and_reused_workers(tmp_path, capsys):
    from benchmarks.perf.search_startup import main

    # one trial each way: the benchmark runs end to end (reuse itself: the next test and
    # tests/tune/test_ddp_trials.py)
    record = main(["--trials", "1", "--output", str(tmp_path / "startup.json")])
    assert record["fresh_workers_seconds"] > 0 and record["reused_workers_seconds"] > 0
    assert "Start-up saved per trial" in capsys.readouterr().out


def test_a_worker_keeps_the_prepared_datamodule_for_its_next_trial():
    """Trials with the same data settings and seed share one set-up datamodule in a worker;
    another seed gets its own."""
    from benchmarks.run.spec import RunSpec
    from tune.trial import TrialSpec, build_trial

    run = RunSpec(name="r", method="simclr", model={"backbone_width": 4},
                  data={"name": "digits", "limit_per_class": 10}, trainer={"max_epochs": 1})
    first, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 1e-3}, callbacks=[])
    again, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=0),
                              {"model.lr": 3e-3}, callbacks=[])
    other, _, _ = build_trial(TrialSpec(run=run, max_epochs=1, metric="online_val_acc", seed=1),
                              {}, callbacks=[])
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
