"""``clusterbench``: one module a subcommand.

Bad input prints one clear line and exits with status 2; a suite whose runs crashed exits 1.
A stop signal (SIGTERM, SIGINT, SIGHUP, SLURM's SIGUSR1) ends every command within a bounded
grace, what can be checkpointed saved, with one line saying what stopped and how to go on, and
exit status 128 + the signal's number (:mod:`benchmarks.infra.stop_signals`).
"""

from __future__ import annotations

import argparse
import os
import sys
from signal import SIGINT, SIGUSR1

from benchmarks.cli import bench, compare, data, evaluate, leaderboard, listing, tuning
from benchmarks.cli.console import EXIT_BAD_INPUT, quiet_lightning
from benchmarks.infra import stop_signals
from benchmarks.infra.atomic import DiskFull, is_disk_full, lost_own_file
from benchmarks.infra.errors import ConfigError, control_free
from benchmarks.infra.locking import FolderRefused
from benchmarks.infra.tensor_files import BadFile

#: LightningCLI's subcommands (:mod:`benchmarks.cli.fit`), which parse their own options.
LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
#: Each other subcommand's handler.
HANDLERS = {"bench": bench.bench_main, "evaluate": evaluate.evaluate_main,
            "tune": tuning.tune_main, "leaderboard": leaderboard.leaderboard_main,
            "report": leaderboard.report_main, "list": listing.list_main, "data": data.data_main,
            "compare": compare.compare_main}


def build_parser() -> argparse.ArgumentParser:
    """``clusterbench``'s parser: each subcommand's module declares its options."""
    parser = argparse.ArgumentParser(
        prog="clusterbench",
        description="Benchmark suite for clustering-aware representation learning.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_lightning_parsers(sub)
    bench.add_parser(sub)
    evaluate.add_parser(sub)
    tuning.add_parser(sub)
    leaderboard.add_parsers(sub)
    compare.add_parser(sub)
    listing.add_parser(sub)
    data.add_parser(sub)
    return parser


def add_lightning_parsers(sub) -> None:
    """``fit``, ``validate`` and ``test`` in ``clusterbench --help``; LightningCLI parses their
    options."""
    sub.add_parser("fit", add_help=False,
                   help="train one method on one dataset (LightningCLI: --model NAME --data NAME "
                   "--trainer.* -c config.yaml, --ckpt_path to resume; `clusterbench fit --help` "
                   "for all options)")
    sub.add_parser("validate", add_help=False,
                   help="score a method on the validation split (LightningCLI, as fit; "
                   "--ckpt_path picks the weights)")
    sub.add_parser("test", add_help=False,
                   help="score a method on the test split (LightningCLI, as fit; --ckpt_path "
                   "picks the weights)")


def disk_full(err: OSError) -> str:
    """A full disk met outside our own writes (Lightning's, torch's): the same one line."""
    return str(DiskFull(err.filename or "a result file"))


def main(argv: list[str] | None = None) -> int:
    """``clusterbench ARGV``: the subcommand's exit status, every refusal one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with stop_signals.stop_handlers():
        try:
            return run_command(argv)
        except KeyboardInterrupt as err:  # a stop signal: what can be checkpointed is saved
            signum = stop_signals.received() or getattr(err, "signum", SIGINT)
            detail = str(err)
        except SystemExit:  # Lightning's way out of a fit stopped by a signal
            if stop_signals.received() is None:
                raise
            signum, detail = stop_signals.received(), ""
        # out of the except clause, its traceback (which holds the training's loader workers)
        # is let go before the helpers are ended
        return stopped(signum, detail)


def run_command(argv: list[str]) -> int:
    """The subcommand of ``argv``, a refusal said in one line (exit 2), a full disk too (exit 1)."""
    ns = None
    try:
        if argv and argv[0] in LIGHTNING_SUBCOMMANDS:
            from benchmarks.cli import fit

            return fit.main(argv[0], argv[1:])
        ns = build_parser().parse_args(argv)
        # W&B's own lines ("wandb: ...", hundreds a suite) stay in each run's debug log, under
        # the run's wandb/ folder; WANDB_SILENT=false shows them
        os.environ.setdefault("WANDB_SILENT", "true")
        with quiet_lightning():
            return HANDLERS[ns.command](ns)
    except (ConfigError, BadFile, FileNotFoundError, FolderRefused) as err:
        if getattr(ns, "command", None) == "bench" and lost_own_file(err, ns.results):
            raise  # a file bench wrote is gone: a crash, not an input to mend
        print(f"clusterbench: error: {control_free(str(err))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        if not is_disk_full(err):
            raise
        full = err if isinstance(err, DiskFull) else disk_full(err)
        print(f"clusterbench: error: {control_free(str(full))}", file=sys.stderr)
        return 1


def stopped(signum: int, detail: str) -> int:
    """The one line of a command a signal stopped (SLURM's SIGUSR1 requeues the job first), its
    helper processes ended, and its exit status, 128 + the signal's number."""
    stop_signals.end_helpers()
    if signum == SIGUSR1:
        detail = "; ".join(part for part in (detail, stop_signals.requeue_slurm_job()) if part)
    print(control_free(stop_signals.stopped_line(signum, detail)), file=sys.stderr, flush=True)
    return stop_signals.exit_status(signum)
