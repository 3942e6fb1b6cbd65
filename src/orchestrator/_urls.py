"""URLs as the user sees them in `config show`, errors and logs: the secrets they may carry masked."""

from __future__ import annotations

import urllib.parse

__all__ = ["REDACTED", "redacted_url"]

REDACTED = "***"
"""What every redacted secret is shown as (`config show`, request text in traces)."""


def redacted_url(url: str) -> str:
    """`url` with the password of its user info (or the whole user info when it has no password, a token
    given as the user, or no user) and every query value as `***` (`http://me:***@host/mcp?api_key=***`)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not a URL the parser takes: nothing of it is shown
        return REDACTED
    netloc = parts.netloc
    user_info, at, host = netloc.rpartition("@")
    if at:
        user, colon, _ = user_info.partition(":")
        netloc = f"{user}:{REDACTED}@{host}" if colon and user else f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{name}={REDACTED}" for name, _ in pairs) if pairs else REDACTED
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
