"""The MCP gateway: one long-running MCP server that presents each agent's plan over live connections.

    server.py     `Gateway`: wires the parts below, the worker pool, warm-up, list_changed, transports
    views.py      agent views and endpoint contexts, and the `Upstream` the gateway serves
    spawns.py     the spawn registry (`SpawnHandle`): open, verify, count, close, across replicas
    handlers.py   the MCP handlers: tools/list, tools/call with its relay, resources and prompts
    sessions.py   per-spawn session accounting (rounds, searches, expands, calls; tokens in both modes)
    proxy.py      the upstream servers' resources and prompts, listed and read through the gateway
    app.py        the HTTP side: ASGI router, admin endpoints, transport security, uvicorn
    auth.py       credentials: the admin secret and its runtime file, signed spawn capabilities (JWT),
                  the challenge that proves a gateway before a client sends it anything
    addresses.py  paths, names and bind rules clients share without loading the server
    client.py     `GatewayClient`: the admin endpoints over one async HTTP client

`orchestrator` re-exports `Gateway`, `SpawnHandle` and `GatewayClient`. Import the server side from its
modules; this package's namespace stays empty so a client importing `addresses` or `client` loads neither
uvicorn nor the MCP server.
"""
