"""The local Ray instance of ``bench --parallel`` and ``tune`` is local, whatever cluster the
environment names: a driver on a machine whose shell exports ``RAY_ADDRESS`` (or where a
``ray start --head`` ran) still starts its own instance instead of failing to join that one."""

from __future__ import annotations

import os
import socket

import pytest


@pytest.mark.slow
def test_a_driver_with_ray_address_set_starts_its_own_instance(monkeypatch):
    import ray

    from benchmarks.run.local_ray import start_local_ray, stop_local_ray

    if ray.is_initialized():
        pytest.skip("a Ray instance of another test is up in this process")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        elsewhere = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("RAY_ADDRESS", elsewhere)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    watchdog = start_local_ray()
    try:
        context = ray.get_runtime_context()
        assert ray.cluster_resources()["CPU"] == os.cpu_count()
        assert context.gcs_address != elsewhere
    finally:
        stop_local_ray(watchdog)
