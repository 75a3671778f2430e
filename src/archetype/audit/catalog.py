"""Where the audit table lives: a local SqlCatalog + file warehouse, or an Iceberg REST catalog.

Local (the embedded default): `<data>/audit/catalog.sqlite3` and `<data>/audit/warehouse/`, beside
the ledger's catalog. Remote: R2 Data Catalog (or any Iceberg REST catalog) through pyiceberg's
REST client; R2 takes the catalog URI, the warehouse name and a Cloudflare API token.

A local data directory can be moved (or copied). Iceberg metadata names every file by its absolute
location, and the SqlCatalog row names the current metadata file the same way, so those stay
spelled under the warehouse root the table was created in (its *stored* root). Opening resolves
them instead: the stored root is read from the catalog row, and `RelocatedFileIO` maps every
location under it to the same path under the warehouse where the directory is now. Nothing on
disk is rewritten, a copy never touches the original's files, and a directory that never moved
maps nothing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import EMPTY_DICT, Properties
from sqlalchemy.exc import OperationalError

from archetype.audit.schema import NAMESPACE, TABLE

AUDIT_DIR = "audit"
CATALOG_FILE = "catalog.sqlite3"
STORED_ROOT = "archetype.warehouse.stored-root"  # FileIO properties: map locations under this ...
CURRENT_ROOT = "archetype.warehouse.current-root"  # ... to the same path under this one


class RelocatedFileIO(PyArrowFileIO):
    """PyArrow's FileIO, reading and writing the locations under the stored warehouse root where
    that warehouse is now. Every read, write and delete goes through `parse_location`."""

    @staticmethod
    def parse_location(location: str, properties: Properties = EMPTY_DICT) -> tuple[str, str, str]:
        stored, current = properties.get(STORED_ROOT), properties.get(CURRENT_ROOT)
        if stored and current and location.startswith(stored + "/"):
            location = current + location[len(stored) :]
        return PyArrowFileIO.parse_location(location, properties)


def stored_root(catalog_file: Path) -> str | None:
    """The warehouse root the audit table's metadata is spelled under (None: no table yet)."""
    if not catalog_file.is_file():
        return None
    with sqlite3.connect(f"{catalog_file.as_uri()}?mode=ro", uri=True) as db:
        try:
            row = db.execute(
                "SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?", (NAMESPACE, TABLE)
            ).fetchone()
        except sqlite3.OperationalError:  # the catalog's own tables are not created yet
            return None
    suffix = f"/{NAMESPACE}/{TABLE}/metadata/"
    return row[0].split(suffix)[0] if row and suffix in row[0] else None


def local_catalog(data_dir: str | Path) -> SqlCatalog:
    root = Path(data_dir).resolve() / AUDIT_DIR
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    warehouse = (root / "warehouse").as_uri()
    config = {"uri": f"sqlite:///{root / CATALOG_FILE}", "warehouse": warehouse,
              "py-io-impl": f"{RelocatedFileIO.__module__}.{RelocatedFileIO.__qualname__}",
              STORED_ROOT: stored_root(root / CATALOG_FILE) or warehouse, CURRENT_ROOT: warehouse}  # fmt: skip
    try:
        return SqlCatalog("archetype_audit", **config)
    except OperationalError:  # another process created the catalog's own tables between check and create
        return SqlCatalog("archetype_audit", **config)


def rest_catalog(uri: str, warehouse: str, *, token: str | None = None, **properties: Any) -> Catalog:
    """An Iceberg REST catalog. Extra `properties` pass through to pyiceberg unchanged
    (for example `credential` for OAuth2 client credentials, or `s3.endpoint` for a private store)."""
    config: dict[str, Any] = {"type": "rest", "uri": uri, "warehouse": warehouse, **properties}
    if token is not None:
        config["token"] = token
    return load_catalog("archetype_audit", **config)
