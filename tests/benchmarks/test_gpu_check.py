"""The GPU acceptance check's CPU rehearsal: every section runs (or says it needs CUDA) before a
GPU ever arrives, the results are written section by section, and a section cut at its limit
costs only itself."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import gpu_check

pytestmark = pytest.mark.slow


def test_cpu_rehearsal_runs_its_sections_as_children_and_writes_the_page(tmp_path) -> None:
    # the suites section: a child that starts a child per suite; protocols is left out for
    # time (tests/benchmarks/perf/test_eval_speed.py runs the same code); the other sections in
    # this process, in the tests below (a child costs its imports)
    output = tmp_path / "check"
    code = gpu_check.main(["--cpu", "--output", str(output), "--sections", "suites",
                           "--suites", "transfusion_fusion", "--budget", "400"])
    assert code == 0
    record = json.loads((output / "gpu_check.json").read_text())
    sections = record["sections"]
    assert list(sections) == ["suites"]
    assert sections["suites"]["status"] == "passed", sections["suites"]
    assert sections["suites"]["runs"]["transfusion_fusion"]["status"] == "passed"
    page = (output / "gpu-cpu-rehearsal.md").read_text()
    assert page.startswith(gpu_check.GENERATED)
    assert "## Every suite's `--fast` run" in page
    assert "| transfusion_fusion | passed |" in page


def test_the_correctness_section_compares_the_gpu_defaults_with_eager_float32(tmp_path):
    saved = []
    ctx = argparse.Namespace(cuda=False, save=saved.append)
    section = gpu_check.section_correctness(ctx)
    assert section["failures"] == [] and saved
    defaults = section["defaults"]
    assert defaults["passed"] and len(defaults["eager_float32"]) == defaults["steps"]
    assert section["probe"] == gpu_check.NEEDS_CUDA
    record = {"title": "t", "argv": [], "budget": 2, "started": "now", "t0": 0,
              "sections": {"correctness": {"status": "passed", "seconds": 1, **section}}}
    gpu_check.save_record(record, tmp_path)
    page = (tmp_path / "gpu-cpu-rehearsal.md").read_text()
    assert "## Correctness under the GPU defaults" in page


def test_without_cuda_the_machine_and_trial_memory_sections_say_what_needs_it(tmp_path):
    ctx = argparse.Namespace(cuda=False, workdir=tmp_path)
    machine = gpu_check.section_machine(ctx)
    assert machine["cpu_cores"] >= 1 and machine["torch"]
    assert machine["device"] == machine["cuda"] == gpu_check.NEEDS_CUDA
    assert gpu_check.section_trial_memory(ctx) == {"status": gpu_check.NEEDS_CUDA}
    record = {"title": "t", "argv": [], "budget": 2, "started": "now", "t0": 0,
              "sections": {"machine": {"status": "passed", "seconds": 0, **machine}}}
    gpu_check.save_record(record, tmp_path)
    page = (tmp_path / "gpu-cpu-rehearsal.md").read_text()
    assert "## Machine" in page and f"| device | {gpu_check.NEEDS_CUDA} |" in page


def test_a_section_cut_at_its_limit_is_marked_and_the_rest_kept(tmp_path) -> None:
    ctx = argparse.Namespace(cuda=False, workdir=tmp_path, limit=2.0, jobs=1, data=None,
                             suites=None)
    result = gpu_check.child(ctx, ["--section", "protocols"], tmp_path / "p.json", 2.0,
                             tmp_path / "p.log")
    assert result["status"] == "cut at its 2 s limit"
    record = {"title": "t", "argv": [], "budget": 2, "started": "now", "t0": 0,
              "sections": {"machine": {"status": "passed", "seconds": 1, "cpu": "x"},
                           "protocols": result}}
    gpu_check.save_record(record, tmp_path)
    page = (tmp_path / "gpu-cpu-rehearsal.md").read_text()
    assert "| cpu | x |" in page and "Status: cut at its 2 s limit" in page


def test_without_cuda_the_check_says_how_to_rehearse(monkeypatch, capsys) -> None:
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.parse([])
    assert exit_info.value.code == 2
    assert "--cpu" in capsys.readouterr().err


def test_the_throughput_page_shows_the_small_models_step_beside_simclrs() -> None:
    """The section's two records (each benchmark runs in tests/benchmarks/perf) on the page."""
    from benchmarks.perf import step_host, train_throughput

    def timing(rate: float) -> dict:
        return {"samples_per_second": [rate, rate], "host_ms_per_step": [2.0, 2.0],
                "reads_per_step": 0.0, "flops_per_step": None, "peak_memory_mb": None}

    small = {"case": "TransFusion standalone, 5 blocks, batch 256, 1x28x28", "rounds": 3,
             "repeats": 2, "steps": 50, "warmup": 20,
             "results": {"clusterbench": timing(100.0), "before": timing(50.0),
                         "bare loop": timing(125.0)}}
    section = {"status": "passed", "seconds": 1, "note": "n",
               "record": {"repeats": 2, "steps": 40, "warmup": 10, "workers": 8},
               "table": "| SimCLR table |", "small": small,
               "small_table": step_host.table({p: train_throughput.Timing(**t)
                                               for p, t in small["results"].items()})}
    page = gpu_check.render({"sections": {"throughput": section}, "title": "x", "argv": [],
                             "started": "now", "elapsed": 1, "budget": 1})
    assert "| SimCLR table |" in page
    assert ("A small model's step, where the host sets the pace (`benchmarks.perf.step_host`): "
            "TransFusion standalone, 5 blocks, batch 256, 1x28x28") in page
    assert "3 rounds of the three in turn, each 2 windows of 50 steps" in page
    assert "| before | 50 ± 0 | 2.00x |" in page and "| bare loop | 125 ± 0 | 0.80x |" in page
    # a record of the earlier method says that its figures do not measure what they name
    assert "Measured by the earlier method" in page


def test_the_throughput_rehearsal_keeps_the_rules_of_its_measurement(monkeypatch) -> None:
    """The section as the CPU rehearsal runs it (in this process, so that a counter can be
    watched): no counting pass inside a timed window, every pipeline on the case's ResNet50,
    five interleaved windows each, the bare loop on clusterbench's optimiser and schedule,
    and the rules it checks itself all passed, on the page too."""
    import torch.utils.flop_counter as flop_counter
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from benchmarks.perf import train_throughput as tt

    calls = {"in window": 0, "outside": 0}
    in_window = []
    timed_window, dispatch = tt.timed_window, tt.CountHostReads.__torch_dispatch__
    enter = flop_counter.FlopCounterMode.__enter__

    def watched_window(*args, **kwargs):
        in_window.append(True)
        try:
            return timed_window(*args, **kwargs)
        finally:
            in_window.pop()

    def note() -> None:
        calls["in window" if in_window else "outside"] += 1

    def counting(self, *args, **kwargs):
        note()
        return dispatch(self, *args, **kwargs)

    def flop_pass(self):
        note()
        return enter(self)

    monkeypatch.setattr(tt, "timed_window", watched_window)
    monkeypatch.setattr(tt.CountHostReads, "__torch_dispatch__", counting)
    monkeypatch.setattr(flop_counter.FlopCounterMode, "__enter__", flop_pass)
    saved = []
    ctx = argparse.Namespace(cuda=False, save=saved.append)
    section = gpu_check.section_throughput(ctx)
    assert calls["outside"] > 0 and calls["in window"] == 0, calls
    assert _get_current_dispatch_mode_stack() == []
    assert section["failures"] == [] and saved  # saved after the case, before the small model
    record = section["record"]
    (case,) = record["results"]
    assert case.startswith("SimCLR resnet50")
    timings = record["results"][case]
    assert list(timings) == list(tt.PIPELINES)
    for timing in timings.values():
        assert timing["architecture"] == "resnet50"
        assert len(timing["samples_per_second"]) >= tt.MIN_WINDOWS
        assert all(rate > 0 for rate in timing["samples_per_second"])
    windows = [e["pipeline"] for e in record["timelines"][case] if e["event"] == "window"]
    assert [sorted(windows[i:i + 5]) for i in range(0, len(windows), 5)] == \
        [sorted(tt.PIPELINES)] * tt.MIN_WINDOWS
    signatures = record["timelines"][case][-1]["signatures"]
    assert signatures["bare loop"] == signatures["clusterbench"]
    assert signatures["bare loop, eager"] == signatures["clusterbench, eager"]
    lars = signatures["bare loop"]
    assert (lars["optimizer"], len(lars["groups"]), lars["scheduler"], lars["interval"]) == \
        ("Lars", 3, "LambdaLR", "step")
    assert timings["clusterbench"]["compile"].startswith("compiled")
    assert timings["clusterbench, eager"]["compile"] == "eager"
    assert all(r["passed"] for r in record["rules"][case].values()), record["rules"]
    page = gpu_check.render({"sections": {"throughput": {**section, "status": "passed",
                                                         "seconds": 1}},
                             "title": "x", "argv": [], "started": "now", "elapsed": 1,
                             "budget": 1})
    assert "| samples/s | min-max | vs clusterbench |" in page
    assert "backbone passed, windows passed, clean_windows passed, peak passed" in page


def test_the_fashion_run_cut_at_the_budgets_end_gets_sigterm_to_save_its_checkpoint(tmp_path):
    """At the budget's end the background run gets SIGTERM (the runner saves its checkpoint
    after the step in flight) and is killed only if it has not ended within the grace."""
    import subprocess
    import sys
    import time

    saved = tmp_path / "saved"
    waits = ("import signal, sys, time\n"
             "def save(*_):\n"
             f"    open({str(saved)!r}, 'w').write('checkpoint')\n"
             "    sys.exit(143)\n"
             "signal.signal(signal.SIGTERM, save)\n"
             "print('ready', flush=True)\n"
             "time.sleep(120)\n")
    process = subprocess.Popen([sys.executable, "-c", waits], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout.readline().strip() == "ready"
    ctx = argparse.Namespace(workdir=tmp_path)
    (tmp_path / "fashion_paper.log").write_text("training\n")
    now = time.perf_counter()
    out = gpu_check.finish_fashion_paper(ctx, (process, now, "real"),
                                         deadline=now + gpu_check.FASHION_GRACE + 1)
    assert out["status"] == "cut at the budget's end (its checkpoint saved)"
    assert saved.read_text() == "checkpoint"
    assert out["seconds"] < gpu_check.FASHION_GRACE
