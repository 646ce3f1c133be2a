"""``clusterbench list``: the registered methods, losses, datamodules, evaluation protocols,
experiments and suites, each with the first sentence of its description.

The registries are the classes and functions themselves, and importing them imports torch,
Lightning and torchvision (about 12 s on two cores, nearly all of ``list``'s time). Their
sentences are kept in a cache file keyed on the source of the packages that define them
(:func:`source_fingerprint`), so that a ``list`` after the first reads them in a blink; any change
to that source makes a new key, and the suites are read afresh each time. A process that has
imported the registries already reads them as they are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.cli.console import first_sentence, print_entries
from benchmarks.infra import source_cache

#: The packages whose source the registries' sentences come from (their classes' and functions'
#: docstrings and attributes, and the way ``list`` words them).
LISTED_PACKAGES = ("benchmarks", "modules", "datamodules")
#: The modules that hold the registries ``list`` reads (:func:`registry_entries`).
REGISTRY_MODULES = ("modules.methods", "modules.losses", "datamodules", "benchmarks.protocols",
                    "benchmarks.experiments")


def list_main(ns: argparse.Namespace) -> int:
    """Each registry, one entry a line, wrapped to the terminal."""
    import shutil

    from benchmarks.suites.suite_file import suites

    width = shutil.get_terminal_size((100, 24)).columns
    for title, entries in cached_registry_entries().items():
        print_entries(title, entries, width)
    print_entries("Suites (clusterbench bench NAME):",
                  {name: suite_sentence(path) for name, path in suites().items()}, width)
    return 0


def registry_entries() -> dict[str, dict[str, str]]:
    """Each registry's title -> each name in it -> its sentence, from the registries
    themselves."""
    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.protocols import PROTOCOLS
    from datamodules import DATAMODULES
    from modules.losses import CONTRASTIVE_LOSSES
    from modules.methods import METHODS

    return {
        "Methods (--model NAME):":
            {name: first_sentence(cls.__doc__) for name, cls in METHODS.items()},
        "Contrastive losses (model.loss of simclr and moco):":
            {name: loss_sentence(loss.function, loss.hyperparameters)
             for name, loss in CONTRASTIVE_LOSSES.items()},
        "Datamodules (--data NAME):":
            {name: f"[{cls.provenance}] {source_sentence(cls)}"
             for name, cls in DATAMODULES.items()},
        "Evaluation protocols (evaluation: NAME: in a suite):":
            {name: capitalised(first_sentence(protocol.summary))
             for name, protocol in PROTOCOLS.items()},
        "Experiments (experiment: NAME in a kind: experiment suite):":
            {name: first_sentence(function.__doc__) for name, function in EXPERIMENTS.items()},
    }


def source_fingerprint() -> str:
    """A hash of every Python file of :data:`LISTED_PACKAGES` and of whether Python strips
    docstrings (:func:`benchmarks.infra.source_cache.source_fingerprint`)."""
    return source_cache.source_fingerprint(LISTED_PACKAGES)


def cache_folder() -> Path:
    """Where ``list`` keeps its cache: ``$XDG_CACHE_HOME/clusterbench-list``, else
    ``~/.cache/clusterbench-list`` (beside, not inside, the datasets' default root)."""
    return source_cache.cache_folder("clusterbench-list")


def cached_registry_entries() -> dict[str, dict[str, str]]:
    """:func:`registry_entries`: in a process that has imported none of
    :data:`REGISTRY_MODULES` yet, from the cache file of this source when there is one (else
    from the registries, then kept for the next ``list``, the files of other source removed); in
    one that has, from the registries as they are (their cost is paid, and an entry added at run
    time, as a notebook or a test does, is listed and kept out of the cache). A cache that
    cannot be written costs the next ``list`` its imports, nothing more."""
    import sys

    if any(module in sys.modules for module in REGISTRY_MODULES):
        return registry_entries()
    path = cache_folder() / f"registries-{source_fingerprint()}.json"
    kept = kept_entries(path)
    if kept is not None:
        return kept
    entries = registry_entries()
    source_cache.keep(path, entries)
    return entries


def kept_entries(path: Path) -> dict[str, dict[str, str]] | None:
    """The listing a cache file holds, or None where there is no readable one. The file is in
    the user's folder: read only as a bounded regular file, and its text shown as text."""
    from benchmarks.infra.errors import control_free

    kept = source_cache.read_kept(path)
    if not is_listing(kept):
        return None
    return {control_free(title): {control_free(name): control_free(sentence)
                                  for name, sentence in entries.items()}
            for title, entries in kept.items()}


def is_listing(value: object) -> bool:
    """Whether ``value`` (a cache file's JSON) has the shape of :func:`registry_entries`.

    >>> is_listing({"Methods:": {"simclr": "SimCLR."}}), is_listing({"Methods:": ["simclr"]})
    (True, False)
    """
    return isinstance(value, dict) and bool(value) and all(
        isinstance(title, str) and isinstance(entries, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())
        for title, entries in value.items())


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
