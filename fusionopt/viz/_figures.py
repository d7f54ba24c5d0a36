"""What every picture shares: matplotlib imported on demand (an ``ImportError`` naming the
``plot`` extra without it), figures, image formats and atomic writes of image files."""

from __future__ import annotations

import io
import numbers
import os
from typing import Sequence

from fusionopt.model._io import write_bytes_atomic


IMAGE_FORMATS = ("png", "svg")

IMAGE_CREATOR = "fusionopt"
"""The creator every image fusionopt writes names in its metadata (a PNG's ``Software`` text,
an SVG's ``dc:creator``), by which a command knows an image it may replace."""


def written_by_fusionopt(data: bytes) -> bool:
    """Whether ``data``, the start of an image file (its first 4 KiB suffice), names fusionopt
    as its creator, as :func:`write_figure` writes it."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return b"tEXtSoftware\x00" + IMAGE_CREATOR.encode() in data
    return f"<dc:title>{IMAGE_CREATOR}</dc:title>".encode() in data and b"<svg" in data


# ============================================================================ drawing
def import_matplotlib():
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("fusionopt's plots need matplotlib: pip install 'fusionopt[plot]'") from exc
    return matplotlib


def new_figure(figsize: tuple[float, float], managed: bool):
    """A figure: through pyplot when the caller gets it back (so ``plt.show()`` works), else
    a bare figure that nothing keeps alive (saving renders it with Agg or the SVG backend,
    whatever the display)."""
    import_matplotlib()
    if managed:
        import matplotlib.pyplot as plt

        return plt.figure(figsize=figsize)
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def image_format(path: str | os.PathLike) -> str:
    """The image format of an output file, by its extension: ``"png"`` or ``"svg"``.

    Examples
    --------
    >>> image_format("docs/timeline.SVG")
    'svg'
    >>> image_format("timeline.pdf")
    Traceback (most recent call last):
    ...
    ValueError: timeline.pdf: unknown image format .pdf: write .png or .svg
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in IMAGE_FORMATS:
        raise ValueError(f"{path}: unknown image format {'.' + ext if ext else '(no extension)'}: "
                         "write .png or .svg")
    return ext


def image_paths(path: str | os.PathLike | Sequence[str | os.PathLike]) -> list[tuple[str, str]]:
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if not paths:
        raise ValueError("no output file given: name a .png or .svg file")
    return [(os.fspath(p), image_format(p)) for p in paths]


# Beyond this a figure's PNG runs to gigabytes (and matplotlib runs out of memory).
MAX_DPI = 2400


def write_figure(fig, paths: list[tuple[str, str]], dpi: float) -> list[str]:
    """Render ``fig`` to each path atomically (a temporary file in the same folder, then
    ``os.replace``)."""
    import matplotlib

    if isinstance(dpi, bool) or not (isinstance(dpi, numbers.Real) and 0 < dpi <= MAX_DPI):
        raise ValueError(f"dpi must be a number in (0, {MAX_DPI}], got {dpi!r} (a print-quality PNG needs 300)")
    written = []
    for path, ext in paths:
        buffer = io.BytesIO()
        # A fixed hash salt and no date keep an SVG of the same figure byte-identical; the
        # creator, without a version, marks the image as one a command may replace.
        with matplotlib.rc_context({"svg.hashsalt": "fusionopt"}):
            fig.savefig(buffer, format=ext, dpi=dpi, bbox_inches="tight",
                        metadata={"Date": None, "Creator": IMAGE_CREATOR} if ext == "svg"
                        else {"Software": IMAGE_CREATOR})
        write_bytes_atomic(path, buffer.getvalue())
        written.append(path)
    return written


def to_ms(seconds: float) -> str:
    return f"{1e3 * seconds:.4g}"


def label_fits(text: str, width_in: float, fontsize: float) -> bool:
    # DejaVu Sans averages about 0.6 em per character; keep a margin on both sides.
    return len(text) * 0.6 * fontsize / 72 + 6 / 72 <= width_in


__all__ = ["IMAGE_CREATOR", "IMAGE_FORMATS", "image_format", "MAX_DPI", "written_by_fusionopt"]
