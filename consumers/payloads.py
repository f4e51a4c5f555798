"""The sink's second copy: the payloads topic into ``agentlog.payloads``.

Results and model messages too large for their event are stored out of line, in the payloads
topic (runtime.log.records.payloads, runtime.log.records.prompts); the events the sink copies carry only their
offset and sha256. So that the store answers with the whole prompt (the ``model_calls`` view
resolves blob pointers by run and sha256), the sink copies that topic too, on a thread of its own
beside the events driver, with its own consumer and store client.

Resume: like the events, the position is in the rows (``partition``, ``offset``): the copier
starts each partition after the highest offset the table holds. A batch is one insert; the table
is a ReplacingMergeTree on (partition, offset), so a batch written again after a crash between
insert and exit leaves no duplicate once merged (readers use FINAL).
The sha256 is computed here from the bytes read, never taken from the writer, so an altered
record cannot match the pointer that names it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import TYPE_CHECKING

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from analytics.tables import PAYLOADS
from runtime.config import Settings

from .direct import consumer_config, partitions_of

if TYPE_CHECKING:
    from clickhouse_connect.driver.client import Client

log = logging.getLogger("agentlog.sink.payloads")

POLL_BATCH = 500
POLL_TIMEOUT = 0.5
COLUMNS = ("partition", "offset", "run_id", "sha256", "size", "content")


def payload_rows(messages: list[Message]) -> list[bytes]:
    """One JSONEachRow line per record of the payloads topic (keyed by run id)."""
    lines: list[bytes] = []
    for message in messages:
        value = message.value() or b""
        key = message.key() or b""
        lines.append(
            orjson.dumps(
                {
                    "partition": message.partition(),
                    "offset": message.offset(),
                    "run_id": key.decode("utf-8", "replace"),
                    "sha256": hashlib.sha256(value).hexdigest(),
                    "size": len(value),
                    "content": value.decode("utf-8", "replace"),
                }
            )
        )
    return lines


def next_offsets(client: Client) -> dict[int, int]:
    """Where each partition's copy resumes: one past the highest offset stored."""
    rows = client.query(f"SELECT partition, max(offset) FROM {PAYLOADS} GROUP BY partition").result_rows
    return {int(partition): int(offset) + 1 for partition, offset in rows}


class PayloadCopier:
    """Copies the payloads topic into the store until ``stop`` is set; ``error`` says why it stopped
    early (it then sets ``stop``, so the whole sink stops and resumes from the store on restart)."""

    def __init__(self, settings: Settings, client: Client, stop: threading.Event) -> None:
        self.settings = settings
        self.client = client
        self.stop = stop
        self.error: BaseException | None = None
        self.copied = 0
        self._thread = threading.Thread(target=self._run, name="agentlog-sink-payloads", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        try:
            self._copy()
        except BaseException as error:  # reported by run_sink, which stops the sink with it
            log.exception("copying %s stopped", self.settings.payloads_topic)
            self.error = error
            self.stop.set()

    def _copy(self) -> None:
        topic = self.settings.payloads_topic
        consumer = Consumer(consumer_config(self.settings, f"agentlog-sink-{topic}"))
        try:
            resume = next_offsets(self.client)
            consumer.assign(
                [
                    TopicPartition(topic, p, resume.get(p, OFFSET_BEGINNING))
                    for p in partitions_of(consumer, topic)
                ]
            )
            while not self.stop.is_set():
                messages = consumer.consume(num_messages=POLL_BATCH, timeout=POLL_TIMEOUT)
                good = [m for m in messages if m.error() is None]
                for message in messages:
                    error = message.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                if good:
                    body = b"\n".join(payload_rows(good))
                    self.client.raw_insert(PAYLOADS, list(COLUMNS), body, fmt="JSONEachRow")
                    self.copied += len(good)
        finally:
            consumer.close()
