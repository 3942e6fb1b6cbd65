"""A stdio "MCP server" that never answers anything, not even `initialize` (no mcp import: starts fast).

    python tests/servers/hanging.py [--garbage] [--ignore-eof]

It reads stdin and discards it. `--garbage` also prints non-JSON lines on stdout (a server that only
ever writes noise). It exits when stdin closes, unless `--ignore-eof`, in which case it lingers until
signalled (to exercise the kill path of a client's shutdown).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--garbage", action="store_true")
    parser.add_argument("--ignore-eof", action="store_true")
    args = parser.parse_args()
    if args.garbage:
        sys.stdout.write("Starting server... done\n*** this is not JSON-RPC ***\n")
        sys.stdout.flush()
    for line in sys.stdin:
        if args.garbage:
            sys.stdout.write(f"garbage reply to {len(line)} bytes\n")
            sys.stdout.flush()
    if args.ignore_eof:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
