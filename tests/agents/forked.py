"""Run `agent.py ARGS...` as a child of the zygote (see zygote.py) and exit with its status. Stdlib only.

python tests/agents/forked.py SOCKET_PATH -- --config ... --out ...
"""

from __future__ import annotations

import json
import socket
import sys


def main() -> int:
    path, argv = sys.argv[1], sys.argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall((json.dumps({"argv": argv}) + "\n").encode())
        reply = conn.makefile("r").readline().strip()
    return int(reply) if reply.lstrip("-").isdigit() else 1


if __name__ == "__main__":
    sys.exit(main())
