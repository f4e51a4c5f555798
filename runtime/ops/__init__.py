"""What an operator's tools read from a running agentlog process: Prometheus metrics and health probes."""
