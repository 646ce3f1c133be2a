"""``clusterbench``: one module a subcommand.

Bad input prints one clear line and exits with status 2; a suite whose runs crashed exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchmarks.cli import bench, compare, data, evaluate, leaderboard, listing, tuning
from benchmarks.cli.console import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_PREEMPTED, quiet_lightning
from benchmarks.infra.atomic import DiskFull, is_disk_full, lost_own_file
from benchmarks.infra.errors import ConfigError, Preempted, control_free
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
    except Preempted as err:  # SIGTERM: the run's checkpoint is saved
        print(f"clusterbench: preempted: {err}", file=sys.stderr)
        return EXIT_PREEMPTED
    except KeyboardInterrupt as err:  # Ctrl-C; a search says how to resume it
        print(f"clusterbench: interrupted{': ' + str(err) if str(err) else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
