"""`orchestrator config check|show`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ._common import echo, err_console, loaded_config, print_json, print_table

if TYPE_CHECKING:
    from .._config import LoadedConfig

__all__ = ["register"]

config_app = typer.Typer(help="Validate and show the effective configuration.", no_args_is_help=True)


@config_app.command("check")
def check(ctx: typer.Context) -> None:
    """Validate the configuration; exit 2 with one line per problem when it is wrong."""
    loaded = loaded_config(ctx)
    _warn_ignored_env(loaded)
    servers = loaded.settings.mcp.servers
    enabled = sum(1 for server in servers.values() if server.enabled)
    where = loaded.path if loaded.path is not None else "defaults"
    echo(f"ok: {where} ({loaded.path_reason}): {len(servers)} servers, {enabled} enabled")


@config_app.command("show")
def show(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print every effective setting with its source (default, file, env); secrets redacted."""
    from .._config import effective_values

    loaded = loaded_config(ctx)
    _warn_ignored_env(loaded)
    rows = list(effective_values(loaded))
    if as_json:
        print_json(
            {
                "config_file": str(loaded.path) if loaded.path else None,
                "config_file_reason": loaded.path_reason,
                "values": [{"key": key, "value": value, "source": source} for key, value, source in rows],
            }
        )
        return
    where = loaded.path if loaded.path is not None else "none"
    echo(f"config file: {where} ({loaded.path_reason})")
    print_table(["key", "value", "source"], [(key, _render(value), source) for key, value, source in rows])


def _warn_ignored_env(loaded: LoadedConfig) -> None:
    """A warning on stderr per `BERNSTEIN_*` variable that names no setting (most likely a typo)."""
    from .._config import Settings

    known = ", ".join(sorted(Settings.model_fields))
    for name in loaded.ignored_env:
        err_console.print(
            f"warning: environment {name}: names no setting (top-level keys: {known}); ignored",
            markup=False,
            soft_wrap=True,
        )


def _render(value: object) -> str:
    import json

    return value if isinstance(value, str) else json.dumps(value)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
