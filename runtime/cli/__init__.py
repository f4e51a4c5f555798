"""The ``agentlog`` command line: thin layers over the Python API; each package adds its own commands."""

from runtime.cli.main import main

__all__ = ["main"]
