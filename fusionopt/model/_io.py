"""JSON and CSV reading with clear errors, and atomic writing."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any


def read_json_document(path: str | Path) -> Any:
    """Parse the JSON file at ``path``, gzip-compressed or not (``.json.gz``, as torch's
    ``tensorboard_trace_handler`` writes traces); raise ``ValueError`` naming the file and
    the fault."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{path}: a folder, not a file") from None
    except PermissionError:
        raise PermissionError(f"{path}: not readable here (permission denied)") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: a gzip file that does not decompress ({exc}): truncated or damaged") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}): expected JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def write_text_atomic(path: str | Path, text: str, *, make_folder: bool = False) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically: see :func:`write_bytes_atomic`."""
    write_bytes_atomic(path, text.encode("utf-8"), make_folder=make_folder)


def write_bytes_atomic(path: str | Path, data: bytes, *, make_folder: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so a reader never sees a half-written file. The file gets the usual mode (``0666`` less
    the umask). ``make_folder`` creates a missing folder."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if make_folder:
        directory.mkdir(parents=True, exist_ok=True)
    if not directory.is_dir():
        raise FileNotFoundError(f"{path}: folder {directory} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a folder, not a file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:       # name the user's file, not the hidden temporary one
        raise type(exc)(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and not str(exc).startswith(str(path)):
            raise type(exc)(f"{path}: cannot write ({exc.strerror or exc})") from None
        raise


def write_json_atomic(path: str | Path, document: Any) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically."""
    write_text_atomic(path, json.dumps(document, indent=1) + "\n")


def read_csv_rows(path: str | Path) -> list[tuple[int, list[str]]]:
    """Parse the CSV file at ``path`` into ``(line number, cells)`` pairs, blank lines left out.

    Line numbers count from 1 at the file's first line, as an editor shows them. A byte-order
    mark is skipped. Raises ``FileNotFoundError`` or ``ValueError`` naming the file.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}): expected CSV") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[int, list[str]]] = []
    try:
        start = 1
        for cells in reader:
            if any(cell.strip() for cell in cells):
                rows.append((start, cells))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ValueError(f"{path}: malformed CSV at line {reader.line_num}: {exc}") from None
    return rows


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    """``header`` and ``rows`` as CSV text with ``\\n`` line ends (cells quoted where needed)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()
