"""The tests' fork server (tests/zygote.py, tests/forked.py): a launched script behaves as its own process.

Most SDK test servers and the spawn tests' agents start through it, so what a client sees of a process
(its stdio, arguments, environment, directory, exit status, signals) must be what the script's own
process would show. The zygote here preloads nothing: the scripts are a few lines of stdlib.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import forked_command, start_zygote, stop_zygote

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    print(os.getpid(), os.getcwd(), os.environ.get("ZYGOTE_TEST", "-"), *sys.argv[1:], flush=True)
    line = sys.stdin.readline()
    if line.startswith("exit"):
        sys.exit(int(line.split()[1]))
    if line.startswith("raise"):
        raise ValueError("on purpose")
    if line.startswith("trap"):
        signal.signal(signal.SIGTERM, lambda number, frame: (print("got", number, flush=True), sys.exit(7)))
    print("echo", line.strip(), flush=True)
    time.sleep(60)
    """
)


Launch = Callable[..., tuple[subprocess.Popen[str], list[str]]]
"""Starts the script through the zygote with these arguments: the process and the script's first line."""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("zygote") / "z.sock")
    process = start_zygote(path)
    yield path
    assert stop_zygote(process) == 0  # the zygote exits when stdin closes


@pytest.fixture
def launch(zygote: str, tmp_path: Path) -> Iterator[Launch]:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
        process = subprocess.Popen(
            forked_command(zygote, script, *args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "ZYGOTE_TEST": "from-env"},
        )
        started.append(process)
        assert process.stdout is not None
        return process, process.stdout.readline().split()

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_script_gets_the_launchers_stdio_arguments_environment_and_directory(
    launch: Launch, tmp_path: Path
) -> None:
    process, (pid, cwd, env, *args) = launch("--flag", "value")
    assert int(pid) != process.pid  # a forked child, not the launcher
    assert (cwd, env, args) == (str(tmp_path), "from-env", ["--flag", "value"])
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("hello\n")
    process.stdin.flush()
    assert process.stdout.readline().split() == ["echo", "hello"]


@pytest.mark.parametrize(("line", "code"), [("exit 3", 3), ("exit 0", 0), ("raise", 1)])
def test_the_launcher_exits_with_the_scripts_status(launch: Launch, line: str, code: int) -> None:
    process, _ = launch()
    _, stderr = process.communicate(f"{line}\n", timeout=10)
    assert process.returncode == code
    assert ("ValueError: on purpose" in stderr) == (line == "raise")


def test_a_signal_to_the_launcher_reaches_the_script_and_ends_both_alike(launch: Launch) -> None:
    process, (pid, *_) = launch()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == -signal.SIGTERM
    assert _gone_within(int(pid), 5)


def test_the_script_dies_with_a_launcher_killed_outright(launch: Launch) -> None:
    process, (pid, *_) = launch()
    assert _alive(int(pid))
    process.kill()
    process.wait(timeout=10)
    assert _gone_within(int(pid), 5)


def test_a_script_that_handles_the_signal_ends_as_it_chooses(launch: Launch) -> None:
    process, _ = launch()
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("trap\n")
    process.stdin.flush()
    assert process.stdout.readline().split() == ["echo", "trap"]  # the handler is installed
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().split() == ["got", str(int(signal.SIGTERM))]
    assert process.wait(timeout=10) == 7


def test_a_module_runs_as_python_m_would_run_it(zygote: str, tmp_path: Path) -> None:
    """`forked.py SOCKET -m MODULE ARGS` (how the published mcp-server-time starts): the module's `__main__`
    with its arguments, stdin and exit status."""
    command = forked_command(zygote, "-m", "json.tool", "--sort-keys")
    done = subprocess.run(command, input='{"b": 1, "a": 2}', capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert (done.returncode, done.stdout) == (0, '{\n    "a": 2,\n    "b": 1\n}\n')
    failed = subprocess.run(command, input="not json", capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert failed.returncode == 1 and "Expecting value" in failed.stderr
