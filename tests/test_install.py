"""What ships for running sync unattended: `install.sh --cron` and the systemd user timer."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from search import cli as cli_module

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string((DOCS / name).read_text(encoding="utf-8"))
    return parser


def test_the_timer_runs_the_sync_service_every_minute() -> None:
    service, timer = unit("notes-search-sync.service"), unit("notes-search-sync.timer")
    assert service["Service"]["Type"] == "oneshot"
    argv = shlex.split(service["Service"]["ExecStart"])
    assert Path(argv[0]).name == "notes-search" and argv[0].startswith("%h/")
    assert argv[1:] == ["sync", "--quiet"]
    # the timer starts the service of its own name (no Unit= needed) and is enabled by timers.target
    assert "Unit" not in timer["Timer"] and timer["Install"]["WantedBy"] == "timers.target"
    assert timer["Timer"]["OnCalendar"] == "minutely" and timer["Timer"]["Persistent"] == "true"


def test_the_units_exec_start_is_a_command_line_the_cli_accepts(config_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What the timer runs, run here: it succeeds and prints nothing (journald gets errors only)."""
    from tests.fakes import FakeEmbedder

    monkeypatch.setattr(cli_module, "make_embedder", FakeEmbedder)
    monkeypatch.setenv("NOTES_SEARCH_CONFIG", str(config_path))  # as the unit's Environment= line would
    argv = shlex.split(unit("notes-search-sync.service")["Service"]["ExecStart"])[1:]
    result = CliRunner().invoke(cli_module.cli, argv)
    assert result.exit_code == 0 and result.output == "", result.output


def _verify(folder: Path, home: Path) -> subprocess.CompletedProcess[str]:
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    units = [str(folder / "notes-search-sync.timer"), str(folder / "notes-search-sync.service")]
    return subprocess.run(
        ["systemd-analyze", "--user", "verify", *units], env=env, capture_output=True, text=True, timeout=60
    )


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    home = tmp_path / "home"  # %h: a home where ExecStart's executable exists, as after install
    exe = home / "notes-search/.venv/bin/notes-search"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    for name in ("notes-search-sync.service", "notes-search-sync.timer"):
        shutil.copy(DOCS / name, tmp_path / name)
    result = _verify(tmp_path, home)
    if "Failed to initialize manager" in result.stderr:
        pytest.skip(f"systemd-analyze --user cannot run here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    # and verify does catch a broken unit, so the pass above means something
    broken = (tmp_path / "notes-search-sync.timer").read_text().replace("OnCalendar=minutely", "OnCalendar=often")
    (tmp_path / "notes-search-sync.timer").write_text(broken)
    assert _verify(tmp_path, home).returncode != 0


def test_install_cron_without_crontab_says_how_to_get_one_before_installing(tmp_path: Path) -> None:
    """A copy of install.sh (it works in its own folder) with a PATH that has no crontab: one line,
    exit 1, and the Python that would build the venv and run pip is never started."""
    shutil.copy(REPO / "install.sh", tmp_path / "install.sh")
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname",):
        os.symlink(shutil.which(tool) or f"/usr/bin/{tool}", tools / tool)
    marker = tmp_path / "python-was-run"
    python = tools / "python3"
    python.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(marker))}\nexit 1\n")
    python.chmod(0o755)
    bash = shutil.which("bash") or "/bin/bash"
    result = subprocess.run(
        [bash, str(tmp_path / "install.sh"), "--cron"],
        env={"PATH": str(tools), "PYTHON": str(python), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "crontab" in lines[0] and "apt-get install cron" in lines[0], result.stderr
    assert "notes-search-sync.timer" in lines[0]
    assert not marker.exists() and not (tmp_path / ".venv").exists()
