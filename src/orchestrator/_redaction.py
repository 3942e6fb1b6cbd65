"""Obvious secrets taken out of request text before it is stored (search traces, task memory).

A request an agent sends to `tool_search`, or a task handed to a spawn, may carry what a user pasted:
a password, an API key, a URL with credentials. Text kept past the request (the trace store, exports)
never holds them: `redact(text)` replaces each with `***` (`_config.REDACTED`, what `config show` prints
for secret settings) and keeps everything else, so the words that say what the tool does survive.

What counts as a secret, in order:

    a PEM private key block                     -----BEGIN ... PRIVATE KEY----- ... -----END ...-----
    a URL's user and password                   https://user:pass@host -> https://***@host
    a value written after a secret's name       password: x, token=x, api key is x, "password": "x",
                                                DB_PASSWORD=x, --password x, curl -u user:x (`SECRET_NAMES`)
    an HTTP credential                          Bearer x, Basic x
    a known token shape                         sk-..., ghp_..., github_pat_..., xoxb-..., AKIA...,
                                                AIza..., glpat-..., JWTs
    a long random-looking string                32+ letters and digits mixing both (keys, hex digests)
"""

from __future__ import annotations

import re

from ._config import REDACTED, SECRET_KEYS

__all__ = ["SECRET_NAMES", "redact"]

SECRET_NAMES = (
    *sorted(SECRET_KEYS),
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "client secret",
    "api key",
    "apikey",
    "access key",
    "secret key",
    "private key",
    "access token",
    "refresh token",
    "auth token",
    "authorization",
    "credentials",
    "cookie",
)
"""Names after which a value is a secret (`password is x`, `api_key=x`); a space also matches `_` and `-`."""

_NAME = "|".join(
    "[ _-]?".join(map(re.escape, re.split(r"[ _]", name)))
    for name in sorted(SECRET_NAMES, key=len, reverse=True)  # "secret key" before "secret"
)
_PEM = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL)
_URL_CREDENTIALS = re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s/@:]+(?::[^\s/@]*)?@", re.IGNORECASE)
_NAMED_VALUE = re.compile(
    rf"(?<![A-Za-z0-9])((?:{_NAME})s?\b[\"'`]?\s*(?:[:=]|\bis\b|\bwas\b)\s*|(?<![\w-])--?(?:{_NAME})s?[ \t]+|(?<!\S)-u[ \t]+[^\s:]+:)"
    rf"([\"'`]?)(?!{re.escape(REDACTED)}|(?:Bearer|Basic)\s)([^\s\"'`,;]+)",
    re.IGNORECASE,
)
"""The name may close a quote (`{"password": x}`) or end a longer one (`DB_PASSWORD=x`, `GITHUB_TOKEN=x`);
a command-line flag (`--password x`) and curl's `-u user:x` take the value after a space."""
_HTTP_CREDENTIAL = re.compile(r"\b(Bearer|Basic|Token)\s+([A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
_TOKEN_SHAPES = re.compile(
    r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)
_RANDOM_LOOKING = re.compile(r"(?<![\w-])(?=[A-Za-z_-]*\d)(?=[\d_-]*[A-Za-z])[A-Za-z0-9_-]{32,}={0,2}(?![\w-])")
"""32 or more characters of letters, digits, `_` and `-` with at least one letter and one digit: API
keys and hex digests. Prose never has words that long; `snake_case` names of that length without a digit
are left alone."""


def redact(text: str) -> str:
    """`text` with every obvious secret (see the module docstring) replaced by `***`."""
    text = _PEM.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _HTTP_CREDENTIAL.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _NAMED_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    return _RANDOM_LOOKING.sub(REDACTED, text)
