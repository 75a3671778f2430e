"""HttpAuthority: the `Authority` interface over the HTTP runner protocol (CPython only: httpx).

Each ledger method posts the arguments to `/worlds/{world_id}/ledger/{method}`
(or `/ledger/{method}` for a method without a world) and answers the ledger's JSON result. An
error answer is re-raised as the typed `CommandError` its `code` names, so a runner sees the same
exceptions from a remote authority as from the local one.
"""

from __future__ import annotations

from typing import Any

import httpx

from archetype.api.errors import InternalError
from archetype.commands.authority import Authority
from archetype.commands.errors import error_from_json
from archetype.http_client import LIMITS

DEFAULT_TIMEOUT_S = 30.0


def raise_for_error(response: httpx.Response) -> None:
    """Raise the typed error of a non-2xx answer; an answer without a JSON code is an InternalError."""
    if response.is_success:
        return
    try:
        body = response.json()
        code = body["code"]
    except (ValueError, KeyError, TypeError):
        raise InternalError(f"HTTP {response.status_code} without an error code: {response.text[:200]}") from None
    error = error_from_json(body)
    # a code this client does not know (a newer server's) is kept, not renamed
    error.code, error.http_status = code, response.status_code
    raise error


class HttpAuthority(Authority):
    def __init__(self, url: str, *, token: str, timeout: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            limits=LIMITS,
            transport=transport,
        )

    async def rpc(self, method: str, arguments: dict[str, Any]) -> Any:
        args = dict(arguments)
        world_id = args.pop("world_id", None)
        path = f"/ledger/{method}" if world_id is None else f"/worlds/{world_id}/ledger/{method}"
        response = await self._client.post(path, json=args)
        raise_for_error(response)
        return response.json()

    async def close(self) -> None:
        await self._client.aclose()
