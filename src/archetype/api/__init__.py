"""The HTTP application shared by the local server and the Worker (Pyodide-safe: FastAPI + pydantic)."""

from archetype.api.app import DEFAULT_QUOTA, create_app
from archetype.api.auth import TokenTable

__all__ = ["DEFAULT_QUOTA", "TokenTable", "create_app"]
