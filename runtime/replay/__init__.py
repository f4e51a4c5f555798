"""Replay tools: the public Replayer (golden histories, replay-check) and run reset seeds."""
