"""Which partition a run lives in: Kafka's murmur2 partitioner, as the Java client computes it.

Commands and events have the same partition count, and every agentlog producer keys records
by run id with ``partitioner=murmur2_random``, so run R's commands and events share partition
``partition_for(R, n)`` in both topics -- and Java producers agree with Python ones.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as an unsigned 32-bit value."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(run_id: str, partitions: int) -> int:
    return partition_of_key(run_id.encode("utf-8"), partitions)


def partition_of_key(key: bytes, partitions: int) -> int:
    """The home partition of a record keyed ``key``: where Kafka's default (Java) partitioner puts it."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def name_in_partition(prefix: str, partition: int, partitions: int) -> str:
    """``<prefix>-<n>`` for the smallest n whose home partition is ``partition``: an id for a record
    that must live in a given partition (a keyless command's rejection) and still be found where
    every reader looks for its key. About ``partitions`` hashes."""
    n = 0
    while partition_for(f"{prefix}-{n}", partitions) != partition:
        n += 1
    return f"{prefix}-{n}"
