"""A Ray instance kept busy by another driver: every CPU held by a placement group."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def every_cpu_held() -> Iterator[None]:
    """While the block runs, a placement group holds every CPU of the Ray instance this process
    is connected to, so no task or trial can start."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": ray.cluster_resources()["CPU"]}])
    ray.get(group.ready(), timeout=60)
    try:
        yield
    finally:
        remove_placement_group(group)
