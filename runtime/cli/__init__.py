"""The ``agentlog`` command line: thin layers over the Python API; each package adds its own commands."""

from runtime import stagemarks

if stagemarks.ON:  # the interpreter is up (bench/recovery.py: a restarted worker's start)
    stagemarks.start("interpreter up")

from runtime.cli.main import main  # after the mark, which times what precedes it

__all__ = ["main"]
