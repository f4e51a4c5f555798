"""confluent-kafka's schema-registry client and serializers, imported once with authlib's import-time
warning muted: the only module of ``runtime.log.schemas`` that imports confluent-kafka (an
import-linter contract holds it), and nothing of its producer or consumer.

The registry client imports authlib's httpx integration, which warns on import about authlib's
own packaging (nothing agentlog does) and installs an "always" filter for it; the filter we add
inside the block comes after theirs, so it wins.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    import authlib.deprecate  # type: ignore[import-untyped]  # noqa: F401

    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import (
        Schema,
        SchemaRegistryClient,
        topic_record_subject_name_strategy,
    )
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.serialization import MessageField, SerializationContext

__all__ = [
    "AvroDeserializer",
    "AvroSerializer",
    "MessageField",
    "Schema",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SerializationContext",
    "topic_record_subject_name_strategy",
]
