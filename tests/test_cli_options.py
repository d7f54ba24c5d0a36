"""``--option KEY=VALUE`` reads what ``fusionopt methods --options`` prints, and the messages
and README lines a new user meets first."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from fusionopt.cli import main, option_value
from fusionopt.model import Profile
from fusionopt.solvers import methods, get_method

ROOT = Path(__file__).resolve().parent.parent
OPTION_LINE = re.compile(r"^\s+--option (\w+)=\.\.\.  \(default (.*)\)$")


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def error_line(capsys, *argv) -> str:
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "") and len(err.splitlines()) == 1 and err.startswith("fusionopt: error: "), err
    return err.strip()


def printed_defaults(capsys) -> list[tuple[str, str, str]]:
    """(method, option, printed default) for every option line of ``fusionopt methods --options``."""
    status, out, _ = run(capsys, "methods", "--options")
    assert status == 0
    names = set(methods())
    found, method = [], None
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in names and line.startswith("  ") and not line.startswith("    "):
            method = words[0]
        match = OPTION_LINE.match(line)
        if match:
            found.append((method, match.group(1), match.group(2)))
    return found


def test_every_printed_default_reads_back_as_that_default(capsys):
    found = printed_defaults(capsys)
    declared = [(name, option) for name in methods() for option in get_method(name).options]
    assert sorted((m, o) for m, o, _ in found) == sorted(declared)
    types = set()
    for method, option, printed in found:
        default = get_method(method).options[option]
        value = option_value(printed)
        assert value == default and type(value) is type(default), (method, option, printed, value)
        types.add(type(default).__name__)
    # Every type a method's options declare by their defaults is covered.
    assert types == {"NoneType", "bool", "int", "float", "str"}


@pytest.mark.parametrize("text, value", [
    ("True", True), ("true", True), ("False", False), ("false", False),
    ("None", None), ("none", None), ("null", None),
    ("25", 25), ("25.0", 25.0), ("1e-09", 1e-09), ("-3", -3),
    ("[25, 50.5]", [25, 50.5]), ("['dp', 'wfbp']", ["dp", "wfbp"]), ('["dp", null]', ["dp", None]),
    ("[True, None]", [True, None]), ("'current'", "current"), ('"nccl"', "nccl"),
    ("best-baseline", "best-baseline"), ("module", "module"), ("", ""),
])
def test_option_values(text, value):
    parsed = option_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_boolean_options_from_the_command_line(capsys, tmp_path):
    profile = tmp_path / "p.json"
    Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3]).write(profile)
    sharded = ["--alpha", "0.001", "--beta", "1e-9", "--fully-sharded", "--method", "sharded-opt", "--json"]
    plain = run(capsys, "solve", profile, *sharded, "--option", "time_limit=5")
    assert plain[0] == 0, plain[2]
    for spelling in ("True", "true"):
        status, out, err = run(capsys, "solve", profile, *sharded, "--option", f"reduce_groups={spelling}",
                               "--option", "time_limit=5")
        assert (status, err) == (0, ""), err
        # With groups it searches a larger space from the same start: never slower.
        assert json.loads(out)["iteration_time"] <= json.loads(plain[1])["iteration_time"] * (1 + 1e-12)
    status, out, err = run(capsys, "solve", profile, *sharded, "--option", "root=None", "--option", "time_limit=5")
    assert (status, err) == (0, "")
    assert "reduce_groups must be True or False, got 'yes'" in error_line(
        capsys, "solve", profile, *sharded, "--option", "reduce_groups=yes")


def test_memory_cap_must_be_finite(capsys, tmp_path):
    profile = tmp_path / "p.json"
    Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3]).write(profile)
    argv = ["solve", profile, "--alpha", "0.001", "--beta", "1e-9", "--fully-sharded", "--memory-cap"]
    assert error_line(capsys, *argv, "inf") == ("fusionopt: error: --memory-cap must be a finite size, got 'inf' "
                                                "(leave --memory-cap out for no cap)")
    assert error_line(capsys, *argv, "1e400 GB").endswith("must be a finite size, got '1e400 GB' "
                                                          "(leave --memory-cap out for no cap)")
    assert error_line(capsys, *argv, "0") == "fusionopt: error: --memory-cap must be a positive size, got '0'"
    assert error_line(capsys, *argv[:-1], "--memory-cap=-inf") == ("fusionopt: error: --memory-cap must be a "
                                                                   "positive size, got '-inf'")
    assert "'nan' is not a size" in error_line(capsys, *argv, "nan")


def test_decoupled_cpsat_refusals_speak_of_what_was_given(capsys, tmp_path):
    argv = ["--alpha", "0.001", "--beta", "1e-9", "--decoupled", "--method", "decoupled-cpsat"]
    for n in (12, 41):
        profile = tmp_path / f"p{n}.json"
        Profile.from_arrays([1e6] * n, [1e-3] * n, [1e-3] * n).write(profile)
        line = error_line(capsys, "solve", profile, *argv)
        assert "with interleave=True" not in line and "decoupled-cpsat with interleave=False" not in line
        assert "(the default)" in line and f"n = {n}" in line
    # Given or not, interleave=False names the same limit beyond 40 tensors.
    assert error_line(capsys, "solve", tmp_path / "p41.json", *argv, "--option", "interleave=False") == line


def readme() -> str:
    return (ROOT / "README.md").read_text()


@pytest.mark.parametrize("flag, pattern", [("--decoupled", "decoupled"), ("--fully-sharded", "fully-sharded"),
                                           ("--ps-servers", "ps")])
def test_readme_lists_every_method_of_each_pattern(flag, pattern):
    text = " ".join(readme().split())
    (listing,) = re.findall(rf"`{flag}[^`]*`[^`]*switches to .*?whose methods are (.*?)[.;]", text)
    named = set(re.findall(r"`([a-z0-9-]+)`", listing))
    registered = {name for name in methods() if get_method(name).pattern == pattern}
    assert named == registered


def test_readme_installs_torchvision_beside_the_pinned_cpu_torch():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [r for r in extras["test"] if r.startswith("torch==")]
    major, minor, patch = (int(part) for part in pin.split("==")[1].split("."))
    # torchvision 0.(m + 15) goes with torch 2.m (torchvision's own compatibility table).
    vision = f"torchvision==0.{minor + 15}.{patch}"
    commands = [line for line in readme().splitlines() if "pip install" in line and "torchvision" in line]
    assert commands
    for command in commands:
        assert "--index-url https://download.pytorch.org/whl/cpu" in command and pin in command \
            and vision in command, command
