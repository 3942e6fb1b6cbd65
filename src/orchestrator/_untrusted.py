"""Reading what someone else wrote (an agent, a server, another process): the primitives every reader shares.

json_or_none(raw)      decoded JSON, or None for text that is not JSON or nests past the decoder
open_regular(path)     a file opened for reading only if it is a regular file (no FIFO, no link)
is_number(text)        ASCII digits only
without_surrogates(t)  `t` with U+FFFD for each lone surrogate, same length
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["is_number", "json_or_none", "open_regular", "without_surrogates"]


def json_or_none(raw: str | bytes) -> Any:
    """`raw` decoded as JSON, or None when it is not JSON: cut short, not UTF-8, or nested deeper than the
    decoder recurses."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def open_regular(path: Path) -> BinaryIO:
    """`path` open for reading when it is a regular file. Opening never blocks on a FIFO nor follows a link
    (to /dev/zero, say): a cache or store file another process put there must not hang or fill the reader.

    Raises:
        OSError: it does not exist, is a link, cannot be read, or is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    file = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        file.close()
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return file


def is_number(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also takes other scripts' digits and superscripts ('٨٠', '²')."""
    return text.isascii() and text.isdigit()


_SURROGATES = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """`text` with U+FFFD in place of each lone surrogate, one character for one (offsets kept). JSON's
    `\\ud800` and an undecodable command-line byte (`surrogateescape`) make them; Rust and C libraries
    (the anchor automaton, the tokenizer) take only text that has a UTF-8 form."""
    return text if text.isascii() else _SURROGATES.sub("\ufffd", text)
