"""A migration: its version, its name and its statements, and the checksum the ledger keeps."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# What a checksum is computed over. Stores already hold checksums computed this way, so neither
# the separator nor the digest's length may change.
STATEMENT_SEPARATOR = "\n;\n"
LEDGER_CHECKSUM_LENGTH = 16


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]

    @property
    def sha256(self) -> str:
        """The sha256 of the statements as applied, one after the other."""
        return hashlib.sha256(STATEMENT_SEPARATOR.join(self.statements).encode()).hexdigest()

    @property
    def checksum(self) -> str:
        """What the ledger records: the first 16 hex digits of :attr:`sha256`."""
        return self.sha256[:LEDGER_CHECKSUM_LENGTH]
