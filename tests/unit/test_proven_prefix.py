"""The ownership proof's arithmetic: our keyed acks extend it, a gap stops it until it is read."""

from __future__ import annotations

import pytest

from runtime.log.kafka.proven import ProvenPrefix

pytestmark = pytest.mark.unit


def test_consecutive_acks_from_the_start_extend_the_proof() -> None:
    proven = ProvenPrefix(11)  # the claim at 10
    assert [proven.ours(o) for o in (11, 12, 13)] == [True, True, True]
    assert proven.upto == 14 and proven.gaps == 0


def test_an_ack_above_a_gap_does_not_prove_the_gap() -> None:
    proven = ProvenPrefix(11)
    proven.ours(11)
    assert proven.ours(13) is False  # 12 is someone else's record: unread, it may be a claim
    proven.ours(14)
    assert proven.upto == 12 and proven.gaps == 1


def test_reading_the_gap_takes_in_our_acks_beyond_it() -> None:
    proven = ProvenPrefix(11)
    for offset in (11, 13, 14, 17):
        proven.ours(offset)
    assert proven.read_to(13) is True  # 12 read: no claim
    assert proven.upto == 15  # 13 and 14 are ours; 15 and 16 are not read yet
    assert proven.read_to(17) is True
    assert proven.upto == 18 and proven.gaps == 0


def test_an_ack_below_the_proof_or_out_of_order_proves_nothing_new() -> None:
    proven = ProvenPrefix(11)
    proven.read_to(20)
    assert proven.ours(15) is False and proven.upto == 20
    proven.ours(25)
    proven.ours(23)  # not from one in-order producer: left to the reading
    assert proven.read_to(24) is True and proven.upto == 24  # 23 was not taken as ours
    assert proven.read_to(25) is True and proven.upto == 26


def test_reading_less_than_is_proven_changes_nothing() -> None:
    proven = ProvenPrefix(11)
    proven.ours(11)
    assert proven.read_to(5) is False and proven.upto == 12
