"""Ranks of a ``torch.distributed`` job on this host, each a Python process of its own.

:func:`run_rank_processes` starts ``python -m MODULE JOB RANK`` for every rank (``JOB`` a JSON
document the module's ``__main__`` reads), with fusionopt importable, each rank's output in
a log file of its own, and waits for them all. When a rank fails, time runs out, or the
caller is interrupted (Ctrl-C), every rank still running is stopped before it returns, so
none is left behind; a failure is one line naming the rank and the last line it wrote.
:func:`leave_rank` ends a rank's process once its work is written and every rank has passed
a barrier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The folder that holds the fusionopt package: ranks import fusionopt from there.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def run_rank_processes(module: str, job: dict[str, Any], ranks: int, *, what: str,
                       timeout: float | None = None) -> None:
    """Run ranks ``0`` to ``ranks - 1`` of ``job`` as ``python -m module JOB RANK`` until all
    have ended; ``what`` names the job in messages ("the mlp job").

    Raises
    ------
    RuntimeError
        When a rank exits with a non-zero status (the message names it and its last line of
        output), or when the ranks run over ``timeout`` seconds (None: no limit).
    """
    paths = [str(PACKAGE_PARENT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    deadline = None if timeout is None else time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as logs:
        outputs = [open(Path(logs) / f"rank{rank}.log", "w+b") for rank in range(ranks)]
        processes = [subprocess.Popen([sys.executable, "-m", module, json.dumps(job), str(rank)], env=env,
                                      stdout=output, stderr=subprocess.STDOUT) for rank, output in enumerate(outputs)]
        failed, codes = None, []
        try:
            while True:
                codes = [process.poll() for process in processes]
                failed = next((rank for rank, code in enumerate(codes) if code not in (None, 0)), None)
                if failed is not None or all(code == 0 for code in codes):
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise RuntimeError(f"{what} took over {timeout:g} s; stopped")
                time.sleep(0.05)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.terminate()
            for process in processes:
                process.wait()
            for output in outputs:
                output.close()
        if failed is not None:
            lines = (Path(logs) / f"rank{failed}.log").read_text(errors="replace").splitlines()
            last = next((line for line in reversed(lines) if line.strip()), "no output")
            raise RuntimeError(f"rank {failed} of {what} failed (exit status {codes[failed]}): {last}")


def leave_rank() -> None:
    """End this rank's process at once (status 0), its output flushed, without tearing its
    process group down: in torch 2.13 on gloo a rank sometimes aborts in that teardown
    ("terminate called without an active exception") after its work is done. Call it after
    the rank's results are written and a barrier has passed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
