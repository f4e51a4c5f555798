"""The log, one subpackage per job: ``port`` (the EventLog protocol, partitioning, the in-memory
backend), ``kafka`` (the Kafka backend), ``records`` (the typed records and what is kept in the
log), ``schemas`` (schema catalog, registry access, Avro serde). docs/code-layout.md says what may
import what; pyproject.toml's import-linter contracts hold it."""
