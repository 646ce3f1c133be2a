"""The GPU defaults (bf16 autocast, channels-last, ``torch.compile``) executed where CI can run
them: on the CPU, through the runner, against eager float32; and a module whose compilation fails
runs eagerly on its own, recorded in the result."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from tiny_suites import TINY_EVALUATION, write_suite

import benchmarks.run.trainer as trainer
from benchmarks.cli import main
from benchmarks.run.trainer import compile_or_eager


def failing_backend(graph, example_inputs):
    raise RuntimeError("this backend builds nothing")


def test_a_module_whose_compilation_fails_runs_eagerly_and_says_so_the_others_stay_compiled():
    torch.manual_seed(0)
    status: dict[str, str] = {}
    first, second = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    broken = compile_or_eager(first, "backbone", status, backend=failing_backend)
    working = compile_or_eager(second, "projector", status, backend="eager")
    with pytest.warns(RuntimeWarning, match="torch.compile of the backbone failed, it runs "
                                            "eagerly: BackendCompilerFailed"):
        out = broken(x)
    torch.testing.assert_close(out, first(x))
    torch.testing.assert_close(working(x), second(x))
    assert status["backbone"].startswith("failed (BackendCompilerFailed: ")
    assert "this backend builds nothing" in status["backbone"]
    assert status["projector"] == "compiled"
    torch.testing.assert_close(broken(x), first(x))  # eager from then on, no second warning
    assert [k for k, _ in broken.named_parameters()] == ["_orig_mod.weight", "_orig_mod.bias"]


def test_a_model_error_is_not_taken_for_a_compiler_failure():
    status: dict[str, str] = {}
    module = compile_or_eager(torch.nn.Linear(3, 2), "backbone", status, backend="eager")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        module(torch.randn(4, 5))


def first_losses(results: Path) -> list[float]:
    rows = csv.DictReader((results / "defaults/runs/simclr/seed-0/logs/metrics.csv").open())
    return [float(r["train_loss"]) for r in rows if r.get("train_loss")]


@pytest.mark.slow
def test_the_gpu_defaults_train_through_the_runner_on_the_cpu(tmp_path, monkeypatch):
    """SimCLR, 3 steps, seed 0: eager float32 against bf16 autocast + channels-last +
    torch.compile, everything else the same. bf16 keeps 8 significant bits: the first step's
    losses (same weights, same batch) differ only by rounding averaged over the batch's logits,
    within 1%; the later steps start from weights that rounding moved, within 5%. The weights
    file keeps the plain parameter names. The compiler traces with dynamo and AOTAutograd as on
    the GPU, but runs the traced graphs with the ``aot_eager`` backend: inductor's C++ build of
    them took most of this test's minute on two cores, and its code generation is checked where
    it runs, on a GPU (``python -m benchmarks.gpu_check``)."""
    runs = [{"name": "simclr", "method": "simclr",
             "model": {"backbone_width": 4, "projector_hidden": 16, "projector_out": 8}}]
    settings = {"max_epochs": 1, "limit_train_batches": 3, "limit_val_batches": 1,
                "accelerator": "cpu", "log_every_n_steps": 1}
    eager = tmp_path / "eager"
    suite = write_suite(tmp_path / "defaults.yaml", runs, trainer=settings,
                        evaluation={"knn": TINY_EVALUATION["knn"]})
    assert main(["bench", str(suite), "--results", str(eager), "--no-progress"]) == 0

    original, compile_or_eager = trainer.gpu_speed_settings, trainer.compile_or_eager
    monkeypatch.setattr(trainer, "compile_or_eager", lambda module, name, status: compile_or_eager(
        module, name, status, backend="aot_eager"))
    monkeypatch.setattr(trainer, "gpu_speed_settings",  # the GPU's defaults, on this CPU
                        lambda run, options, on_gpu, devices=1: original(run, options, True,
                                                                          devices))
    fast = tmp_path / "fast"
    suite = write_suite(tmp_path / "defaults.yaml", runs,
                        trainer={**settings, "precision": "bf16-mixed"},
                        evaluation={"knn": TINY_EVALUATION["knn"]})
    assert main(["bench", str(suite), "--results", str(fast), "--no-progress"]) == 0
    result = json.loads((fast / "defaults/runs/simclr/seed-0/result.json").read_text())
    assert result["gpu_speed_settings"]["compile"] and result["gpu_speed_settings"][
        "channels_last"] and result["gpu_speed_settings"]["precision"] == "bf16-mixed"
    assert result["compiled"] == {"backbone": "compiled", "projector": "compiled"}
    reference, got = first_losses(eager), first_losses(fast)
    assert len(reference) == len(got) == 3
    assert abs(got[0] - reference[0]) <= 0.01 * abs(reference[0]), (got, reference)
    assert all(abs(g - r) <= 0.05 * abs(r) for g, r in zip(got, reference, strict=True))
    weights = torch.load(fast / "defaults/runs/simclr/seed-0/encoder.pt", weights_only=True)
    plain = torch.load(eager / "defaults/runs/simclr/seed-0/encoder.pt", weights_only=True)
    assert weights.keys() == plain.keys() and not any("_orig_mod" in k for k in weights)
