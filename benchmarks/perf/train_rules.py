"""The rules a case's measurement in the training-throughput benchmark
(:mod:`benchmarks.perf.train_throughput`) keeps, checked on the order of events it records
(:class:`Timeline`) by :func:`check_rules`: so that a figure measures what it names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from benchmarks.perf.train_pipelines import ANCHORS, REFERENCE

#: Timed windows per pipeline at least: fewer give no useful spread (the first GPU page had 2).
MIN_WINDOWS = 5


@dataclass
class Timeline:
    """What a case's run did, in order: each pipeline's build, warm-up, peak span, host-read
    count and timed windows, and the FLOP passes; :func:`check_rules` reads it."""

    events: list[dict] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)

    def add(self, event: str, pipeline: str, **info) -> None:
        """``event`` of ``pipeline``, stamped with the seconds since the case began."""
        self.events.append({"event": event, "pipeline": pipeline,
                            "at": round(time.perf_counter() - self.start, 3), **info})



def check_rules(case: str, timings: dict[str, dict], events: list[dict], device: str,
                min_windows: int = MIN_WINDOWS) -> dict[str, dict]:
    """The rules a case's measurement keeps, each ``{"passed": bool, "detail": str}``:

    - ``backbone``: every pipeline trains the case's own architecture (read from its module);
    - ``windows``: at least ``min_windows`` timed windows each, in rounds where every pipeline
      has one window;
    - ``clean_windows``: no counting pass entered and no dispatch mode active in a window;
    - ``peak``: each pipeline's peak is reset after its warm-up and read before anything else
      runs, and no FLOP pass falls between;
    - ``warm_up``: each pipeline warms up before its peak span and its first window, with
      cuDNN's autotuner on (on a GPU);
    - ``optimiser``: each bare loop's optimiser groups, learning rates and schedule equal its
      clusterbench's after the same steps;
    - ``compile``: the compiled pipelines compiled, the eager ones not;
    - ``flops_last``: every FLOP pass after the last timed window (a counter's pass between two
      windows would run, and warm or cool the machine, inside the timed part of the run);
    - ``window_steps``: each window's steps a multiple of its pipeline's loader workers (whole
      rounds of them, as a steady loader takes);
    - ``warm_windows``: each window of a pipeline with loader workers after at least as many
      untimed steps as their queue holds (no window starts with idle workers).
    """
    backbone = case.split("SimCLR ")[1].split(",")[0]
    rules: dict[str, dict] = {}
    wrong = {p: t.get("architecture") for p, t in timings.items()
             if t.get("architecture") != backbone}
    rules["backbone"] = {"passed": not wrong, "detail": (
        f"every pipeline trains {backbone}" if not wrong else
        "; ".join(f"{p} trains {a}" for p, a in wrong.items()))}
    windows = [e for e in events if e["event"] == "window"]
    names = list(timings)
    rounds = [windows[i:i + len(names)] for i in range(0, len(windows), len(names))]
    interleaved = all(sorted(e["pipeline"] for e in r) == sorted(names) for r in rounds)
    counts = {p: sum(e["pipeline"] == p for e in windows) for p in names}
    rules["windows"] = {"passed": interleaved and min(counts.values()) >= min_windows,
                        "detail": f"{min(counts.values())} windows each (at least "
                        f"{min_windows}), " + ("in rounds of every pipeline" if interleaved
                                               else "NOT in rounds of every pipeline")}
    dirty = [e for e in windows if e["counting_passes"] or e["dispatch_modes"]]
    rules["clean_windows"] = {"passed": not dirty, "detail": (
        "no counting pass and no dispatch mode in any window" if not dirty else
        f"{len(dirty)} windows ran with a counter or dispatch mode")}
    peak_ok, warm_ok, problems = True, True, []
    for p in names:
        mine = [i for i, e in enumerate(events) if e["pipeline"] == p]
        kinds = [events[i]["event"] for i in mine]
        if "reset peak" not in kinds or "read peak" not in kinds or "warm-up" not in kinds:
            peak_ok = warm_ok = False
            problems.append(f"{p}: no warm-up, peak reset or peak read")
            continue
        reset, read = (mine[kinds.index("reset peak")], mine[kinds.index("read peak")])
        warm = mine[kinds.index("warm-up")]
        first_window = min((i for i in mine if events[i]["event"] == "window"), default=None)
        if not reset + 1 == read:
            peak_ok = False
            problems.append(f"{p}: other work between its peak's reset and read")
        if not (warm < reset and (first_window is None or warm < first_window)):
            warm_ok = False
            problems.append(f"{p}: timed or measured before its warm-up")
        if device == "cuda" and not events[warm].get("cudnn_benchmark"):
            warm_ok = False
            problems.append(f"{p}: warmed up with cuDNN's autotuner off")
    rules["peak"] = {"passed": peak_ok, "detail": "each pipeline's peak reset after its "
                     "warm-up and read after its own steps only" if peak_ok
                     else "; ".join(problems)}
    rules["warm_up"] = {"passed": warm_ok, "detail": "each pipeline warmed up before it was "
                        "measured" if warm_ok else "; ".join(problems)}
    signatures = next((e["signatures"] for e in events if e["event"] == "signatures"), {})
    differ = [p for p in names if p.startswith("bare loop")
              and signatures.get(p) != signatures.get(REFERENCE[p])]
    rules["optimiser"] = {"passed": bool(signatures) and not differ, "detail": (
        "each bare loop's optimiser groups, learning rates and schedule equal clusterbench's"
        if signatures and not differ else
        f"differ from clusterbench's: {', '.join(differ) or 'not recorded'}")}
    miscompiled = [p for p in names if p != ANCHORS and (
        timings[p].get("compile", "eager").startswith("compiled") == p.endswith(", eager"))]
    rules["compile"] = {"passed": not miscompiled, "detail": (
        "compiled and eager as named" if not miscompiled else
        "; ".join(f"{p}: {timings[p].get('compile')}" for p in miscompiled))}
    last_window = max((i for i, e in enumerate(events) if e["event"] == "window"), default=-1)
    early = [f"{e['pipeline']}'s (event {i})" for i, e in enumerate(events)
             if e["event"] == "flops" and i < last_window]
    rules["flops_last"] = {"passed": not early, "detail": (
        "FLOPs counted after every timed window" if not early else
        f"FLOP passes before the last timed window (event {last_window}): {', '.join(early)}")}
    unrecorded = [e["pipeline"] for e in windows
                  if not all(k in e for k in ("steps", "workers", "queue", "warm_steps"))]
    uneven = {f"{e['pipeline']}: {e['steps']} steps with {e['workers']} workers"
              for e in windows if e["pipeline"] not in unrecorded
              and e["steps"] % max(e["workers"], 1)}
    missing = (f"steps, workers or warm steps not recorded: {', '.join(sorted(set(unrecorded)))}"
               if unrecorded else "")
    rules["window_steps"] = {"passed": not uneven and not unrecorded, "detail": (
        "each window whole rounds of its loader's workers" if not uneven and not unrecorded
        else "; ".join([*sorted(uneven), *([missing] if missing else [])]))}
    cold: dict[str, int] = {}
    for e in windows:
        if e["pipeline"] not in unrecorded and e["warm_steps"] < max(e["queue"], e["workers"]):
            cold[e["pipeline"]] = cold.get(e["pipeline"], 0) + 1
    rules["warm_windows"] = {"passed": not cold and not unrecorded, "detail": (
        "each window of a loader with workers after untimed steps that refill its queue"
        if not cold and not unrecorded else "; ".join(
            [*(f"{p}: {n} windows started cold (fewer untimed steps before them than its "
               f"loader's queue holds)" for p, n in cold.items()),
             *([missing] if missing else [])]))}
    return rules
