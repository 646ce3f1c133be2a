"""``clusterbench data``: where each dataset goes, whether it is there and verified, and
fetching it on a machine with a network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.cli.console import EXIT_BAD_INPUT
from benchmarks.infra.errors import ConfigError


def data_main(ns: argparse.Namespace) -> int:
    """``clusterbench data``: where each dataset goes and whether it is there; ``verify`` runs
    every check its datamodule makes (offline); ``fetch`` downloads and then verifies."""
    root, names = data_root_and_names(ns)
    if ns.action == "fetch":
        fetch_datasets(root, names)
    print(f"data root: {root}" + ("" if ns.names or ns.action == "fetch"
                                  else " ($CLUSTERBENCH_DATA, else ~/.cache/clusterbench)"))
    failed = print_dataset_table(root, names, verify=ns.action in ("verify", "fetch"))
    if failed:
        print(f"clusterbench: error: {', '.join(failed)} failed verification (above)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def data_root_and_names(ns: argparse.Namespace) -> tuple[Path, list[str]]:
    """The data root and the datasets the command is about, each name checked."""
    from datamodules.base import default_data_dir
    from datamodules.catalog import CATALOG

    if ns.action == "fetch":
        if not ns.names or ns.to is None:
            raise ConfigError("data fetch needs dataset names and --to DIR; accepted names: "
                              + ", ".join(CATALOG))
        root, names = Path(ns.to), ns.names
    else:
        if len(ns.names) > 1:
            raise ConfigError(f"data {ns.action} takes one data root, got {' '.join(ns.names)}")
        root, names = Path(ns.names[0]) if ns.names else default_data_dir(), list(CATALOG)
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ConfigError(f"unknown dataset {unknown[0]!r}; accepted: {', '.join(CATALOG)}")
    return root, names


def fetch_datasets(root: Path, names: list[str]) -> None:
    """Each dataset downloaded into its folder under ``root``; a failed download is one line."""
    from datamodules.catalog import CATALOG, fetch

    for name in names:
        print(f"{name}: downloading into {root / CATALOG[name].folder} ...", flush=True)
        try:
            fetch(root, name)
        except OSError as err:  # no network, refused, interrupted
            raise ConfigError(f"{name}: the download failed ({' '.join(str(err).split())})"
                              ) from err


def print_dataset_table(root: Path, names: list[str], verify: bool) -> list[str]:
    """A Markdown table of each dataset's folder, download and status (verified when
    ``verify``); returns the datasets that failed verification."""
    from datamodules.catalog import CATALOG, present, system_copy
    from datamodules.catalog import verify as verify_dataset

    print("| dataset | folder | download | status |\n|---|---|---|---|")
    failed = []
    for name in names:
        entry, here = CATALOG[name], present(root, name)
        status = "present" if here else f"absent (from {entry.url})"
        system = system_copy(name)
        if not here and system:
            status = f"absent here; runs read the system package's {system}"
        if verify and here:
            problem = verify_dataset(root, name)
            status = "verified" if problem is None else f"FAILED: {problem}"
            failed += [name] if problem else []
        print(f"| {name} | {entry.folder} | {entry.download} | {status} |")
    return failed


def add_parser(sub) -> None:
    """``clusterbench data``'s options."""
    data = sub.add_parser(
        "data", help="the datasets: where each goes, whether it is there and verified, and "
        "fetching them on a machine with a network (for nodes without one)")
    data.add_argument("action", nargs="?", choices=("list", "verify", "fetch"), default="list",
                      help="list (default): folders, sizes and presence under the data root; "
                      "verify [DIR]: every check a run makes, offline; fetch NAME... --to DIR: "
                      "download, then verify")
    data.add_argument("names", nargs="*", metavar="DIR|NAME",
                      help="list/verify: the data root (default $CLUSTERBENCH_DATA, else "
                      "~/.cache/clusterbench); fetch: the datasets")
    data.add_argument("--to", default=None, help="fetch: the data root to download into")
