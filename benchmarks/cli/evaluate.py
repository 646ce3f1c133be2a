"""``clusterbench evaluate``: score a trained run (a bench seed folder or a ``fit``
checkpoint) with a suite's protocols; the result joins the suite's leaderboard."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.console import print_leaderboard


def evaluate_main(ns: argparse.Namespace) -> int:
    """The run scored, its metrics on one line, and the suite's leaderboard."""
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.results import display_scale
    from benchmarks.suites.trained import evaluate_trained

    suite = load_suite(ns.suite, fast=ns.fast)
    directory, result = evaluate_trained(Path(ns.path), suite, ns.results, name=ns.name,
                                         accelerator=ns.accelerator, weights=ns.weights)
    # as bench prints them: accuracies in percent, scores as they are
    shown = ", ".join(f"{k} {display_scale(k) * v:.2f}" for k, v in result["metrics"].items())
    print(f"{result['run']} seed {result['seed']}: {shown}")
    print(f"Result: {directory}/result.json")
    print_leaderboard(directory.parent.parent.parent)
    return 0


def add_parser(sub) -> None:
    """``clusterbench evaluate``'s options."""
    evaluate = sub.add_parser(
        "evaluate", help="score a trained run (a bench run folder or a `clusterbench fit` "
        "checkpoint) with a suite's protocols; the result joins the suite's leaderboard")
    evaluate.add_argument("path", help="a bench run's seed folder (runs/<run>/seed-<k>, with "
                          "encoder.pt), a fit checkpoint (.ckpt), or a public backbone by name "
                          "(torchvision:resnet18, timm:resnet18) with --weights")
    evaluate.add_argument("--weights", metavar="FILE", help="the local weights file of a "
                          "backbone by name (a torch.save of its state dict; its classifier's "
                          "weights are left out)")
    evaluate.add_argument("--suite", required=True, help="the suite whose protocols score it")
    evaluate.add_argument("--results", default="results", help="results root (default: results)")
    evaluate.add_argument("--name", help="its row on the leaderboard (default: the run's name "
                          "+ '@evaluated', or the fit's model and version)")
    evaluate.add_argument("--fast", action="store_true", help="the suite's --fast settings")
    evaluate.add_argument("--accelerator", help="cpu, gpu or auto (default: auto)")
