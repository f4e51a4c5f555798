"""Schemas and serde: the local schema catalog (the ``.avsc`` files), the one way to the schema
registry and what it has told us (kept for an outage), field-level schema diffs, the Confluent wire
frame, and the Avro serde between typed records and bytes. No Kafka client here: these modules never
produce or consume."""
