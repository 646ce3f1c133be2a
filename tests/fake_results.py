"""Result files as ``benchmarks.run.run_one`` writes them, with known metric values: what the
leaderboard, report, compare and read-back tests (and the read-only commands' import test) read."""

from __future__ import annotations

import json
from pathlib import Path

#: Known metric values: run -> seed -> metrics. "beta" wins the headline (linear probe) although
#: it comes second in path order and loses on kNN.
METRICS = {
    "alpha": {0: {"linear_probe_top1": 0.81, "knn50_top1": 0.90},
              1: {"linear_probe_top1": 0.84, "knn50_top1": 0.93},
              2: {"linear_probe_top1": 0.80, "knn50_top1": 0.91}},
    "beta": {0: {"linear_probe_top1": 0.95, "knn50_top1": 0.70},
             1: {"linear_probe_top1": 0.92, "knn50_top1": 0.72},
             2: {"linear_probe_top1": 0.97, "knn50_top1": 0.75}},
}
MACHINE_A = {"hostname": "a", "platform": "Linux", "processor": "x86_64", "cpus": 2, "gpu": None}
MACHINE_B = {"hostname": "b", "platform": "Linux", "processor": "x86_64", "cpus": 16,
             "gpu": "NVIDIA H100 80GB HBM3"}


def fake_result(run: str, seed: int, metrics: dict[str, float], *, dataset: str = "digits",
                provenance: str = "real", budget: str = "full", machine: dict | None = None,
                headline: str = "linear_probe_top1", suite: str = "smoke") -> dict:
    method = {"alpha": "simclr", "beta": "pixels"}.get(run, "simclr")
    gpu = bool((machine or MACHINE_A).get("gpu"))
    return {
        "suite": suite, "run": run, "method": method, "dataset": dataset,
        "data_provenance": provenance, "data_source": "test data",
        "backbone": "small_cnn" if method == "simclr" else "none",
        "seed": seed, "budget": budget, "epochs": 5, "train_steps": 50, "batch_size": 128,
        "split_sizes": {"train": 1213, "val": 134, "test": 450},
        "metrics": metrics, "notes": {},
        "train_seconds": 10.0 + seed, "wall_seconds": 12.0 + seed,
        "device": "gpu" if gpu else "cpu",
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "versions": {"clusterbench": "0.1.0", "torch": "2.4.0", "lightning": "2.4.0",
                     "python": "3.11.0"},
        "machine": machine or MACHINE_A,
        "config": {"suite": suite, "suite_file": "benchmarks/smoke.yaml", "fast": budget == "fast",
                   "seed": seed, "headline": headline,
                   "run": {"name": run, "method": method, "model": {}, "data": {"name": dataset},
                           "trainer": {}},
                   "evaluation": {}},
    }


def write_result(root: Path, result: dict) -> Path:
    directory = root / "runs" / f"{result['run']}-{result['budget']}" / f"seed-{result['seed']}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "result.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def write_all(root: Path, **kwargs) -> None:
    for run, seeds in METRICS.items():
        for seed, metrics in seeds.items():
            write_result(root, fake_result(run, seed, metrics, **kwargs))
