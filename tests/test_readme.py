"""The README's two quick-start commands: CI runs the second verbatim, the first works."""

import re
import shlex
from pathlib import Path

from fusionopt.cli import main

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_two_commands_and_ci_runs_the_test_command():
    commands = quick_start_commands()
    assert len(commands) == 2
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci_lines
    assert "pytest" in commands[1] and "python3 -m venv .venv" in commands[1]


def test_main_job_runs(capsys):
    command = quick_start_commands()[0]
    invocation = command.split("&&")[-1].strip()
    argv = shlex.split(invocation)
    assert argv[0].endswith("fusionopt")
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    assert "wfbp" in out and "1.000x" in out and "horovod" in out
