"""The Kafka backend of the log port: the only code that builds Kafka clients (the writer, the
bounded reader, the results tail, the workers' consumer group, the ownership tail), with their
librdkafka settings and the credentials check."""
