"""Where the audit table lives: a local SqlCatalog + file warehouse, or an Iceberg REST catalog.

Local (the embedded default): `<data>/audit/catalog.sqlite3` and `<data>/audit/warehouse/`, beside
the ledger's catalog. Remote: R2 Data Catalog (or any Iceberg REST catalog) through pyiceberg's
REST client; R2 takes the catalog URI, the warehouse name and a Cloudflare API token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.exc import OperationalError

AUDIT_DIR = "audit"


def local_catalog(data_dir: str | Path) -> SqlCatalog:
    root = Path(data_dir).resolve() / AUDIT_DIR
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    config = {"uri": f"sqlite:///{root / 'catalog.sqlite3'}", "warehouse": (root / "warehouse").as_uri()}
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
