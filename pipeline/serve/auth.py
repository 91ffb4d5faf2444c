"""--api-key: every route but GET /health wants `Authorization: Bearer KEY` (an ASGI middleware, before routing).

Unknown paths and wrong methods are refused too, so a client without the key learns nothing of the routes.
The key is compared in constant time (hmac.compare_digest; a key of another length fails at once, which
tells only that length) and never appears in an answer, a log line or a repr.
"""
from __future__ import annotations

import hmac

from starlette.responses import Response

from embedpipe.pipeline.serve.protocol import ApiError

OPEN = {("GET", "/health"), ("HEAD", "/health")}  # a load balancer's health check carries no key
MISSING = "missing API key: send the header Authorization: Bearer <key>"


class BearerAuth:
    """Answers 401 (OpenAI's error shape, a WWW-Authenticate challenge) to a request without config.api_key.

    It takes the app.ServeConfig, not the key: Starlette's Middleware(cls, **options) shows its options in its
    repr, and the config's leaves the key out.
    """

    def __init__(self, app, config):
        self.app, self._key = app, config.api_key.encode()

    def __repr__(self) -> str:
        return "BearerAuth()"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) in OPEN:
            await self.app(scope, receive, send)
            return
        refusal = check_bearer(_header(scope, b"authorization"), self._key)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        message, challenge = refusal
        body = ApiError(401, message, kind="authentication_error").body()
        await Response(body, 401, {"www-authenticate": challenge}, "application/json")(scope, receive, send)


def check_bearer(value: bytes | None, key: bytes) -> tuple[str, str] | None:
    """None when `value` (the Authorization header) is `Bearer <key>`, else (message, WWW-Authenticate challenge)
    (RFC 6750: a missing or other scheme gets the bare challenge, a wrong key error="invalid_token")."""
    if value is None:
        return MISSING, "Bearer"
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return "the Authorization header must be: Bearer <key>", "Bearer"
    if not hmac.compare_digest(token.strip(), key):
        return "invalid API key", 'Bearer error="invalid_token"'
    return None


def _header(scope, name: bytes) -> bytes | None:
    """The first value of a request header (ASGI gives names in lower case)."""
    return next((value for key, value in scope["headers"] if key == name), None)
