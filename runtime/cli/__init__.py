"""The ``agentlog`` command line: thin layers over the Python API; each package adds its own commands."""

from runtime import stagemarks

stagemarks.start("interpreter up")  # bench/recovery.py: a restarted worker's start

from runtime.cli.main import main  # noqa: E402 -- after the mark, which times what precedes it

__all__ = ["main"]
