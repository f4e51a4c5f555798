"""The librdkafka clients alive in this process, for the fixtures that fail a test leaving one open.

Every confluent-kafka client -- ``Producer``, ``Consumer``, ``AdminClient``, whoever built it
(runtime.log.kafka, infra, consumers, a test) -- is one librdkafka handle, and a handle runs one
native thread named ``rdk:main`` from its creation until it is closed or destroyed. Python's
``threading`` cannot see these threads; ``/proc/self/task`` lists them. Counting them is cheap (a
directory of a few dozen entries) and misses no client, so it is the check; walking the heap for
the client objects is slow and done only to name a leak once one is found.

A client left open keeps reconnecting to brokers that later tests stop, and librdkafka prints
every failed attempt on stderr (``%3|...|FAIL|``): that was most of a green ``make test``'s log.
"""

from __future__ import annotations

import gc
import os
import types
from collections.abc import Iterator

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from support.wait import wait_until

_TASKS = "/proc/self/task"
_MAIN_THREAD = "rdk:main"  # librdkafka's name for a handle's own thread (rdkafka.c: rd_kafka_thread_main)


def live_clients() -> int:
    """How many librdkafka handles are open in this process."""
    count = 0
    for task in os.listdir(_TASKS):
        try:
            with open(f"{_TASKS}/{task}/comm") as comm:
                count += comm.read().strip() == _MAIN_THREAD
        except (FileNotFoundError, ProcessLookupError):  # the thread ended since the listing
            continue
    return count


def closed_since(before: int, what: str, timeout: float = 5.0) -> None:
    """Return once no more than ``before`` handles are open; fail naming the open clients after
    ``timeout`` seconds.

    A client dropped without ``close()`` is destroyed when its last reference goes -- at once, or
    at the next collection if it sits in a reference cycle (a producer whose delivery callback is
    a method of its owner) -- and one closed by another thread (a follower stopping) goes a moment
    later; neither outlives the test, so neither is a leak."""
    if live_clients() <= before:
        return
    gc.collect()
    wait_until(
        lambda: live_clients() <= before,
        timeout,
        f"the Kafka clients {what} opened to close",
        detail=lambda: _left_open(before, what),
    )


def _is_open(client: object) -> bool:
    # A closed Consumer or Producer stays an object; asking it anything raises RuntimeError.
    # An AdminClient has no close(): it is open until it is destroyed.
    try:
        if isinstance(client, Consumer):
            client.assignment()
        elif isinstance(client, Producer):
            len(client)
    except RuntimeError:
        return False
    return True


def open_client_objects() -> Iterator[str]:
    """Each open client object on the heap, with the types of what holds it (slow: for failure
    messages; a holder that is a ``dict`` is usually an object's ``__dict__`` or a module's)."""
    heap = gc.get_objects()
    for obj in heap:
        if isinstance(obj, (Producer, Consumer, AdminClient)) and _is_open(obj):
            holders = {
                type(r).__qualname__
                for r in gc.get_referrers(obj)
                if r is not heap and not isinstance(r, types.FrameType)
            }
            yield f"{type(obj).__name__} at {id(obj):#x}, held by {', '.join(sorted(holders)) or 'nothing'}"


def _left_open(before: int, what: str) -> str:
    objects = list(open_client_objects())
    return (
        f"{what} left {live_clients() - before} Kafka client(s) open (librdkafka handles: {before} before); "
        "close every Producer, Consumer, AdminClient, KafkaLog, Client it opens. Open client objects "
        f"now: {objects or 'none reachable from Python'}"
    )
