"""Restate and DBOS on agentlog's end-to-end workload (bench/compare.py runs them)."""
