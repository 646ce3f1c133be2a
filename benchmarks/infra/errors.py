"""The errors every layer raises, and the "did you mean" hint their messages carry.

At the bottom of the layers, so that a loss's range check, a search, a suite file and the CLI
raise one :class:`ConfigError`, which the CLI turns into one line and exit status 2.
"""

from __future__ import annotations

import difflib
import re
from typing import Any


class ConfigError(ValueError):
    """A bad name, key or value in a suite or on the command line (the CLI exits 2)."""


class Preempted(KeyboardInterrupt):
    """The process got a stop signal (``signum``: a cluster scheduler's SIGTERM, SLURM's
    SIGUSR1, a closed terminal's SIGHUP; :mod:`benchmarks.infra.stop_signals`): what can be
    checkpointed is saved and the same command goes on. A KeyboardInterrupt, so that a suite
    stops rather than starting its next run; the CLI exits 128 + ``signum``, as a shell reports
    a process the signal stopped."""

    def __init__(self, *args: object, signum: int = 15) -> None:
        super().__init__(*args)
        self.signum = signum


def suggest(name: str, accepted: set[str] | list[str]) -> str:
    """The end of a message refusing ``name``: the closest accepted name, if one is close, then
    every accepted one.

    >>> suggest("max_epoch", {"max_epochs", "min_epochs", "devices"})
    " (did you mean 'max_epochs'?); accepted: devices, max_epochs, min_epochs"
    """
    close = difflib.get_close_matches(str(name), list(accepted), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; accepted: {', '.join(sorted(accepted))}"


def resolve_name(registry: dict[str, Any], name: str, what: str) -> Any:
    """``registry[name]``, or a ConfigError listing the available names (a list or a number
    where a name belongs included)."""
    if not isinstance(name, str) or name not in registry:
        raise ConfigError(f"unknown {what} {name!r}{suggest(name, set(registry))}")
    return registry[name]


#: The control characters a terminal acts on (ESC of ANSI and OSC sequences, BEL, CR, C1's
#: CSI...), all but tab and newline.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def control_free(text: str) -> str:
    r"""``text`` with every control character but tab and newline replaced by ``?``: a name
    from a result file printed to a terminal can neither recolour nor retitle it, nor
    overwrite a line.

    >>> control_free("run\x1b]0;owned\x07\r")
    'run?]0;owned??'
    """
    return _CONTROLS.sub("?", text)
