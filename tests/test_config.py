"""Settings: precedence (default < file < env), validation errors, ${VAR} expansion, redaction."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import ConfigError, Settings, TaskHistory, load_config, load_settings
from orchestrator._cli import app
from orchestrator._config import effective_values, expand_vars

from .conftest import REPO_ROOT


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No BERNSTEIN_* from the caller's shell, and no ./bernstein.yaml picked up by accident."""
    import os

    for key in list(os.environ):
        if key.startswith("BERNSTEIN_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def write(tmp_path: Path, text: str, name: str = "bernstein.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


SERVER = """\
mcp:
  servers:
    time:
      command: python
      args: ["-m", "mcp_server_time"]
"""


def test_defaults_apply_when_no_file_exists() -> None:
    loaded = load_config()
    assert loaded.path is None
    assert loaded.settings.mcp.tool_search.threshold_tokens == 6000
    assert loaded.settings.mcp.servers == {}
    assert loaded.settings.telemetry.exporter == "none"


def test_file_beats_defaults_and_env_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, SERVER + "  tool_search:\n    threshold_tokens: 7000\n    search_limit: 5\n")
    assert load_settings(path).mcp.tool_search.threshold_tokens == 7000

    monkeypatch.setenv("BERNSTEIN_MCP__TOOL_SEARCH__THRESHOLD_TOKENS", "8000")
    loaded = load_config(path)
    assert loaded.settings.mcp.tool_search.threshold_tokens == 8000
    assert loaded.settings.mcp.tool_search.search_limit == 5  # file value survives a sibling env override
    assert loaded.settings.mcp.servers["time"].args == ["-m", "mcp_server_time"]
    assert loaded.source_of(("mcp", "tool_search", "threshold_tokens")) == "env"
    assert loaded.source_of(("mcp", "tool_search", "search_limit")) == "file"
    assert loaded.source_of(("mcp", "tool_search", "directory_budget_tokens")) == "default"


def test_env_can_override_a_single_server_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, SERVER)
    monkeypatch.setenv("BERNSTEIN_MCP__SERVERS__TIME__ENABLED", "false")
    server = load_settings(path).mcp.servers["time"]
    assert server.enabled is False
    assert server.command == "python"


def test_config_path_comes_from_flag_then_env_then_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: 1\n")
    from_env = write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: 2\n", "env.yaml")
    flagged = write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: 3\n", "flag.yaml")
    assert load_config().path == local
    monkeypatch.setenv("BERNSTEIN_CONFIG", str(from_env))
    assert load_settings().mcp.tool_search.threshold_tokens == 2
    assert load_settings(flagged).mcp.tool_search.threshold_tokens == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (SERVER + "      bogus: 1\n", "mcp.servers.time.bogus: unknown key (line 6)"),
        (
            "mcp:\n  tool_search:\n    threshold_tokens: lots\n",
            "mcp.tool_search.threshold_tokens: Input should be a valid integer",
        ),
        (
            "mcp:\n  tool_search:\n    threshold_tokens: -1\n",
            "mcp.tool_search.threshold_tokens: Input should be greater than or equal to 0",
        ),
        (
            "mcp:\n  servers:\n    time:\n      transport: stdio\n",
            "mcp.servers.time: transport stdio needs 'command' (line 3)",
        ),
        ("mcp:\n  servers:\n    web:\n      transport: http\n", "mcp.servers.web: transport http needs 'url' (line 3)"),
        ("mcp:\n  servers:\n    web:\n      transport: sse\n", "mcp.servers.web: transport sse needs 'url' (line 3)"),
        (
            "mcp:\n  servers:\n    web:\n      transport: carrier-pigeon\n      url: x\n",
            "mcp.servers.web.transport: Input should be 'stdio', 'http' or 'sse'",
        ),
        ("telemetry:\n  exporter: graphite\n", "telemetry.exporter: Input should be"),
        ("mcp: [1, 2\n", "malformed YAML (line 2"),
        ("- just\n- a list\n", "the top level must be a mapping"),
    ],
)
def test_each_invalid_input_is_one_line_naming_file_key_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


def test_missing_and_unreadable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(binary)


def test_a_bad_env_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BERNSTEIN_MCP__TOOL_SEARCH__THRESHOLD_TOKENS", "-5")
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, SERVER))
    assert str(caught.value).startswith("environment BERNSTEIN_MCP__TOOL_SEARCH__THRESHOLD_TOKENS: ")


def test_vars_expand_from_the_environment_with_defaults_and_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    path = write(
        tmp_path,
        """\
mcp:
  servers:
    gh:
      command: python
      args: ["--repo", "${CONFIG_DIR}/repo", "--mode", "${MODE:-fast}"]
      env: {GITHUB_TOKEN: "${GH_TOKEN}"}
    web:
      transport: http
      url: http://127.0.0.1:${PORT:-9000}/mcp
      headers: {Authorization: "Bearer ${GH_TOKEN}"}
""",
    )
    settings = load_settings(path)
    gh = settings.mcp.servers["gh"]
    assert gh.args == ["--repo", f"{tmp_path.resolve()}/repo", "--mode", "fast"]
    assert gh.env == {"GITHUB_TOKEN": "s3cret"}
    assert settings.mcp.servers["web"].url == "http://127.0.0.1:9000/mcp"
    assert settings.mcp.servers["web"].headers == {"Authorization": "Bearer s3cret"}


def test_an_unset_var_is_an_error_at_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, SERVER + "      env: {TOKEN: '${SURELY_NOT_SET_ANYWHERE}'}\n")
    with pytest.raises(
        ConfigError, match=r"mcp\.servers\.time\.env: environment variable SURELY_NOT_SET_ANYWHERE is not set"
    ):
        load_config(path)


def test_python_command_means_this_interpreter(tmp_path: Path) -> None:
    server = load_settings(write(tmp_path, SERVER)).mcp.servers["time"]
    assert server.launch_command() == sys.executable


def test_show_redacts_env_headers_and_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    path = write(
        tmp_path,
        SERVER
        + "      env: {API_KEY: '${GH_TOKEN}'}\n"
        + "    web:\n      transport: http\n      url: http://127.0.0.1:1/mcp\n      headers: {Authorization: 'Bearer ${GH_TOKEN}'}\n"
        + "gateway:\n  token: hunter2\n",
    )
    values = {key: value for key, value, _ in effective_values(load_config(path))}
    assert values["mcp.servers.time.env"] == {"API_KEY": "***"}
    assert values["mcp.servers.web.headers"] == {"Authorization": "***"}
    assert values["gateway.token"] == "***"
    rendered = json.dumps(values)
    assert "s3cret" not in rendered and "hunter2" not in rendered


def test_show_and_errors_mask_what_urls_and_secret_keys_carry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by red-teaming: a server URL's password and query key were shown expanded by `config show`
    (and in `cannot reach ...` errors), and a wrong type under a secret key was echoed in the error."""
    monkeypatch.setenv("SAAS_PASSWORD", "pa55-word-xyz")
    monkeypatch.setenv("SAAS_KEY", "k-0123456789")
    path = write(
        tmp_path,
        SERVER + "    saas:\n      transport: http\n"
        "      url: http://apiuser:${SAAS_PASSWORD}@127.0.0.1:1/mcp?api_key=${SAAS_KEY}&region=eu\n",
    )
    values = {key: value for key, value, _ in effective_values(load_config(path))}
    assert values["mcp.servers.saas.url"] == "http://apiuser:***@127.0.0.1:1/mcp?api_key=***&region=***"
    typed = write(
        tmp_path,
        SERVER
        + "    web:\n      transport: http\n      url: http://x/mcp\n      headers: {Authorization: 123456789012}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(typed)
    assert "123456789012" not in str(caught.value) and "(got a int value, not shown)" in str(caught.value)


def test_a_nul_in_an_agent_command_is_a_config_error(tmp_path: Path) -> None:
    """Found by red-teaming: `config check` passed it and `orchestrator spawn` died with a traceback."""
    path = write(tmp_path, 'agents:\n  x:\n    command: ["echo\\0hi", "{task}"]\n')
    with pytest.raises(ConfigError, match=r"agents\.x\.command\.0: holds a NUL character"):
        load_config(path)


runner = CliRunner()


def test_cli_config_check_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: -1\n")
    result = runner.invoke(app, ["--config", str(path), "config", "check"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {path}: mcp.tool_search.threshold_tokens")


def test_cli_config_show_prints_sources_as_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, SERVER)
    monkeypatch.setenv("BERNSTEIN_MCP__TOOL_SEARCH__SEARCH_LIMIT", "3")
    result = runner.invoke(app, ["--config", str(path), "config", "show", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    by_key = {row["key"]: row for row in payload["values"]}
    assert by_key["mcp.tool_search.search_limit"] == {
        "key": "mcp.tool_search.search_limit",
        "value": 3,
        "source": "env",
    }
    assert by_key["mcp.servers.time.command"]["source"] == "file"
    assert by_key["mcp.tool_search.threshold_tokens"]["source"] == "default"


def test_bundled_bernstein_yaml_is_valid_and_points_git_at_the_repository() -> None:
    settings = load_settings(REPO_ROOT / "bernstein.yaml")
    assert {"time", "git"} <= set(settings.mcp.servers)
    git = settings.mcp.servers["git"]
    assert str(REPO_ROOT) in git.args
    assert settings.mcp.tool_search.threshold_tokens == 6000


def test_unknown_agent_profile_lists_known_ones() -> None:
    settings = load_settings()
    assert settings.agent("default").allow == ["*"]
    with pytest.raises(ConfigError, match=r"unknown agent profile 'ghost'.*known: default"):
        settings.agent("ghost")


def test_settings_alone_read_the_same_file_the_cli_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: 1234\n")
    assert Settings().mcp.tool_search.threshold_tokens == 1234  # ./bernstein.yaml
    other = write(tmp_path, "mcp:\n  tool_search:\n    threshold_tokens: 77\n", name="other.yaml")
    assert Settings(other).mcp.tool_search.threshold_tokens == 77  # an explicit file
    monkeypatch.setenv("BERNSTEIN_CONFIG", str(other))
    assert Settings().mcp.tool_search.threshold_tokens == 77  # $BERNSTEIN_CONFIG
    monkeypatch.setenv("BERNSTEIN_MCP__TOOL_SEARCH__THRESHOLD_TOKENS", "5")
    assert Settings().mcp.tool_search.threshold_tokens == 5  # the environment beats the file
    assert Settings(mcp={"tool_search": {"threshold_tokens": 9}}).mcp.tool_search.threshold_tokens == 9


def test_one_cache_root_holds_tool_lists_task_histories_and_vectors(tmp_path: Path) -> None:
    settings = Settings(mcp={"cache_dir": str(tmp_path / "cache")})
    root = tmp_path / "cache"
    assert settings.mcp.cache_root() == root
    assert settings.mcp.tool_cache_dir() == root / "tools"
    TaskHistory.from_settings(settings).record("t1", ["time__get_current_time"])
    assert [path.name for path in (root / "tasks").iterdir()] == ["t1.json"]  # the store's `tasks` records
    assert settings.mcp.embedding_cache_dir() == root / "embeddings"
    moved = Settings(mcp={"cache_dir": str(root), "embedding": {"cache_dir": str(tmp_path / "vectors")}})
    assert moved.mcp.embedding_cache_dir() == tmp_path / "vectors"


def test_a_default_may_reference_another_variable_expanded_only_when_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GH_TOKEN", "from-gh")
    monkeypatch.delenv("TOKEN", raising=False)
    path = write(
        tmp_path,
        SERVER
        + "      env:\n"
        + "        A: '${TOKEN:-${GH_TOKEN}}'\n"
        + "        B: '${TOKEN:-x${NOT_SET_EITHER:-y}z}/w'\n"
        + "        C: '${GH_TOKEN:-${SURELY_NOT_SET_ANYWHERE}}'\n",
    )
    env = load_settings(path).mcp.servers["time"].env
    assert env == {"A": "from-gh", "B": "xyz/w", "C": "from-gh"}
    # What is not a reference stays as written; an unclosed `${` does not swallow the references after it.
    assert expand_vars("$GH_TOKEN ${NOT_SET:-{x}} ${OPEN:-a ${GH_TOKEN}") == "$GH_TOKEN {x} ${OPEN:-a from-gh"
    missing = write(tmp_path, SERVER + "      env: {A: '${TOKEN:-${SURELY_NOT_SET_ANYWHERE}}'}\n", "missing.yaml")
    with pytest.raises(ConfigError, match="SURELY_NOT_SET_ANYWHERE is not set"):
        load_config(missing)


def test_a_bad_env_json_value_names_the_variable_not_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, SERVER)
    monkeypatch.setenv("BERNSTEIN_MCP__SERVERS", "{bad")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith("environment BERNSTEIN_MCP__SERVERS: not valid JSON: ")
    assert str(path) not in str(caught.value)


def test_cli_warns_about_a_variable_naming_no_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, SERVER)
    monkeypatch.setenv("BERNSTEIN_MPC__TOOL_SEARCH__THRESHOLD_TOKENS", "5")
    loaded = load_config(path)
    assert loaded.ignored_env == ("BERNSTEIN_MPC__TOOL_SEARCH__THRESHOLD_TOKENS",)
    result = runner.invoke(app, ["--config", str(path), "config", "check"])
    assert result.exit_code == 0
    assert "warning: environment BERNSTEIN_MPC__TOOL_SEARCH__THRESHOLD_TOKENS: names no setting" in result.output
    monkeypatch.delenv("BERNSTEIN_MPC__TOOL_SEARCH__THRESHOLD_TOKENS")
    monkeypatch.setenv("BERNSTEIN_CONFIG", str(path))
    assert load_config().ignored_env == ()
