"""The pure engine: workflow registration, the run state machine, its context and futures.

Nothing here does I/O, starts a thread or imports a Kafka or registry client (an
import-linter contract checks it): a run's semantics are decided here and nowhere else.
"""
