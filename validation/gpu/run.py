"""Every GPU validation of the project, in one command, within a time budget.

Runs where one CUDA GPU is (torch, CuPy, NCCL, numpy and scipy; OR-Tools may be missing:
nothing here needs it), each stage a process of its own with its share of what is left of the
budget among the stages still to run (time a stage does not use goes to the later ones):

1. ``tests``: the GPU tests (``tests/executor/test_executor_nccl.py``,
   ``tests/executor/test_executor_sharded.py``, and the emulated link's holds on a CUDA
   stream, ``tests/integrations/test_emulated_link_cuda.py``), their summary kept as
   ``gpu-tests.txt``;
2. ``hardware-spin`` and ``hardware-gemm``: ``validation/hardware/run.py --backend nccl`` on
   an emulated 100 Gb InfiniBand link of 8 workers, compute as exact spin kernels and as
   GEMMs that share the GPU with NCCL (``nccl-gpu-spin``, ``nccl-gpu-gemm``);
3. ``contention``: ``fusionopt calibrate --contention`` on the GPU
   (``contention-calibration-gpu.json``: how much GEMMs and messages slow each other); then
   ``contention-check``: ``validation/hardware/contention.py`` predicts this run's GEMM run
   with the factors fitted on the stored runs (as they were when the command started: with
   the default ``--out`` the hardware stages rewrite them) and with this calibration, fitting
   nothing on it (``contention-gpu``, with each run's excess beside its message counts and, from
   ``nccl-gpu-gemm``, the host's time to queue each step);
4. ``training``: ``validation/training/run.py --backend nccl --ranks 1``, plans trained on one
   GPU over an emulated link (``training-gpu``);
5. ``profiles``: ``validation/profiles/run.py`` over twelve zoo models at batch 32
   (``profiles-gpu``, and the measured profiles under ``measured/``);
6. ``wire``: ``validation/wire/executor.py`` on the GPU over an emulated 100 Gb InfiniBand
   link of 8 workers: DDP's buckets, the exact DP and the joint optimum of grouping and
   encoding, each message sent in fp32 or fp16 as the model prices it, measured against
   predicted (``wire-executor-nccl-gpu``; never yet run on a GPU);
7. ``speedup``: ``validation/frameworks/speedup.py --backend nccl`` on one rank: DDP's
   defaults against ``advise``'s buckets for the MLP and the transformer over an emulated
   10 GbE link of 64 workers, every bucket held on a CUDA stream of the link's (FSDP2 sends
   no collective on one rank, so it is left out; ``speedup-gpu``; never yet run on a GPU);
8. ``step``: ``validation/step/run.py`` on the GPU, fp32 and bf16 (``step-gpu``), last, with
   all the time left: on one H100 its 22 default cases take about 490 s, so the default
   budget runs part of them (``step-gpu.partial``, which names those not run; 12 of them
   on 2026-11-27, before the ``wire`` and ``speedup`` stages took their shares).

On 2026-11-27 on one H100 the default run's stages took 23, 24, 15, 4, 93, 65 and 231 s,
455 s in all (``validation/results/gpu-2026-11-27/run3``), before ``wire`` and ``speedup`` were added.

A stage that this checkout cannot run is listed as skipped, with why. Each stage writes its
own result files as it finishes, so a run stopped by the budget or by a kill keeps them;
``gpu-run.{json,md}`` (the stages, their status, seconds, and the machine) is rewritten after
every stage. Everything goes to ``--out`` (default ``validation/results``).

    python validation/gpu/run.py                       # under 8 minutes on one H100
    python validation/gpu/run.py --out OUT --budget 300 --stages tests,hardware-spin
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "validation" / "results"
sys.path.insert(0, str(ROOT))

from fusionopt.reporting import markdown_table, write_result  # noqa: E402

PROFILE_MODELS = ("resnet50,resnet101,vgg16,densenet121,mobilenet-v2,vit-b16,inception-v3,googlenet,bert-base,"
                  "bert-large,gpt2,lstm-lm")
HARDWARE = ["--backend", "nccl", "--emulate-network", "100gb-ib", "--workers", "8", "--iterations", "6",
            "--warmup", "2"]
# The stored GEMM and spin runs the contention check fits its factors on, copied to STORED
# when the command starts: with --out the stored results' folder, the hardware stages rewrite
# them, and factors fitted on the run they check would check nothing.
FITTED_ON = ("nccl-gpu-gemm.json", "nccl-gpu-spin.json")
# name -> (share of the budget, what it runs as arguments after the interpreter; OUT is the
# folder, STORED the copies of FITTED_ON, LIMIT the stage's seconds)
STAGES: dict[str, tuple[float, list[str]]] = {
    "tests": (0.11, ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/executor/test_executor_nccl.py",
                     "tests/executor/test_executor_sharded.py", "tests/integrations/test_emulated_link_cuda.py"]),
    "hardware-spin": (0.10, ["validation/hardware/run.py", *HARDWARE, "--compute", "spin", "--output-dir", "OUT"]),
    "hardware-gemm": (0.06, ["validation/hardware/run.py", *HARDWARE, "--compute", "gemm", "--output-dir", "OUT"]),
    "contention": (0.06, ["-m", "fusionopt", "calibrate", "--backend", "nccl", "--contention",
                          "--output", "OUT/contention-calibration-gpu.json"]),
    "contention-check": (0.02, ["validation/hardware/contention.py", "--check", "OUT/nccl-gpu-gemm.json",
                                "--calibration", "OUT/contention-calibration-gpu.json", "--output-dir", "OUT",
                                "--gemm", "STORED/nccl-gpu-gemm.json", "--spin", "STORED/nccl-gpu-spin.json"]),
    "training": (0.20, ["validation/training/run.py", "--backend", "nccl", "--ranks", "1", "--out", "OUT"]),
    "profiles": (0.13, ["validation/profiles/run.py", "--device", "cuda", "--zoo-device", "h100", "--models",
                        PROFILE_MODELS, "--steps", "10", "--warmup", "3", "--profiles-dir", "OUT/measured",
                        "--output-dir", "OUT"]),
    "wire": (0.13, ["validation/wire/executor.py", "--backend", "nccl", "--emulate-network", "100gb-ib",
                    "--workers", "8", "--out", "OUT"]),
    "speedup": (0.08, ["validation/frameworks/speedup.py", "--backend", "nccl", "--models", "mlp,transformer",
                       "--networks", "10gbe", "--rounds", "12", "--steps", "2", "--out", "OUT"]),
    # Last: it takes what the others left (on one H100 on 2026-11-27, before wire, 12 of its 22 default cases).
    "step": (0.11, ["validation/step/run.py", "--device", "cuda", "--out", "OUT", "--time-limit", "LIMIT"]),
}


def _help_mentions(arguments: list[str], flag: str) -> bool:
    """Whether the script or command that ``arguments`` start takes ``flag`` (from its --help)."""
    head = arguments[:3] if arguments[0] == "-m" else arguments[:1]
    if arguments[:2] == ["-m", "pytest"]:
        return True
    try:
        shown = subprocess.run([sys.executable, *head, "--help"], capture_output=True, text=True, timeout=120,
                               cwd=ROOT).stdout
    except subprocess.TimeoutExpired:
        return False
    return flag in shown


def stage_seconds(left: float, share: float, shares_left: float) -> float:
    """A stage's seconds: its share of what is left of the budget among the stages still to
    run, so the time an earlier stage did not use goes to the later ones."""
    return max(0.0, left) * share / shares_left


def why_not(name: str, arguments: list[str], gpu: bool) -> str | None:
    """Why this checkout or machine cannot run a stage, or None."""
    if not gpu:
        return "no CUDA GPU here"
    needs = {"training": "--ranks", "contention": "--contention"}
    if name in needs and not _help_mentions(arguments, needs[name]):
        return f"{' '.join(arguments[:3] if arguments[0] == '-m' else arguments[:1])} takes no {needs[name]} yet"
    return None


def machine() -> dict[str, Any]:
    found: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "python": platform.python_version()}
    try:
        import torch

        found["torch"] = str(torch.__version__)
        if torch.cuda.is_available():
            found["gpu"] = torch.cuda.get_device_name(0)
            found["cuda"] = torch.version.cuda
            found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except ImportError:
        found["torch"] = None
    try:
        import cupy

        found["cupy"] = cupy.__version__
    except ImportError:
        found["cupy"] = None
    return found


def run_stage(arguments: list[str], seconds: float, log: Path) -> tuple[str, float]:
    """Run one stage in its own process group for at most ``seconds``; its output to ``log``."""
    started = time.perf_counter()
    with log.open("w") as sink:
        # The checkout's package, whether or not it is installed on the machine.
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        process = subprocess.Popen([sys.executable, *arguments], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True, env={**os.environ, "PYTHONPATH": path})
        try:
            code = process.wait(timeout=seconds)
            status = "passed" if code == 0 else f"failed (exit {code})"
        except subprocess.TimeoutExpired:
            status = f"stopped at its budget of {seconds:.0f} s"
            _end(process)
        except KeyboardInterrupt:
            _end(process)
            raise
    return status, time.perf_counter() - started


def _end(process: subprocess.Popen) -> None:
    """Interrupt the stage's whole process group, then kill what is left after 10 s."""
    for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def markdown(document: dict[str, Any]) -> str:
    hw = document["machine"]
    lines = ["# The GPU validations, one command", "",
             f"{document['date']}; {hw.get('gpu') or 'no GPU'}; torch {hw.get('torch')}, CUDA {hw.get('cuda')}, "
             f"NCCL {hw.get('nccl')}, CuPy {hw.get('cupy')}; {hw['cores']} cores; budget {document['budget']} s. "
             f"Written by `{document['command']}`.", ""]
    rows = [[s["stage"], s["status"], "-" if s.get("seconds") is None else f"{s['seconds']:.0f}", s.get("log", "-")]
            for s in document["stages"]]
    lines += markdown_table(["stage", "status", "seconds", "log"], rows)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS), help="folder of every result file")
    parser.add_argument("--budget", type=float, default=470.0, help="seconds for all stages (default 470)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of: {', '.join(STAGES)}")
    args = parser.parse_args(argv)
    chosen = args.stages.split(",")
    unknown = [s for s in chosen if s not in STAGES]
    if unknown:
        parser.error(f"--stages: unknown {unknown[0]!r}: choose from {', '.join(STAGES)}")
    if not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget}")
    out = Path(args.out).resolve()
    logs = out / "gpu-logs"
    logs.mkdir(parents=True, exist_ok=True)
    hw = machine()
    gpu = bool(hw.get("gpu"))
    from fusionopt.reporting import command_line

    document: dict[str, Any] = {"schema": "fusionopt.validation.gpu", "version": 1, "machine": hw,
                                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                "command": command_line("validation/gpu/run.py", argv, args.out),
                                "budget": args.budget, "stages": []}
    started = time.perf_counter()
    code = 0
    stored = tempfile.TemporaryDirectory(prefix="fusionopt-gpu-")
    for name in FITTED_ON:
        if (RESULTS / name).is_file():
            shutil.copyfile(RESULTS / name, Path(stored.name) / name)
    try:
        for k, name in enumerate(chosen):
            share, template = STAGES[name]
            left = args.budget - (time.perf_counter() - started)
            seconds = stage_seconds(left, share, sum(STAGES[s][0] for s in chosen[k:]))
            limit = max(1, int(seconds * 0.85))
            arguments = [a.replace("OUT", str(out)).replace("STORED", stored.name).replace("LIMIT", str(limit))
                         for a in template]
            reason = why_not(name, arguments, gpu)
            entry: dict[str, Any] = {"stage": name}
            if reason:
                entry.update(status=f"skipped: {reason}")
            elif seconds < 5:
                entry.update(status="skipped: the budget is spent")
            else:
                log = logs / f"{name}.txt"
                entry["log"] = str(log.relative_to(out))
                entry["status"], entry["seconds"] = run_stage(arguments, seconds, log)
                if name == "tests":
                    shutil.copyfile(log, out / "gpu-tests.txt")
            document["stages"].append(entry)
            print(f"{name}: {entry['status']}", file=sys.stderr, flush=True)
            write_result(out, "gpu-run", document, markdown(document))
    except KeyboardInterrupt:
        print("interrupted: the finished stages' files are kept", file=sys.stderr)
        code = 130
    finally:
        stored.cleanup()
    return code


if __name__ == "__main__":
    sys.exit(main())
