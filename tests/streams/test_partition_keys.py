"""Partition placement and ranges (contract §10), no Redis needed."""

from __future__ import annotations

import zlib

import pytest

from streams.keys import Keys, keys_for_job, parse_partitions, partition_keys, partition_of


def test_one_partition_keeps_the_section_1_keys() -> None:
    keys = Keys("streamcrew")
    assert partition_keys(keys, 1) == (keys,)
    assert keys_for_job(keys, 1, "anything").job("anything") == "streamcrew:job:anything"
    assert keys.generated_id("1-0") == "1-0"


def test_partition_keys_carry_a_hash_tag() -> None:
    keys = Keys("streamcrew").in_partition(4)
    assert keys.lane("high") == "streamcrew:{4}:requests:high"
    assert keys.results == "streamcrew:{4}:results"
    assert keys.job("a") == "streamcrew:{4}:job:a"
    assert keys.generated_id("17-3") == "17-3:4"
    assert keys.lane_name(keys.lane("low")) == "low"


def test_ids_go_by_crc32_and_generated_ids_by_the_partition_they_name() -> None:
    assert partition_of("order-1", 6) == zlib.crc32(b"order-1") % 6
    assert partition_of("1733000000000-7:5", 6) == 5
    # a named partition out of range is just an id: crc32 places it
    assert partition_of("1733000000000-7:9", 6) == zlib.crc32(b"1733000000000-7:9") % 6
    assert partition_of("whatever", 1) == 0


def test_a_prefix_with_its_own_hash_tag_cannot_be_partitioned() -> None:
    with pytest.raises(ValueError, match="hash tag"):
        Keys("{streamcrew}").in_partition(0)


@pytest.mark.parametrize(("spec", "expected"), [("", (0, 1, 2, 3)), ("0-1", (0, 1)), ("3,1", (1, 3)), ("2", (2,))])
def test_partition_ranges(spec: str, expected: tuple[int, ...]) -> None:
    assert parse_partitions(spec, 4) == expected


@pytest.mark.parametrize("spec", ["0-4", "x", "2-1", "-1"])
def test_bad_partition_ranges_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_partitions(spec, 4)


@pytest.mark.parametrize("spec", ["1-", "0-3,5-", "1_0", "+1", "\u0661", "1-+3"])
def test_a_range_int_would_stretch_is_refused_not_narrowed(spec: str) -> None:
    # "5-" (meant: 5 to the end) read as partition 5 alone left 6-11 unserved without a word; "1_0", "+1" and other
    # digits Python's int() accepts are not the ranges the docs describe, so they are refused too
    with pytest.raises(ValueError, match="use e.g. 0-3,5"):
        parse_partitions(spec, 12)


def test_a_backwards_range_says_so() -> None:
    with pytest.raises(ValueError, match=r"partition range '3-1' runs backwards; write 1-3"):
        parse_partitions("3-1", 4)
