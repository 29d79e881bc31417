"""``make test``'s worker count follows the cores a container may use, not the host's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import xdist_workers


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("max 100000\n", None),  # no quota: the affinity
    ("150000 100000\n", 2),  # --cpus 1.5 rounds up to 2 cores
    ("50000 100000\n", 1),
    ("garbage\n", None),
])
def test_a_cgroup_quota_lowers_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, expected: int | None) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    monkeypatch.setattr(xdist_workers, "CPU_MAX", tmp_path / "cpu.max")
    affinity = len(os.sched_getaffinity(0))
    assert xdist_workers.usable_cores() == (affinity if expected is None else min(affinity, expected))


def test_twice_the_cores_between_2_and_8(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores, expected in ((1, 2), (2, 4), (3, 6), (4, 8), (64, 8)):
        monkeypatch.setattr(xdist_workers, "usable_cores", lambda cores=cores: cores)
        assert xdist_workers.workers() == expected
