"""A browser login for the coverage pages (issue 36): a token exchanged for a session cookie.

A plain browser sends no bearer token, so with authentication on it could not reach ``/ui/``.
``GET /ui/login`` shows a form; ``POST /ui/login`` takes a token, checks it by the one rule
(``tokens.TokenBook``) and answers 303 to ``/ui/`` with the session cookie; ``/ui/logout`` ends it.

**The cookie** ``tk_session``: ``1.{expires_ms}.{fingerprint}.{nonce}.{mac}`` where ``fingerprint``
names the token (``TokenBook.fingerprint``: never the token itself), ``nonce`` is random and ``mac``
is HMAC-SHA256 over the rest under ``auth.session_secret`` (a setting of at least 32 characters, the
same on every replica behind one address, so any replica accepts a cookie another issued; rotating
it ends every session). Flags: ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
page makes the browser send it), ``Path=/ui``, ``Max-Age`` = ``auth.session_ttl_s`` (default 8 h;
the expiry is also inside the signed value, so a cookie kept past it is refused), and ``Secure``
when the page was served over TLS (the request's scheme, or a ``public_url`` in https). A forged,
altered or expired cookie, or one naming a token no longer configured, authenticates nothing.

**Scopes**: the cookie authenticates the pages under ``/ui/`` only (decision: the JSON API and
``/metrics`` keep to headers, so no API call rides on ambient credentials), and it carries the
token's grant exactly: the pages list only the clusters and topics the token may read, and a page
of another topic is its 403, as for the bearer token (``deps``).

**CSRF**: only the two forms change state. Each POST must come from this origin (its ``Origin``
header, or ``Referer`` when absent, names the Host the request was sent to) and carry its form's
CSRF token: for logout, HMAC of the session cookie under the key (bound to that session); for login,
the double-submit value of the short-lived ``tk_login`` cookie the form's page set. Else 403
``csrf_refused``. Without ``auth.session_secret`` (or with authentication off) there is no login:
``/ui/login`` says so, and the pages need a bearer token as before.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tiered_kafka_gateway.config import GatewaySettings
from tiered_kafka_gateway.errors import ErrorCode, error_response
from tiered_kafka_gateway.tokens import Access, TokenBook
from tiered_kafka_gateway.ui import UI_PREFIX

SESSION_COOKIE = "tk_session"
LOGIN_COOKIE = "tk_login"
LOGIN_PATH = f"{UI_PREFIX}/login"
LOGOUT_PATH = f"{UI_PREFIX}/logout"
MAX_FORM_BYTES = 8192
LOGIN_FORM_TTL_S = 600


def _mac(key: bytes, *parts: str) -> str:
    digest = hmac.new(key, "\0".join(parts).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Sessions:
    """Issuing and checking session cookies and CSRF tokens (module doc); one per app."""

    def __init__(self, settings: GatewaySettings, book: TokenBook) -> None:
        secret = settings.auth.session_secret
        self.key = secret.get_secret_value().encode() if secret is not None and settings.auth.enabled else None
        self.ttl_s = settings.auth.session_ttl_s
        self.book = book
        self.always_secure = bool(settings.public_url and settings.public_url.startswith("https://"))

    def __repr__(self) -> str:
        return f"Sessions(enabled={self.enabled}, ttl_s={self.ttl_s})"  # never the key

    @property
    def enabled(self) -> bool:
        return self.key is not None

    def issue(self, access: Access, now_ms: int | None = None) -> str:
        assert self.key is not None
        expires = (int(time.time() * 1000) if now_ms is None else now_ms) + self.ttl_s * 1000
        payload = f"1.{expires}.{access.fingerprint}.{secrets.token_urlsafe(12)}"
        return f"{payload}.{_mac(self.key, 'session', payload)}"

    def access(self, cookie: str | None, now_ms: int | None = None) -> Access | None:
        """The grant a session cookie carries; None for a missing, forged, expired or orphaned one."""
        if self.key is None or not cookie:
            return None
        payload, _, mac = cookie.rpartition(".")
        if not hmac.compare_digest(_mac(self.key, "session", payload).encode(), mac.encode()):
            return None
        version, expires, fingerprint, _nonce = (payload.split(".") + ["", "", "", ""])[:4]
        if version != "1" or not expires.isdigit():
            return None
        if int(expires) <= (int(time.time() * 1000) if now_ms is None else now_ms):
            return None
        return self.book.by_fingerprint(fingerprint)

    def csrf_for(self, cookie: str) -> str:
        """The CSRF token of forms shown to the holder of session ``cookie`` (module doc)."""
        assert self.key is not None
        return _mac(self.key, "csrf", cookie)

    def login_nonce(self) -> str:
        """A signed, short-lived value for the login form's double submit (module doc)."""
        assert self.key is not None
        payload = f"{int(time.time()) + LOGIN_FORM_TTL_S}.{secrets.token_urlsafe(12)}"
        return f"{payload}.{_mac(self.key, 'login', payload)}"

    def login_nonce_valid(self, nonce: str) -> bool:
        if self.key is None or not nonce:
            return False
        payload, _, mac = nonce.rpartition(".")
        expires = payload.split(".", 1)[0]
        return hmac.compare_digest(_mac(self.key, "login", payload).encode(), mac.encode()) and expires.isdigit() and int(expires) > time.time()

    def secure(self, request: Request) -> bool:
        return self.always_secure or request.url.scheme == "https"


def cookie_of(headers: Any, name: str) -> str | None:
    """The value of cookie ``name`` in the ASGI ``headers`` (the first one), None when absent."""
    for header, value in headers:
        if header == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, found = part.strip().partition("=")
                if key == name:
                    return found
    return None


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this origin: its Origin (else Referer) names the Host asked."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        return False
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


async def form_of(request: Request) -> dict[str, str] | None:
    """An ``application/x-www-form-urlencoded`` body (at most ``MAX_FORM_BYTES``), None otherwise."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), max_num_fields=10).items()}


router = APIRouter(prefix=UI_PREFIX, include_in_schema=False)
STYLE = "body{font:14px system-ui,sans-serif;margin:2em;color:#222}input{font:inherit;margin:.3em 0}.bad{color:#c00}"


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>'
        f"<body><h1>{escape(title)}</h1>{body}</body></html>",
        status_code=status,
    )


def login_required_page() -> HTMLResponse:
    """The 401 of a page asked without credentials (``deps.Authenticate``), with the way in."""
    return page("Log in required", f'<p>These pages need a token. <a id="login" href="{LOGIN_PATH}">Log in</a></p>', 401)


def _sessions(request: Request) -> Sessions:
    return request.app.state.sessions  # type: ignore[no-any-return]


def _login_form(sessions: Sessions, request: Request, message: str = "", status: int = 200) -> Response:
    nonce = sessions.login_nonce()
    note = f'<p class="bad" id="refused">{escape(message)}</p>' if message else ""
    response = page(
        "Log in to the coverage pages",
        f'{note}<form method="post" action="{LOGIN_PATH}"><input type="hidden" name="csrf" value="{escape(nonce)}">'
        '<label>Token <input type="password" name="token" id="token" autocomplete="current-password" required></label><br>'
        '<button type="submit" id="submit">Log in</button></form>',
        status,
    )
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_FORM_TTL_S, path=LOGIN_PATH, httponly=True, samesite="strict", secure=sessions.secure(request))
    return response


@router.get("/login")
def login_page(request: Request) -> Response:
    sessions = _sessions(request)
    if not sessions.enabled:
        return page("No login here", "<p>This gateway has no browser login (auth.enabled with auth.session_secret): send a bearer token.</p>", 404)
    return _login_form(sessions, request)


@router.post("/login")
async def login(request: Request) -> Response:
    sessions = _sessions(request)
    if not sessions.enabled:
        return page("No login here", "<p>This gateway has no browser login.</p>", 404)
    form = await form_of(request)
    nonce = cookie_of(request.scope.get("headers", ()), LOGIN_COOKIE) or ""
    if (form is None or not same_origin(request) or not sessions.login_nonce_valid(nonce)
            or not hmac.compare_digest(nonce.encode(), form.get("csrf", "").encode())):
        return error_response(ErrorCode.CSRF_REFUSED, "the login form must be sent from this gateway's own login page")
    access = sessions.book.access(form.get("token", "").strip())
    if access is None or not access.fingerprint:
        return _login_form(sessions, request, "That token is not accepted.", 401)
    response = RedirectResponse(f"{UI_PREFIX}/", status_code=303)
    response.set_cookie(SESSION_COOKIE, sessions.issue(access), max_age=sessions.ttl_s, path=UI_PREFIX, httponly=True, samesite="strict",
                        secure=sessions.secure(request))
    response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH)
    return response


@router.get("/logout")
def logout_page(request: Request) -> Response:
    sessions = _sessions(request)
    cookie = cookie_of(request.scope.get("headers", ()), SESSION_COOKIE)
    if not sessions.enabled or sessions.access(cookie) is None:
        return RedirectResponse(LOGIN_PATH if sessions.enabled else f"{UI_PREFIX}/", status_code=303)
    assert cookie is not None
    return page("Log out", f'<form method="post" action="{LOGOUT_PATH}"><input type="hidden" name="csrf" value="{escape(sessions.csrf_for(cookie))}">'
                           '<button type="submit" id="logout">Log out</button></form>')


@router.post("/logout")
async def logout(request: Request) -> Response:
    sessions = _sessions(request)
    cookie = cookie_of(request.scope.get("headers", ()), SESSION_COOKIE)
    form = await form_of(request)
    if (not sessions.enabled or cookie is None or form is None or not same_origin(request)
            or not hmac.compare_digest(sessions.csrf_for(cookie).encode(), form.get("csrf", "").encode())):
        return error_response(ErrorCode.CSRF_REFUSED, "logging out takes the form of this gateway's logout page")
    response = RedirectResponse(LOGIN_PATH, status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=UI_PREFIX, httponly=True, samesite="strict", secure=sessions.secure(request))
    return response
