"""Settings of the command line (CPython only), through pydantic-settings.

Each value comes from, in this order: its flag, its `ARCHETYPE_<NAME>` environment variable, its
table of the config file (`--config FILE`, `$ARCHETYPE_CONFIG`, else `./archetype.toml` when it
exists), then the default. Any mistake is one `ConfigurationError` line saying what to fix.

    [client]                      # archetype submit / history / worlds / command / dead-letters
    url = "http://127.0.0.1:8787"
    token = "..."

    [serve]                       # archetype serve
    data = "archetype-data"
    port = 8787
    tokens_file = "tokens.json"
    modules = ["mygame.components"]
"""

from __future__ import annotations

import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from archetype.api import DEFAULT_QUOTA
from archetype.api.limits import DEFAULT_BODY_TIMEOUT_S
from archetype.canonical import MAX_SAFE_INTEGER
from archetype.commands.ledger import DEFAULT_IDEMPOTENCY_WINDOW_MS, DEFAULT_KEEP_TICKS

CONFIG_ENV = "ARCHETYPE_CONFIG"
DEFAULT_CONFIG = Path("archetype.toml")
config_file: ContextVar[Path | None] = ContextVar("config_file", default=None)


class ConfigurationError(Exception):
    """A setting the user must fix; the CLI prints it as one line and exits 2."""


class _Settings(BaseSettings):
    TABLE: ClassVar[str]
    model_config = SettingsConfigDict(env_prefix="ARCHETYPE_", extra="forbid")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:  # fmt: skip
        path = config_file.get()
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings)
        if path is not None:
            sources += (TomlConfigSettingsSource(settings_cls, toml_file=path, toml_table_header=(cls.TABLE,)),)
        return sources

    @classmethod
    def load(cls, **flags: Any) -> Any:
        """The settings from `flags` (None: not given), the environment and the config file."""
        path = config_file.get()
        try:
            return cls(**{name: value for name, value in flags.items() if value is not None})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"config file {path}: {exc}; fix it, or pass another --config") from None
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            name = ".".join(str(part) for part in error["loc"])
            if error["type"] == "extra_forbidden":
                raise ConfigurationError(f"unknown setting {name!r} in [{cls.TABLE}] of {path}; the settings are "
                                         f"{', '.join(cls.model_fields)}") from None  # fmt: skip
            where = f"--{name.replace('_', '-')}, ARCHETYPE_{name.upper()}" + (f" or [{cls.TABLE}] in {path}" if path else "")
            more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
            raise ConfigurationError(f"setting {name!r}: {error['msg']}{more}; fix {where}") from None


def use_config(path: Path | None) -> None:
    """Read settings from `path`, else `./archetype.toml` when it exists."""
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    elif path is not None and not path.is_file():
        raise ConfigurationError(f"--config {path}: no such file; give the path of a TOML settings file")
    config_file.set(path)


class ClientSettings(_Settings):
    TABLE = "client"

    url: str = "http://127.0.0.1:8787"
    token: str | None = None

    def require_token(self) -> str:
        if not self.token:
            raise ConfigurationError("no token: pass --token, set ARCHETYPE_TOKEN, or set token in [client] of archetype.toml")
        return self.token


class ServeSettings(_Settings):
    TABLE = "serve"

    data: Path = Path("archetype-data")
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    tokens_file: Path | None = None
    tick_rate: float = Field(default=10.0, ge=0.1, le=1000)
    quota: int = Field(default=DEFAULT_QUOTA, ge=1, le=MAX_SAFE_INTEGER)
    modules: tuple[str, ...] = ()
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    runner_id: str | None = None
    world_lease: float = Field(default=10.0, ge=0.5, le=60)  # seconds a runner's world lease lasts unrenewed (the ledger's bound)
    hang_timeout: float = Field(default=10.0, ge=2, le=3600)  # seconds of silence after which the stepping process is hung
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "warning"
    log_format: Literal["text", "json"] = "text"
    body_timeout: float = Field(default=DEFAULT_BODY_TIMEOUT_S, gt=0, le=3600)
    metrics_worlds: int = Field(default=50, ge=0, le=10_000)
    telemetry: bool = False  # FastAPI's OpenTelemetry hooks on every request (archetype.api.create_app)
    # retention (docs/ledger.md, "Retention")
    keep_ticks: int = Field(default=DEFAULT_KEEP_TICKS, ge=1, le=MAX_SAFE_INTEGER)
    idempotency_window: float = Field(default=DEFAULT_IDEMPOTENCY_WINDOW_MS / 1000, ge=0, le=MAX_SAFE_INTEGER // 1000)  # seconds
    prune_interval: float = Field(default=60.0, gt=0, le=86_400)  # seconds


class RunnerSettings(_Settings):
    """`archetype runner`: a remote runner stepping its share of a server's worlds over HTTP."""

    TABLE = "runner"

    url: str = "http://127.0.0.1:8787"
    token_file: Path
    runner_id: str | None = None
    modules: tuple[str, ...] = ()
    tick_rate: float = Field(default=10.0, ge=0.1, le=1000)
    world_lease: float = Field(default=10.0, ge=0.5, le=60)  # seconds its world leases and registration last unrenewed
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "warning"
    log_format: Literal["text", "json"] = "text"
