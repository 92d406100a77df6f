"""What passes between a caller and a service's replica through ``/serve/``: headers,
both ways.

What a replica receives is the caller's request without Corral's credentials (the
``Authorization`` header, always, and the portal's ``corral_*`` cookies), without
hop-by-hop headers (RFC 9110 7.6.1, and those the caller's ``Connection`` names) and
without ``X-Forwarded-*`` the caller made up; the gateway sets ``X-Forwarded-For``,
``-Proto``, ``-Host`` and ``-Prefix`` (``/serve/<name>``) itself.

The answer comes back without hop-by-hop headers and without anything that would speak
for the API's whole origin (a ``corral_*`` cookie, ``Clear-Site-Data``,
``Service-Worker-Allowed``, ``Strict-Transport-Security``). A service's pages are served
from the API's own origin, where the portal's session cookie lives, so every ``/serve/``
answer, the gateway's own refusals included, carries ``CONFINED``:
``Content-Security-Policy: sandbox`` (scripts, forms, popups and downloads allowed; not
``allow-same-origin``) makes a browser run what a service sends in an opaque origin,
whose scripts can neither read the portal's pages nor make requests with its cookie,
whoever opens it; ``X-Content-Type-Options: nosniff`` keeps a browser from taking an
answer for HTML that does not say it is. A replica's own policy stays beside the
sandbox (a browser enforces both); its ``X-Content-Type-Options`` is replaced.
"""

from __future__ import annotations

from services.api.serving.upstream import Headers
from shared.metrics import Scope

# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_CALLER_ONLY = frozenset(
    {b"host", b"authorization", b"content-length", b"forwarded"}
    | {b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-prefix"}
)
_OWN_PREFIX = b"corral_"
_OWN_COOKIE_NAMES = (_OWN_PREFIX, b"__host-corral", b"__secure-corral")
_ORIGIN_WIDE = frozenset(
    {b"service-worker-allowed", b"clear-site-data", b"strict-transport-security", b"x-content-type-options"}
)
SANDBOX_POLICY = "sandbox allow-scripts allow-forms allow-popups allow-downloads"
CONFINED: Headers = [
    (b"content-security-policy", SANDBOX_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
]


def request_head(
    scope: Scope, target: bytes, prefix: str, address: tuple[str, int], body: bytes, *, streamed: bool
) -> tuple[bytes, bool]:
    """The request line and headers the replica gets (``target``: the path under the
    service's ``prefix``, with the query), and whether the body is chunked."""
    caller: Headers = scope["headers"]
    nominated = {token.strip().lower() for n, v in caller if n == b"connection" for token in v.split(b",")}
    lines = [
        b"%s %s HTTP/1.1" % (scope["method"].encode(), target),
        b"host: %s:%d" % (address[0].encode(), address[1]),
    ]
    host = b""
    length: bytes | None = None
    for header, value in caller:
        if header == b"host":
            host = value
        elif header == b"content-length":
            length = value
        if header in _HOP_BY_HOP or header in _CALLER_ONLY or header in nominated:
            continue
        if header == b"cookie":
            value = _without_corral_cookies(value)
            if not value:
                continue
        lines.append(header + b": " + value)
    chunked = False
    if not streamed:
        if body or length is not None:
            lines.append(b"content-length: %d" % len(body))
    elif length is not None:
        lines.append(b"content-length: " + length)
    else:
        chunked = True
        lines.append(b"transfer-encoding: chunked")
    client = scope.get("client")
    lines += [
        b"x-forwarded-for: " + (client[0] if client else "").encode(),
        b"x-forwarded-proto: " + scope.get("scheme", "http").encode(),
        b"x-forwarded-host: " + host,
        b"x-forwarded-prefix: " + prefix.encode(),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n", chunked


def _without_corral_cookies(value: bytes) -> bytes:
    kept = [
        p.strip() for p in value.split(b";") if p.strip() and not p.strip().lower().startswith(_OWN_PREFIX)
    ]
    return b"; ".join(kept)


def answer_headers(headers: Headers) -> Headers:
    """The replica's answer headers as the caller gets them."""
    nominated = {token.strip() for n, v in headers if n == b"connection" for token in v.lower().split(b",")}
    out: Headers = []
    for name, value in headers:
        if name in _HOP_BY_HOP or name in _ORIGIN_WIDE or name in nominated:
            continue
        if name == b"set-cookie" and not _may_set(value):
            continue
        out.append((name, value))
    out += CONFINED
    return out


def _may_set(set_cookie: bytes) -> bool:
    """A named cookie that is not Corral's (a pair without ``=`` is a cookie with an empty
    name to a browser, RFC 6265bis 5.7)."""
    pair = set_cookie.split(b";", 1)[0]
    name, equals, _ = pair.partition(b"=")
    name = name.strip().lower()
    return bool(equals and name) and not name.startswith(_OWN_COOKIE_NAMES)
