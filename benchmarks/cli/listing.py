"""``clusterbench list``: the registered methods, losses, datamodules, evaluation protocols,
experiments and suites, each with the first sentence of its description."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.console import first_sentence, print_entries


def list_main(ns: argparse.Namespace) -> int:
    """Each registry, one entry a line, wrapped to the terminal."""
    import shutil

    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.protocols import PROTOCOLS
    from benchmarks.suites.suite_file import suites
    from datamodules import DATAMODULES
    from modules.losses import CONTRASTIVE_LOSSES
    from modules.methods import METHODS

    width = shutil.get_terminal_size((100, 24)).columns
    print_entries("Methods (--model NAME):",
                  {name: first_sentence(cls.__doc__) for name, cls in METHODS.items()}, width)
    print_entries("Contrastive losses (model.loss of simclr and moco):",
                  {name: loss_sentence(loss.function, loss.hyperparameters)
                   for name, loss in CONTRASTIVE_LOSSES.items()}, width)
    print_entries("Datamodules (--data NAME):",
                  {name: f"[{cls.provenance}] {source_sentence(cls)}"
                   for name, cls in DATAMODULES.items()}, width)
    print_entries("Evaluation protocols (evaluation: NAME: in a suite):",
                  {name: capitalised(first_sentence(protocol.summary))
                   for name, protocol in PROTOCOLS.items()}, width)
    print_entries("Experiments (experiment: NAME in a kind: experiment suite):",
                  {name: first_sentence(function.__doc__)
                   for name, function in EXPERIMENTS.items()}, width)
    print_entries("Suites (clusterbench bench NAME):",
                  {name: suite_sentence(path) for name, path in suites().items()}, width)
    return 0


def add_parser(sub) -> None:
    """``clusterbench list`` (no options)."""
    sub.add_parser("list", help="registered methods, losses, datamodules, protocols, experiments "
                               "and suites")


def suite_sentence(path: Path) -> str:
    """The first sentence of a suite file's ``description``; a file that cannot be read as a
    suite says so in its entry instead of hiding every other one."""
    from benchmarks.infra.errors import ConfigError
    from benchmarks.suites.suite_file import read_suite_file

    try:
        return first_sentence(str(read_suite_file(str(path))[1].get("description", "")))
    except ConfigError as err:
        return f"(unreadable: {err})"


def source_sentence(cls: type) -> str:
    """The first sentence of a dataset's ``source``, less the provenance the list already shows.

    >>> class Blobs:
    ...     provenance, source = "generated", "generated: Gaussian blobs. Five of them."
    >>> source_sentence(Blobs)
    'Gaussian blobs.'
    """
    import re

    sentence = first_sentence(cls.source)
    return re.sub(rf"^{re.escape(cls.provenance)}:\s*", "", sentence, flags=re.IGNORECASE)


def loss_sentence(function, hyperparameters: tuple[str, ...]) -> str:
    """The first sentence of a loss function's docstring, then the values a table row binds
    (``laplacian`` is the exponential kernel at gamma = 1) and the model arguments it reads.

    >>> import functools
    >>> def kernel(z, gamma, temperature):
    ...     "An exponential kernel. More."
    >>> loss_sentence(functools.partial(kernel, gamma=1.0), ("temperature",))
    'An exponential kernel, with gamma = 1.0; reads temperature.'
    """
    import functools

    bound = function.keywords if isinstance(function, functools.partial) else {}
    inner = function.func if isinstance(function, functools.partial) else function
    sentence = first_sentence(inner.__doc__).removesuffix(".")
    if bound:
        sentence += ", with " + ", ".join(f"{k} = {v}" for k, v in bound.items())
    return f"{sentence}; reads {', '.join(hyperparameters)}."


def capitalised(sentence: str) -> str:
    """``sentence`` with its first letter a capital (a protocol's summary starts lower-case)."""
    return sentence[:1].upper() + sentence[1:]
