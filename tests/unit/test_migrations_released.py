"""Released migrations never change: a store that applied one holds its checksum, and refuses code
whose text differs (analytics.migrations.runner)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from analytics.migrations import RELEASED, Migration
from analytics.migrations.migration import STATEMENT_SEPARATOR

pytestmark = pytest.mark.unit

FOLDER = Path(__file__).resolve().parents[2] / "analytics" / "migrations"

# The sha256 of each released migration's statements; the ledger of a store that applied it holds
# the first 16 hex digits. Add a line for a new migration; never edit one.
RELEASED_SHA256 = {
    1: "2c82ec9c43155109fac9c88609d3e68351f779aaca235cb05429fac966170547",
    2: "31be787fd23b89e96d180aa7c704e623213ed4c44f39fe55bb69f5c8b58c2d9a",
    3: "e3c4aa44972468c9b041ad29e7af00d87a98c8954abf044dff62d163d1aa6fcf",
    4: "3bb06f3eb19d0dec8cae72beae116267a2efe119ac0f906d731b79eb493b3b0f",
    5: "c453cd1850e6c27004ef8626f5ca1df4aac4654f2f0c40e742bf7eeb6df478e8",
    6: "75e67e539343b00f36e4cc7f1b93c8f5666925b0cce97bf30dbff57a1165c5a4",
    7: "054d6e33d8dbf346e5fbbc230228f7149996571fb6c48896def798d99ab21436",
    8: "5ccee703f36fc8a6968d0474f6198de52045f5217dacff39645fdaf377d83c35",
    9: "9af335b60a50ddbb1c492fe99fb965e5b219e10b5750781cbd3b9bf39c6debd6",
    10: "ef3c7a101d4a7084dd5a6d9b360aa180b8bff2f5a8f7619669e321f078d0b3bc",
    11: "75032f55a3b44b2bdacc39e5769b234192c3ec11d4cb4ac9495c2648fc6cc7ee",
    12: "40b7cec9f5db6dcb30d79f3bacd5a8eb9a1fba321fbcb1df13c1ecc72a2d3052",
    13: "9754e87d5d7a118367700dabf142a8e255c45b2c1246a071624fdfc961dd77ea",
    14: "98784e217b063b42843a028d8bca51545cf545686c912e95095960bfaa660a12",
    15: "33a2385183b84a8621ebbe91789bd02933e8c6dba79bd6fa19e7e4bcf1794788",
    16: "296bdc6b252c8348f22da68bc47eec71711dfbb8da63fa9c21caabe4d3b45b76",
    17: "e8e0cb349b07fda9d65cd8307c74bcf4ab7e386ff45732aeaaaec8065461ac9a",
    18: "c57b35054c36dfc40885216c51a3ac68228766a2affd4906c6b5c0bd002e90c5",
    19: "185d3a5c375c1619590857e9897445fba37252292a587d0180e9f24fa6f3db4b",
    20: "6399a9d5c12c2ce1dc734cb54021c86f48925f3a739c026e854df73ff96b9a96",
    21: "6fdf91d3703c2423949a654ca3e59d0ea1c5dfc686c81a058964d363d1421aa3",
    22: "1a86b45b4040801cab61c34455122009649ed895f492360d3b41452577b934b6",
    23: "56da4f1308c289130c8ef2b8eca655294d7207a748459b1b884a86d2bdfbe3a5",
    24: "a18d9df9fc52079bafa32dfdbb6802a3b96b3f60546b9e9152e45b495b79d126",
}


@pytest.mark.parametrize("migration", RELEASED, ids=lambda m: f"V{m.version}")
def test_a_released_migration_keeps_its_text(migration: Migration) -> None:
    pinned = RELEASED_SHA256.get(migration.version)
    assert pinned is not None, (
        f"migration {migration.version} is new: pin its sha256 here ({migration.sha256})"
    )
    assert migration.sha256 == pinned, (
        f"migration {migration.version} ({migration.name}) was edited after its release: a store that "
        "applied it refuses this code. Restore its file and put the change in a new migration."
    )


def test_every_pinned_migration_is_still_released() -> None:
    assert sorted(RELEASED_SHA256) == [m.version for m in RELEASED]


def test_the_ledger_checksum_is_computed_as_stores_recorded_it() -> None:
    """Stores hold 16 hex digits of the sha256 of the statements joined by a ';' line."""
    migration = Migration(99, "two statements", ("SELECT 1", "SELECT 2"))
    assert migration.sha256 == hashlib.sha256(b"SELECT 1\n;\nSELECT 2").hexdigest()
    assert migration.checksum == migration.sha256[:16] == "14fd1891123451c5"
    assert RELEASED[0].checksum == "2c82ec9c43155109"


def test_each_migration_is_one_file_read_whole() -> None:
    """Every .sql file of the folder is a released migration, named for its version, and its
    statements with their ';' lines are the file, byte for byte."""
    sql_files = sorted(FOLDER.glob("*.sql"))
    assert len(sql_files) == len(RELEASED)
    for path, migration in zip(sql_files, RELEASED, strict=True):
        match = re.fullmatch(r"V(\d{4})__[a-z0-9_]+\.sql", path.name)
        assert match is not None, path.name
        assert int(match.group(1)) == migration.version, path.name
        assert (
            path.read_bytes() == "".join(f"{s}{STATEMENT_SEPARATOR}" for s in migration.statements).encode()
        )


def test_versions_count_up_from_one() -> None:
    assert [m.version for m in RELEASED] == list(range(1, len(RELEASED) + 1))
