"""The roles of a token that may call every runner-protocol method: what the conformance suite's
HTTP authorities (and parity scripts over HTTP) hold. An administrator calls every method but the
outbox's, which are the audit projector's alone (docs/http.md, "The runner protocol")."""

EVERY_METHOD = ["admin", "projector"]
