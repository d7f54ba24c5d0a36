"""Pictures of schedules: timelines (Gantt charts) of one plan and comparison plots of sweeps.

Pure helpers compute what is drawn and are tested on their own:
:func:`timeline_bars` (every bar of a Gantt chart: the compute pieces, each message or
collective on its channel, the exposed communication), :func:`memory_steps` (the unsharded
bytes over a fully sharded step) and :func:`sweep_series` (one line per method of a sweep). :func:`plot_timeline` and :func:`plot_sweep` draw them with matplotlib and return
the figure; :func:`save_timeline` and :func:`save_sweep` write PNG or SVG files.

matplotlib is imported only inside the drawing functions; without it they raise an
``ImportError`` naming the ``plot`` extra (``pip install 'fusionopt[plot]'``). The pure
helpers need numpy only.

Times in the helpers' results are seconds from the start of the backward (of the forward on
a fully sharded step), as in :class:`~fusionopt.model.Timeline`; the pictures show
milliseconds.
"""

from fusionopt.viz._bars import Bar, memory_steps, timeline_bars
from fusionopt.viz._figures import IMAGE_FORMATS, image_format
from fusionopt.viz._series import SWEEP_METRICS, sweep_series
from fusionopt.viz._sweep import plot_sweep, save_sweep
from fusionopt.viz._timeline import ROW_COLORS, plot_timeline, save_timeline

__all__ = [
    "Bar", "IMAGE_FORMATS", "ROW_COLORS", "SWEEP_METRICS", "image_format", "memory_steps", "plot_sweep",
    "plot_timeline", "save_sweep", "save_timeline", "sweep_series", "timeline_bars",
]
