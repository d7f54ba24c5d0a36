"""What every command shares: the usage error, the parser that exits with one line, and small
helpers for files and words."""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Sequence
from fusionopt.integrations._kineto_events import TIMELINE_RULE, describe_clock
from fusionopt.model import Profile
from fusionopt.model._profile_csv import read_profile_csv, write_profile_csv
from fusionopt.viz._figures import written_by_fusionopt


# --timeline auto's rule for the help, whose text argparse formats with % (50% becomes 50%%).
TIMELINE_HELP = TIMELINE_RULE.replace("%", "%%")


class UsageError(Exception):
    """A bad command line or input file: reported in one line, exit status 2."""


INTERRUPTED = 130
"""The exit status after Ctrl-C (SIGINT): 128 + 2, what a shell reports for it."""


class Kept(KeyboardInterrupt):
    """Ctrl-C after the command kept its work so far; the message says what and where
    (printed after ``fusionopt: interrupted``)."""


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A flag is taken as written, never as the start of another (--alpha for --alpha-file).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # Negative numbers, 1e-3 forms included, are values (``--alpha -1e-3``), so the
        # option's own check speaks, not "expected one argument".
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        given = sys.argv[1:] if args is None else list(args)
        parsed = super().parse_known_args(given, namespace)
        _warn_of_repeats(self, given)
        return parsed

    def error(self, message: str) -> None:  # argparse prints usage and two lines otherwise
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if commands and message == f"the following arguments are required: {commands[0].metavar}":
            # No command given: the commands to choose from, as --help lists them.
            self.print_help(sys.stderr)
            raise SystemExit(2)
        raise UsageError(message)


def _warn_of_repeats(parser: argparse.ArgumentParser, given: Sequence[str]) -> None:
    """A flag of one value given again with another value: argparse takes the last, and says
    nothing of the first; a warning says it (a script may override a default so)."""
    for action in parser._actions:
        if not action.option_strings or action.nargs is not None or not isinstance(action, argparse._StoreAction):
            continue
        values = []
        for k, token in enumerate(given):
            if token == "--":
                break
            for flag in action.option_strings:
                if token == flag and k + 1 < len(given):
                    values.append(given[k + 1])
                elif token.startswith(flag + "=") and flag.startswith("--"):
                    values.append(token[len(flag) + 1:])
        if len(set(values)) > 1:
            warnings.warn(f"{action.option_strings[-1]} is given {len(values)} times ({', '.join(values)}): the last, "
                          f"{values[-1]}, is taken", UserWarning, stacklevel=2)


def plural(number: int, noun: str) -> str:
    """``number`` and ``noun``, the noun plural unless the number is one.

    >>> plural(1, "message"), plural(2, "more message"), plural(0, "bucket")
    ('1 message', '2 more messages', '0 buckets')
    """
    return f"{number} {noun}{'' if number == 1 else 's'}"


# ---------------------------------------------------------------------- sweep
def comma_list(option: str, text: str, convert: Any = str) -> list[Any]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} needs at least one comma-separated value")
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise UsageError(f"{option} takes comma-separated integers, got {text!r}") from None


PLAN_FILES = ("fusionopt.plan", "fusionopt.shardedplan", "fusionopt.decoupledplan", "fusionopt.psplan")
"""The files ``solve --output`` may replace: plans of any pattern (their ``schema``)."""


def refuse_writing_over(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """An ``--output`` that is one of the files the command reads (any of its arguments that
    names an existing file; ``argv``, the command line, tells a flag from a positional) is
    refused before any work: writing it would lose the input; so is an empty one, one in a
    missing folder, or a folder, which could not be written once the work is done. An
    existing non-empty ``--output`` is replaced only when fusionopt wrote it as what the
    command writes (``args.replaces``: the kinds of :func:`file_kind`, or a function of
    ``args`` giving them): a plan by a plan, an image by an image; any other file is the
    user's, and is refused."""
    outputs = getattr(args, "output", None)
    for output in outputs if isinstance(outputs, list) else [] if outputs is None else [outputs]:
        if not output:
            raise UsageError("--output is empty: give a file name")
        folder = Path(output).parent
        if not folder.is_dir():
            raise UsageError(f"--output {output}: folder {folder} does not exist")
        if Path(output).is_dir():
            raise UsageError(f"--output {output} is a folder: give a file name")
        target = Path(output).resolve()
        for name, value in vars(args).items():
            if name == "output":
                continue
            for given in value if isinstance(value, list) else [value]:
                if isinstance(given, str) and _same_file(given, target):
                    flag = f"--{name.replace('_', '-')}"
                    given_as_flag = any(a == flag or a.startswith(flag + "=") for a in argv)
                    label = f"the {flag}" if given_as_flag else f"the {name.replace('_', ' ')}"
                    raise UsageError(f"--output {output} is {label} file itself: writing it would lose the input; "
                                     "give another file")
        replaces = getattr(args, "replaces", None)
        kinds = replaces(args) if callable(replaces) else replaces
        if kinds is not None and Path(output).exists() and Path(output).stat().st_size > 0:
            found = file_kind(output)
            trace = getattr(args, "trace", None)
            if found not in kinds and trace is not None and Path(trace).is_dir() \
                    and Path(output).resolve().parent == Path(trace).resolve():
                raise UsageError(f"--output {output} is a file of the recording --trace {trace}: writing it would "
                                 "lose the input; give another file")
            if found not in kinds:
                what = "a file fusionopt did not write" if found is None else KIND_WORDS[found]
                raise UsageError(f"--output {output} exists and is {what}, not {KIND_WORDS[kinds[0]]}: "
                                 "writing it would lose it; give another file, or remove it first")


PROFILE_CSV = "profile.csv"
IMAGE = "image"
KIND_WORDS = {"fusionopt.plan": "a plan", "fusionopt.shardedplan": "a sharded plan",
              "fusionopt.decoupledplan": "a decoupled plan", "fusionopt.psplan": "a parameter server's plan",
              "fusionopt.profile": "a profile", PROFILE_CSV: "a profile", IMAGE: "an image",
              "fusionopt.cost": "a cost calibration", "fusionopt.contention": "a contention calibration",
              "fusionopt.reducer_calibration": "a reducer calibration"}
"""How a refusal names each kind of file fusionopt writes (a JSON document's ``schema``)."""
PROFILE_FILES = ("fusionopt.profile", PROFILE_CSV)
"""The files ``profile --output`` may replace: a profile, as JSON or CSV."""
IMAGE_FILES = (IMAGE,)
"""The files a plot's ``--output`` may replace: images fusionopt drew."""


def file_kind(path: str) -> str | None:
    """Which of fusionopt's outputs the file at ``path`` is: a JSON document's ``schema`` of
    :data:`KIND_WORDS`, a profile CSV, or an image fusionopt drew; None for any other file
    (one that cannot be read included)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(4096)
            if written_by_fusionopt(head):
                return IMAGE
            data = head + stream.read()
    except OSError:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):        # not JSON, or nested past the parser's depth
        doc = None
    if isinstance(doc, dict) and doc.get("schema") in KIND_WORDS:
        return doc["schema"]
    if path.lower().endswith(".csv"):
        try:
            read_profile_csv(path)
        except (OSError, ValueError):
            return None
        return PROFILE_CSV
    return None


def _same_file(given: str, target: Path) -> bool:
    """Whether the argument ``given`` names an existing file that is ``target``; a text that
    cannot be a path (too long a name, say) names none."""
    try:
        return Path(given).is_file() and Path(given).resolve() == target
    except (OSError, ValueError):
        return False


def json_output(path: str | None, what: str) -> None:
    """An ``--output`` that is written as JSON must say so by its name."""
    if path is not None and not path.lower().endswith(".json"):
        raise UsageError(f"--output {path}: {what} is written as JSON: give a .json file name")


def fail(exc: BaseException) -> None:
    """Report a run that failed (not a usage error) in one line; exit status 1."""
    print(f"fusionopt: error: {' '.join(str(exc).split())}", file=sys.stderr)
    raise SystemExit(1)


# ---------------------------------------------------------------------- plot (timeline, sweep)
def output_paths(args: argparse.Namespace) -> list[str]:
    """The --output files, their formats checked before any work is done."""
    from fusionopt.viz import image_format

    for path in args.output:
        image_format(path)
    return args.output


def clock_words(profile: Profile) -> str:
    """Which clock timed a profile read from a trace, and why."""
    return f"; timed by {describe_clock(profile.metadata)}"


def show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    print(f"fusionopt: warning: {' '.join(str(message).split())}", file=sys.stderr)


def read_profile(path: str) -> Profile:
    """A profile file: CSV (``.csv``, named after the file) or JSON (anything else)."""
    if path.lower().endswith(".csv"):
        return read_profile_csv(path, name=Path(path).stem)
    return Profile.read(path)


def write_profile(profile: Profile, path: str) -> None:
    if path.lower().endswith(".csv"):
        write_profile_csv(profile, path)
    else:
        profile.write(path)


__all__ = ["TIMELINE_HELP", "UsageError", "INTERRUPTED", "Kept", "plural"]
