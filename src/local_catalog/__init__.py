"""The local control authority: one SQLite catalog file per storage directory, all its worlds."""

from local_catalog.catalog import CATALOG_FILE, open_local_authority
from local_catalog.port import SqliteSqlPort

__all__ = ["CATALOG_FILE", "SqliteSqlPort", "open_local_authority"]
