"""The log: typed records, their Avro serde and schema catalog, partitioning, fencing,
out-of-line payloads, and the EventLog port with its in-memory and Kafka backends."""
