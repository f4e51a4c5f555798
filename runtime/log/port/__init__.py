"""The log port and its in-memory backend: the protocol every backend keeps (records are bytes at
offsets of a topic's partitions), which partition a run's records go to, and the in-process backend
the unit tests and ``runtime.local`` use."""
