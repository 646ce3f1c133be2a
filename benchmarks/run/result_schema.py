"""What a ``result.json`` must hold to be read back: every field ``bench``, the leaderboards and
the reports use, of its type, names of plain length, numbers finite and of plain magnitude, and
:func:`read_result`, the one way every command reads a result back. A file edited by hand or
written by something else is data: one that is not a result is set aside or skipped with a
warning naming the field, never a crash of every later ``bench``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.infra.paths import NAME_PART
from benchmarks.infra.read_back import load_json
from benchmarks.run.spec import PAPER_TUNED_KEY, PER_LAYER_PAPER_KEY

#: The per-layer statistics, as the ``per_layer`` protocol records them, in the table's order.
PER_LAYER_STATISTICS = ("silhouette", "sharpness_median", "sharpness_min", "sharpness_raw_median",
                        "sharpness_raw_min", "same_cluster_nonpositive_share",
                        "different_cluster_positive_share")

#: The longest run, suite or dataset name a result may carry (a run name is at most 150
#: characters a part, and names nest once or twice).
LONGEST_NAME = 500
#: The longest budget name (the suites' are ``full``, ``fast`` and ``ci``): it becomes part of
#: a report's file name.
LONGEST_BUDGET = 32
#: The largest magnitude of a number a result holds: far above any metric or time, far below
#: the float range, so that sums and squares over seeds stay finite.
LARGEST_NUMBER = 1e15
#: The largest count (seed, epochs, steps, batch size) a result holds.
LARGEST_COUNT = 2**63
#: The longest commit or configuration hash a result records (a SHA-256 commit is 64 hex
#: digits).
LONGEST_HASH = 64


def read_result(path: str | Path) -> dict[str, Any]:
    """The ``result.json`` at ``path`` read back as every command reads one: through the bounded
    reader (:func:`~benchmarks.infra.read_back.load_json`: a regular file, no link, of bounded
    size and nesting, strict UTF-8), then checked field by field (:func:`check_result`).

    Raises:
        ValueError: the file is not one to read, not JSON, or not a result, naming the field.
        OSError: the file cannot be read (``FileNotFoundError`` where there is none).
    """
    result = load_json(path)
    check_result(result)
    return result


def check_result(result: Any) -> None:
    """A ``result.json`` as ``bench``, the leaderboards and the reports read it: every field they
    use, of its type, names of plain length, numbers finite and of plain magnitude (a file edited
    by hand or written by something else is data: one that is not a result is set aside or
    skipped with a warning, not a crash of every later ``bench``).

    Raises:
        ValueError: naming the first field that is missing or wrong, and what it should be.
    """
    if not isinstance(result, dict):
        raise ValueError("not a clusterbench result (not a mapping)")
    if result.get("kind") == "experiment":
        return
    for key, ok in RESULT_FIELDS.items():
        if key not in result:
            raise ValueError(f"not a clusterbench result: no {key!r}")
        if not ok(result[key]):
            raise ValueError(f"{key!r} is {shown(result[key])}, not what a result holds")
    for name, value in result["metrics"].items():  # the first wrong one, named
        if not is_name(name):
            raise ValueError(f"'metrics' holds the name {shown(name)}, not one of 1 to "
                             f"{LONGEST_NAME} characters")
        if not is_finite_number(value):
            raise ValueError(f"'metrics' {shown(name)} is {shown(value)}, not a finite number "
                             f"of magnitude at most {LARGEST_NUMBER:g}")
    if result.get("status") == "diverged" and not isinstance(result.get("error"), str):
        raise ValueError("a diverged result without its error")
    check_optional(result, OPTIONAL_FIELDS)


def check_optional(result: dict[str, Any], paths: Iterable[tuple[str, ...]]) -> None:
    """The optional fields at ``paths`` (keys of :data:`OPTIONAL_FIELDS`) that ``result``
    holds: each passes its test; ``null`` passes too, except where :data:`NEVER_NULL` says.

    Raises:
        ValueError: naming the first field that is wrong, and what it should be.
    """
    for path in paths:
        ok, accepted = OPTIONAL_FIELDS[path]
        value = field(result, path, MISSING)
        if value is MISSING or value is None and path not in NEVER_NULL:
            continue
        if not ok(value):
            raise ValueError(f"{'.'.join(path)!r} is {shown(value)}, not {accepted}")


def shown(value: Any) -> str:
    """A value read from a file, cut to 80 characters for a one-line message: text quoted,
    anything else as Python prints it, ``null`` as JSON writes it.

    >>> shown("x" * 100)[-5:], shown(10**5000), shown(None), shown([1])
    ("x'...", 'a number of more than 4,000 digits', 'null', '[1]')
    """
    if value is None:
        return "null"
    if isinstance(value, str):
        return repr(value[:80]) + ("..." if len(value) > 80 else "")
    try:
        text = str(value)
    except ValueError:  # Python refuses to print an int of thousands of digits
        return "a number of more than 4,000 digits"
    return text[:80] + ("..." if len(text) > 80 else "")


#: What :func:`field` returns for a key a result lacks (told apart from a ``null`` there).
MISSING = object()


def field(result: dict[str, Any], path: tuple[str, ...], missing: Any = None) -> Any:
    """The value at ``path`` (keys, outermost first), ``missing`` where a mapping lacks it."""
    value: Any = result
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return missing
        value = value[key]
    return value


def is_finite_number(v: Any) -> bool:
    """An int or float that is finite and of plain magnitude (:data:`LARGEST_NUMBER`; ``True``
    is no number, NaN no score). Compared, never converted: an int of 400 digits is no float.

    >>> is_finite_number(0.5), is_finite_number(10**400), is_finite_number(float("nan"))
    (True, False, False)
    """
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) <= LARGEST_NUMBER


def is_seconds(v: Any) -> bool:
    """A time: a finite number, not negative."""
    return is_finite_number(v) and v >= 0


def is_name(v: Any) -> bool:
    """A non-empty string of plain length (:data:`LONGEST_NAME`)."""
    return isinstance(v, str) and 0 < len(v) <= LONGEST_NAME


def is_budget(v: Any) -> bool:
    """A budget's name: letters, digits and ``._+@=-``, at most :data:`LONGEST_BUDGET` long."""
    return isinstance(v, str) and len(v) <= LONGEST_BUDGET and bool(NAME_PART.fullmatch(v))


def is_text(v: Any) -> bool:
    """A string, possibly empty."""
    return isinstance(v, str)


def is_count(v: Any) -> bool:
    """A whole number from 0 to :data:`LARGEST_COUNT` (``True`` is not one)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= LARGEST_COUNT


def is_date(v: Any) -> bool:
    """An ISO 8601 date and time, as :func:`datetime.fromisoformat` reads it (sorted as text,
    so every result's must be one)."""
    from datetime import datetime

    try:
        return isinstance(v, str) and len(v) <= 64 and bool(datetime.fromisoformat(v))
    except ValueError:
        return False


def is_mapping(v: Any) -> bool:
    return isinstance(v, dict)


def is_hash(v: Any) -> bool:
    """A commit or configuration hash: non-empty text of at most :data:`LONGEST_HASH`
    characters."""
    return isinstance(v, str) and 0 < len(v) <= LONGEST_HASH


def is_git(v: Any) -> bool:
    """The checkout a result was computed in: a mapping whose ``dirty`` is true or false (its
    ``commit`` is checked on its own, a hash, never null: a result computed outside a checkout
    records ``git: null`` whole)."""
    return isinstance(v, dict) and isinstance(v.get("dirty", False), bool)


def is_paper(v: Any) -> bool:
    """A run's numbers from its paper: ``source`` text, ``tuned`` true or false, per-layer
    silhouettes by layer, and per metric a number or ``[mean, std]``."""
    def ok(key: str, value: Any) -> bool:
        if key == "source":
            return is_text(value) and len(value) <= LONGEST_NAME
        if key == PAPER_TUNED_KEY:
            return isinstance(value, bool)
        if key == PER_LAYER_PAPER_KEY:
            return isinstance(value, dict) and all(is_finite_number(x) for x in value.values())
        return is_finite_number(value) or (isinstance(value, list) and len(value) == 2
                                           and all(map(is_finite_number, value)))

    return isinstance(v, dict) and all(is_name(k) and ok(k, x) for k, x in v.items())


def is_layers(v: Any) -> bool:
    """The per-layer statistics: a list of mappings, each with its ``layer`` (a count), maybe
    its ``name``, and each statistic a number or null (an infinite sharpness is one)."""
    def number(x: Any) -> bool:
        return x is None or isinstance(x, (int, float)) and not isinstance(x, bool)

    return isinstance(v, list) and len(v) <= 10_000 and all(
        isinstance(layer, dict) and is_count(layer.get("layer"))
        and (layer.get("name") is None or is_name(layer["name"]))
        and all(number(layer.get(key)) for key in PER_LAYER_STATISTICS) for layer in v)


def is_plots(v: Any) -> bool:
    """A suite's plots: a list of mappings naming ``x`` and ``y`` (maybe ``series``, a
    ``title`` and ``log_x``)."""
    return isinstance(v, list) and all(
        isinstance(p, dict) and is_name(p.get("x")) and is_name(p.get("y"))
        and (p.get("series") is None or is_name(p["series"]))
        and is_text(p.get("title", "")) and isinstance(p.get("log_x", False), bool)
        for p in v)


def is_ranking(v: Any) -> bool:
    """A suite's ranking section as a result records it: metrics and baselines by name, a
    margin (null or a number of at least 0) and orderings, each a source and two runs or more."""
    def names(x: Any, least: int = 0) -> bool:
        return isinstance(x, list) and len(x) >= least and all(map(is_name, x))

    margin = v.get("margin") if isinstance(v, dict) else None
    return (isinstance(v, dict) and names(v.get("metrics"), 1) and names(v.get("baselines"))
            and (margin is None or is_finite_number(margin) and margin >= 0)
            and isinstance(v.get("orderings"), list) and all(
                isinstance(o, dict) and is_text(o.get("source")) and names(o.get("runs"), 2)
                for o in v["orderings"]))


def is_searched(v: Any) -> bool:
    """What the search behind a ``+tuned`` run recorded: its counts and its time."""
    return (isinstance(v, dict) and is_count(v.get("configurations_searched"))
            and is_count(v.get("max_epochs")) and is_count(v.get("trials_failed", 0))
            and is_count(v.get("starts", 1)) and is_seconds(v.get("wall_seconds", 0)))


def is_gpu_speed(v: Any) -> bool:
    """The GPU speed settings of a run: empty, or its precision and switches."""
    return isinstance(v, dict) and (not v or (
        isinstance(v.get("precision"), (str, int)) and not isinstance(v["precision"], bool)
        and all(isinstance(x, bool) for k, x in v.items() if k != "precision")))


#: Every field of a result the leaderboard reads, with the test its value must pass.
RESULT_FIELDS: dict[str, Callable[[Any], bool]] = {
    "run": is_name, "suite": is_name, "dataset": is_name, "method": is_name, "budget": is_budget,
    "backbone": is_text, "data_provenance": is_text,
    "seed": is_count, "epochs": is_count, "batch_size": is_count,
    "train_seconds": is_seconds, "wall_seconds": is_seconds,
    "device": is_text,
    "metrics": is_mapping,  # each metric a name and a finite number, checked one by one
    "config": lambda v: isinstance(v, dict) and isinstance(v.get("run"), dict),
    "machine": lambda v: isinstance(v, dict) and (is_text(v.get("gpu")) and bool(v["gpu"]) or (
        is_count(v.get("cpus")) and is_text(v.get("processor")))),
    "versions": lambda v: isinstance(v, dict) and isinstance(v.get("torch"), str) and all(
        x is None or is_text(x) for x in v.values()),
}

#: The fields a result may hold, by their path, with the test a value present must pass and
#: what it should be, in words.
OPTIONAL_FIELDS: dict[tuple[str, ...], tuple[Callable[[Any], bool], str]] = {
    ("finished_at",): (is_date, "an ISO date and time"),
    ("config_hash",): (is_hash, f"a configuration's hash (text of 1 to {LONGEST_HASH} "
                                "characters)"),
    ("status",): (is_text, "text"),
    ("error",): (is_text, "text"),
    ("per_layer",): (is_layers, "a list of layers, each with its 'layer' number and "
                                "statistics that are numbers"),
    ("figures",): (lambda v: isinstance(v, list) and all(map(is_text, v)),
                   "a list of file names"),
    ("git",): (is_git, "a mapping with a commit and dirty (true or false)"),
    ("git", "commit"): (is_hash, f"a commit (text of 1 to {LONGEST_HASH} characters)"),
    ("gpu_speed_settings",): (is_gpu_speed, "a mapping of a precision and true/false switches"),
    ("resumed_from_epoch",): (is_count, "a count of epochs"),
    ("train_steps",): (is_count, "a count of steps"),
    ("evaluated_from",): (is_text, "text"),
    ("same_as",): (is_name, "a run's name"),
    ("protocol_seconds",): (is_mapping, "a mapping of steps to seconds"),
    ("config", "headline"): (is_name, "a metric's name"),
    ("config", "plots"): (is_plots, "a list of plots, each naming its x and y"),
    ("config", "ranking"): (is_ranking, "a ranking: metrics, baselines, a margin and orderings "
                                        "of two runs or more"),
    ("config", "suite_file"): (is_text, "a file name"),
    ("suite_file",): (is_text, "a file name"),  # an experiment's: its suite file
    ("config", "evaluation"): (is_mapping, "a mapping of protocols to settings"),
    ("config", "run", "name"): (is_name, "a run's name"),
    ("config", "run", "model"): (is_mapping, "a mapping of settings"),
    ("config", "run", "data"): (is_mapping, "a mapping of settings"),
    ("config", "run", "trainer"): (is_mapping, "a mapping of settings"),
    ("config", "run", "paper"): (is_paper, "a paper's numbers: source text and per metric a "
                                           "finite number or [mean, std]"),
    ("config", "run", "searched"): (is_searched, "a search's record with its counts "
                                                 "(configurations_searched, max_epochs)"),
}


#: The optional fields every result that holds them writes as a value, never ``null``: a null
#: there is refused (the leaderboard sorts by the date and groups by the hash).
NEVER_NULL = {("finished_at",), ("config_hash",), ("git", "commit")}


def is_tables(v: Any) -> bool:
    """An experiment's tables: title -> rows, each row a mapping of column to a plain value."""
    def plain(x: Any) -> bool:
        return x is None or isinstance(x, (str, bool, int, float))

    return isinstance(v, dict) and all(
        is_name(title) and isinstance(rows, list) and all(
            isinstance(row, dict) and all(is_text(k) and plain(x) for k, x in row.items())
            for row in rows) for title, rows in v.items())


#: Every field of an experiment suite's ``result.json`` its report reads.
EXPERIMENT_FIELDS: dict[str, Callable[[Any], bool]] = {
    "suite": is_name, "experiment": is_name, "budget": is_budget,
    "seeds": lambda v: isinstance(v, list) and all(map(is_count, v)),
    "settings": is_mapping, "tables": is_tables,
    "notes": lambda v: isinstance(v, list) and all(map(is_text, v)),
    "wall_seconds": is_seconds,
    "machine": RESULT_FIELDS["machine"], "versions": RESULT_FIELDS["versions"],
}


def check_experiment_result(result: dict[str, Any]) -> None:
    """An experiment suite's ``result.json`` (``kind: experiment``) as its report reads it.

    Raises:
        ValueError: naming the first field that is missing or wrong.
    """
    for key, ok in EXPERIMENT_FIELDS.items():
        if key not in result:
            raise ValueError(f"not an experiment's result: no {key!r}")
        if not ok(result[key]):
            raise ValueError(f"{key!r} is {shown(result[key])}, not what an experiment's "
                             "result holds")
    check_optional(result, [("finished_at",), ("git",), ("git", "commit"), ("suite_file",)])
