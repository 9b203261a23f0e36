"""Bearer tokens for the HTTP transport: each token belongs to exactly one prefcall user.

Tokens come from PREFCALL_TOKENS ("token:user,token2:user2"), a tokens file (one "token:user" a line,
'#' comments), or are generated at start. The SDK's bearer middleware answers 401 without a valid token;
tools read the authenticated user through `current_user()` and refuse other users' profiles.
"""

from __future__ import annotations

import hmac
import re
import secrets
from pathlib import Path

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from prefcall.config import Settings
from prefcall.errors import ConfigError, PrefcallError, ValidationError

USER_ID_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MIN_TOKEN_CHARS = 16


class AccessDeniedError(PrefcallError):
    """The request's token does not give access to the named profile."""


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """'token:user' pairs separated by commas or newlines -> {token: user}."""
    tokens: dict[str, str] = {}
    for raw in re.split(r"[,\n]", text):
        entry = raw.split("#", 1)[0].strip()
        if not entry:
            continue
        token, sep, user = entry.rpartition(":")
        token, user = token.strip(), user.strip()
        if not sep or not token:
            raise ConfigError(f"{source}: entry {entry[:12]!r}... is not 'token:user_id'")
        if len(token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"{source}: a token for user {user!r} is shorter than {MIN_TOKEN_CHARS} characters")
        if not USER_ID_RE.match(user):
            raise ConfigError(f"{source}: user id {user!r} must match [A-Za-z0-9_.@-]{{1,64}}")
        if token in tokens and tokens[token] != user:
            raise ConfigError(f"{source}: one token is given to two users ({tokens[token]!r}, {user!r})")
        tokens[token] = user
    return tokens


def configured_tokens(settings: Settings) -> dict[str, str]:
    tokens: dict[str, str] = {}
    if settings.tokens:
        tokens |= parse_tokens(settings.tokens, "PREFCALL_TOKENS")
    if settings.tokens_file:
        path = Path(settings.tokens_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read tokens file {path}: {exc.strerror}: fix PREFCALL_TOKENS_FILE") from exc
        tokens |= parse_tokens(text, str(path))
    return tokens


def generate_token() -> str:
    return secrets.token_urlsafe(24)


class StaticTokenVerifier:
    """The SDK's TokenVerifier over a fixed token -> user map (constant-time comparison)."""

    def __init__(self, tokens: dict[str, str]) -> None:
        if not tokens:
            raise ConfigError("HTTP needs at least one bearer token: set PREFCALL_TOKENS='token:user_id'")
        self._tokens = dict(tokens)

    async def verify_token(self, token: str) -> AccessToken | None:
        for known, user in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode("utf-8", "surrogatepass")):
                return AccessToken(token=token, client_id=f"prefcall:{user}", scopes=[], subject=user)
        return None


def current_user() -> str | None:
    """The user the request's bearer token belongs to; None on stdio / in-process (trusted, local)."""
    token = get_access_token()
    return token.subject if token is not None else None


def resolve_user(requested: str | None) -> str:
    """The user a tool acts for: the token's user over HTTP (another user's id is refused); else as given."""
    authenticated = current_user()
    if authenticated is not None:
        if requested not in (None, "", authenticated):
            raise AccessDeniedError(
                f"user_id {requested!r} does not match your token's user {authenticated!r}: "
                "a token only gives access to its own profile"
            )
        return authenticated
    if not requested:
        raise ValidationError("user_id is required: pass the id of the profile to use")
    return requested
