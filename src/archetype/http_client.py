"""What every HTTP client of ours shares (CPython only: httpx).

A kept-alive connection idle for 2 s is dropped, not reused: the servers we talk to close idle
connections after 5 s (uvicorn's default keep-alive timeout behind `archetype serve`, workerd's
fixed pipeline timeout in front of the Worker), and httpx's own expiry is also 5 s, so a request
sent on a connection just as the server closes it is lost without an answer ("Server disconnected
without sending a response") and the caller sees a connection error for a request the server never
read. Seen on a loaded machine, where a runner's idle gap between two ledger calls passes 5 s.
"""

from __future__ import annotations

import httpx

KEEPALIVE_EXPIRY_S = 2.0
LIMITS = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
