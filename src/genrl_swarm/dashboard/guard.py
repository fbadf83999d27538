"""Who may talk to the dashboard: a token on every request, a Host check, strict headers.

On 127.0.0.1 (the default) the Host header must name the loopback (``localhost``,
``127.0.0.1``, ``[::1]``): a web page elsewhere that rebinds its DNS name to 127.0.0.1 gets a
403 instead of the swarm's data. Bound elsewhere, a token is required on every request, the
event stream included: ``Authorization: Bearer <token>``, ``?token=<token>`` (the link printed
at start), or the cookie set when that link is opened (so the page's own assets and stream load).
The Content-Security-Policy allows only the page's own scripts and styles: even a rendering
bug could not run a script a peer put in its id.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "genrl_dashboard_token"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),  # the token may be in the URL
    (b"x-frame-options", b"DENY"),
]


_HOST = re.compile(r"(?:(?P<v6>\[[0-9A-Fa-f:.]+\])|(?P<name>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?")


def host_name(host: str) -> str:
    """``example.org:8050`` -> ``example.org``; ``[::1]:8050`` -> ``[::1]``; anything that is not
    strictly ``host[:port]`` or ``[v6][:port]`` (``127.0.0.1:80@evil.com``, ``[::1]evil``) -> ``""``."""
    match = _HOST.fullmatch(host)
    if match is None or (match["port"] is not None and int(match["port"]) > 65535):
        return ""
    return match["v6"] or match["name"]


class Guard:
    def __init__(self, app: ASGIApp, token: str | None, loopback_only: bool) -> None:
        self.app, self.token, self.loopback_only = app, token, loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback_only and host_name(headers.get("host", "")).lower() not in LOOPBACK_HOSTS:
            await _refuse(send, 403, "forbidden: this dashboard answers only to localhost")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given_in_query = query.get("token", [""])[0]
        if self.token is not None and not self._allowed(headers, given_in_query):
            await _refuse(send, 401, "unauthorized: open the link with ?token=... printed by genrl-swarm dashboard")
            return
        set_cookie = self.token is not None and bool(given_in_query)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(HEADERS)
                if set_cookie:
                    extra.append((b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _allowed(self, headers: dict[str, str], given_in_query: str) -> bool:
        assert self.token is not None
        candidates = [given_in_query]
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            candidates.append(auth[7:].strip())
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed header carries no token
            cookie = SimpleCookie()
        if COOKIE in cookie:
            candidates.append(cookie[COOKIE].value)
        expected = self.token.encode()
        return any(hmac.compare_digest(c.encode(), expected) for c in candidates if c)


async def _refuse(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()), *HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": body})
