"""The whole training step on one device: the plain step measured, against the step each of
fusionopt's two measuring routes predicts.

For each case (a model, a batch, a precision), on one device (``--device cuda`` or ``cpu``):

* **measured, plain**: the median period of a plain training step (``zero_grad``, forward,
  the sum of the output as the loss, backward, SGD with momentum), synchronised, no hook,
  no profiler: ``--steps`` steps after ``--warmup``;
* **hooks**: :func:`fusionopt.integrations.profile_model` with the step's optimiser,
  then the one-worker step of that profile (``wfbp`` on a free network): the profile's own
  step. ``profile_model`` reconciles its hooked steps with plain steps it times itself; the
  period its hooked steps took before that is shown beside it (``hooked``). Its plain steps
  are another run than the measured ones above, taken minutes apart, so the error shows how
  well a profile taken once stands for the job, not a fit;
* **traced**: the same model as a one-rank ``DistributedDataParallel`` job (NCCL on a GPU,
  gloo on the CPU) under ``torch.profiler`` (CPU and CUDA activities, shapes recorded),
  read back by :func:`fusionopt.integrations.predict_traced_step`: the traced
  job's step as predicted, the traced steps' measured period, and the same DDP job's
  plain (unprofiled) period, measured after the trace.

``bf16`` runs the forward and the loss under ``torch.autocast(dtype=torch.bfloat16)``, as
mixed-precision training does (``profile_model`` gets the model wrapped so).

Writes ``validation/results/step-<gpu|cpu>.{json,md}`` for the default cases; any other
selection (``--cases``, ``--precision``, ``--routes``, fewer ``--steps``) writes
``step-<gpu|cpu>.subset.{json,md}`` beside it. The result so far is rewritten after every
case, so a run stopped by ``--time-limit``, by Ctrl-C or by a kill keeps what finished.
Timings of the machine that ran it.

    python validation/step/run.py                                   # cuda when there is one
    python validation/step/run.py --device cpu --cases mlp:32 --routes hooks
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

from fusionopt.reporting import markdown_table, write_result  # noqa: E402

# The cases measured on a GPU: (model, batch), each in every precision asked for.
GPU_CASES = ("resnet50:64,resnet50:128,resnet50:256,densenet121:64,mobilenet-v2:128,inception-v3:64,"
             "bert-base:32,bert-large:16,gpt2:8,gpt2-medium:4,vit-b16:64")
# On a CPU: the small models of the trace validation (host-bound, as small layers are).
CPU_CASES = "mlp:32,cnn:16,lstm:16"
PRECISIONS = ("fp32", "bf16")
ROUTES = ("hooks", "traced")
DEFAULTS = {"steps": 20, "warmup": 5, "profile_steps": 10}


def parse_cases(text: str) -> list[tuple[str, int]]:
    """``"resnet50:64,mlp:32"`` -> ``[("resnet50", 64), ("mlp", 32)]``; a ValueError naming a bad one."""
    cases = []
    for item in text.split(","):
        name, _, batch = item.strip().partition(":")
        if not name or not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"--cases: {item!r} is not MODEL:BATCH with a positive batch")
        cases.append((name, int(batch)))
    return cases


def _positive(flag: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be a positive integer, got {value}")
        return value
    return convert


def build(name: str, torch: Any) -> tuple[Any, Callable[[int, Any], Any]]:
    """(model, inputs for a batch on a device) of a zoo model or a small model; a ValueError
    when it cannot be built here."""
    from fusionopt.integrations import SMALL_INPUTS, small_model
    from models import builder

    if name in SMALL_INPUTS:
        shape = SMALL_INPUTS[name]
        return small_model(name), lambda batch, device: torch.randn(batch, *shape, device=device)
    made = builder(name, torch)
    if made is None:
        raise ValueError(f"{name}: cannot be built here (needs torchvision or transformers, or is not a zoo model)")
    return made[0](), made[1]


class Precision:
    """The step's precision: fp32, or bf16 autocast around the forward and the loss."""

    def __init__(self, torch: Any, device: Any, name: str) -> None:
        self.torch, self.device, self.name = torch, device, name

    def autocast(self) -> Any:
        return self.torch.autocast(self.device.type, dtype=self.torch.bfloat16, enabled=self.name == "bf16")

    def wrap(self, model: Any) -> Any:
        """The model with its forward under this precision's autocast (for ``profile_model``)."""
        if self.name == "fp32":
            return model
        precision = self

        class Autocast(self.torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = model

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                with precision.autocast():
                    return self.inner(*args, **kwargs)

        return Autocast()


def _call(model: Any, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def plain_step(model: Any, inputs: Any, optimizer: Any, precision: Precision) -> None:
    from models import loss_of

    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        loss = loss_of(_call(model, inputs))
    loss.backward()
    optimizer.step()


def _recorded(event: Any) -> Any:
    event.record()
    return event


def measure(step: Callable[[], None], sync: Callable[[], None], steps: int, warmup: int,
            event: Callable[[], Any] | None = None) -> dict[str, float]:
    """Median, min and max period of ``step`` in seconds on the host's clock, synchronised
    after each; with ``event`` (a timing CUDA event's maker) also ``events_median``, the same
    steps from an event recorded before each to one recorded after it, as ``profile_model``
    times its plain steps: the device's span, without the host's time before its first
    kernel and after the last."""
    for _ in range(warmup):
        step()
    sync()
    periods, spans = [], []
    for _ in range(steps):
        started = time.perf_counter()
        first = event() if event is not None else None
        step()
        last = event() if event is not None else None
        sync()
        periods.append(time.perf_counter() - started)
        if first is not None:
            spans.append(first.elapsed_time(last) / 1e3)
    found = {"median": statistics.median(periods), "min": min(periods), "max": max(periods)}
    if spans:
        found["events_median"] = statistics.median(spans)
    return found


def hooks_route(model: Any, inputs: Any, optimizer: Any, precision: Precision, name: str, batch: int,
                steps: int) -> dict[str, Any]:
    from fusionopt.model import Problem
    from fusionopt.solvers import solve
    from fusionopt.cost import AlphaBeta
    from fusionopt.integrations import profile_model
    from models import loss_of

    profile = profile_model(precision.wrap(model), inputs, loss_fn=loss_of, steps=steps, warmup=3,
                            device=precision.device, batch=batch, name=name, optimizer=optimizer)
    predicted = solve(Problem(profile, AlphaBeta(0.0, 0.0)), "wfbp").iteration_time
    return {"predicted": predicted, "hooked": profile.metadata["step_hooked"]["period"],
            "parts": {k: float(v) for k, v in dict(profile.parts).items()}, "n": profile.n,
            "reconciled": profile.metadata["reconciled"]}


def traced_route(model: Any, inputs: Any, precision: Precision, folder: Path, sync: Callable[[], None],
                 steps: int, warmup: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from fusionopt.integrations import (
        measure_profiler_cost, PARAMETERS_FILE, predict_traced_step, UNPROFILED_FILE, write_profiler_cost,
    )
    from fusionopt.reporting import write_json_atomic

    torch = precision.torch
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["name,size_bytes"] + [f"{n},{p.numel() * p.element_size()}" for n, p in model.named_parameters()
                                  if p.requires_grad]
    (folder / PARAMETERS_FILE).write_text("\n".join(rows) + "\n")
    gpu = precision.device.type == "cuda"
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[precision.device.index or 0] if gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9)
    for _ in range(3):
        plain_step(ddp, inputs, optimizer, precision)
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    # The profiler's cost per recorded event on this host, now: what the unprofiled step is predicted with.
    write_profiler_cost(folder, measure_profiler_cost(precision.device))
    handler = tensorboard_trace_handler(str(folder), worker_name="rank0", use_gzip=True)
    with profile(activities=activities, record_shapes=True, schedule=schedule(wait=1, warmup=1, active=6),
                 on_trace_ready=handler) as prof:
        for _ in range(8):
            plain_step(ddp, inputs, optimizer, precision)
            prof.step()
    sync()
    unprofiled = measure(lambda: plain_step(ddp, inputs, optimizer, precision), sync, steps, warmup)
    write_json_atomic(folder / UNPROFILED_FILE, {        # the check of the prediction, never its input
        "ddp_plain_median": unprofiled["median"], "steps": steps,
        "source": {"what": "the traced DDP job's plain steps after the trace, synchronised, median",
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "machine": ", ".join(f"{k} {v}" for k, v in hardware(torch, precision.device).items())}})
    step = predict_traced_step(folder)
    row = {"predicted": step.predicted, "measured_in_trace": step.measured, "unprofiled": unprofiled["median"],
           "predicted_parts": dict(step.predicted_parts), "measured_parts": dict(step.measured_parts),
           "buckets": len(step.plan.groups())}
    row.update(predicted_unprofiled=step.predicted_unprofiled, unprofiled_parts=dict(step.unprofiled_parts),
               profiler_cost=step.profiler_cost.seconds_per_event)
    return row


def hardware(torch: Any, device: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                             "torch": str(torch.__version__)}
    if device.type == "cuda":
        found["gpu"] = torch.cuda.get_device_name(device)
        found["cuda"] = torch.version.cuda
    return found


def _ms(seconds: Any) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.2f}"


def _error(predicted: Any, measured: Any) -> str:
    return "-" if predicted is None or not measured else f"{100 * (predicted - measured) / measured:+.1f}%"


def markdown(document: dict[str, Any]) -> str:
    hw = document["hardware"]
    where = hw.get("gpu") or hw["cpu"]
    lines = [f"# The whole step on one device: measured against predicted ({where})", "",
             f"{document['date']}; torch {hw['torch']}; {document['steps']} plain steps after {document['warmup']} "
             f"per measurement; `profile_model` over {document['profile_steps']} steps. Timings of that machine. "
             f"Written by `{document['command']}`.", ""]
    header = ["model", "batch", "precision", "plain, measured (ms)", "plain, device events (ms)",
              "hooks: predicted (ms)", "error",
              "hooked period, measured (ms)", "traced: predicted (ms)", "traced period, measured (ms)",
              "DDP unprofiled, measured (ms)", "predicted unprofiled (ms)", "error vs unprofiled"]
    rows = []
    for row in document["cases"]:
        if "error" in row:
            rows.append([row["model"], row["batch"], row["precision"], f"not run: {row['error']}"] + [""] * 9)
            continue
        plain = row["measured"]["median"]
        hooks, traced = row.get("hooks", {}), row.get("traced", {})
        rows.append([row["model"], row["batch"], row["precision"], _ms(plain),
                     _ms(row["measured"].get("events_median")),
                     _ms(hooks.get("predicted")) if "failed" not in hooks else f"failed: {hooks['failed']}",
                     _error(hooks.get("predicted"), plain), _ms(hooks.get("hooked")),
                     _ms(traced.get("predicted")) if "failed" not in traced else f"failed: {traced['failed']}",
                     _ms(traced.get("measured_in_trace")), _ms(traced.get("unprofiled")),
                     _ms(traced.get("predicted_unprofiled")),
                     _error(traced.get("predicted_unprofiled"), traced.get("unprofiled"))])
    lines += markdown_table(header, rows)
    errors = [abs(r["hooks"]["predicted"] - r["measured"]["median"]) / r["measured"]["median"]
              for r in document["cases"] if "predicted" in r.get("hooks", {})]
    lines += ["", "Measured: the plain step (on the host's clock, synchronised after each; on a GPU also from an "
              "event before it to one after it, as `profile_model` times its own plain steps), the hooked "
              "period, the traced period and the unprofiled DDP step. "
              "Predicted: the hooks route's one-worker step (the profile `profile_model` writes, reconciled with "
              "plain steps of its own, another run than the plain step measured here) and the traced route's "
              "step (from the traces alone) and, where the reader gives it, the unprofiled step it predicts. "
              "`-`: not measured or not predicted."]
    if errors:
        lines += ["", f"hooks route: largest |error| {100 * max(errors):.1f}%, median "
                      f"{100 * statistics.median(errors):.1f}% over {len(errors)} cases."]
    if document.get("not_run"):
        lines += ["", f"Not run (time limit {document['time_limit']} s): "
                      + ", ".join(f"{m}:{b} {p}" for m, b, p in document["not_run"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when there is one")
    parser.add_argument("--cases", help=f"MODEL:BATCH,... (default on a GPU: {GPU_CASES}; on a CPU: {CPU_CASES})")
    parser.add_argument("--precision", default=None, help="fp32,bf16 (default: both on a GPU, fp32 on a CPU)")
    parser.add_argument("--routes", default=",".join(ROUTES), help="hooks,traced (default both)")
    parser.add_argument("--steps", type=_positive("--steps"), default=DEFAULTS["steps"])
    parser.add_argument("--warmup", type=_positive("--warmup"), default=DEFAULTS["warmup"])
    parser.add_argument("--profile-steps", type=_positive("--profile-steps"), default=DEFAULTS["profile_steps"])
    parser.add_argument("--time-limit", type=_positive("--time-limit"), help="start no case after this many seconds")
    parser.add_argument("--traces", help="keep the traced jobs' traces under this folder (default: a temporary one)")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    # What the command line gave is checked before torch is imported (seconds); the defaults,
    # which depend on the device, after.
    precisions = args.precision.split(",") if args.precision else []
    routes = args.routes.split(",")
    try:
        cases = parse_cases(args.cases) if args.cases else []
    except ValueError as exc:
        parser.error(str(exc))
    for flag, chosen, known in (("--precision", precisions, PRECISIONS), ("--routes", routes, ROUTES)):
        unknown = [c for c in chosen if c not in known]
        if unknown:
            parser.error(f"{flag}: unknown {unknown[0]!r}: choose from {', '.join(known)}")
    try:
        import torch
    except ImportError:
        parser.error("needs torch (pip install 'fusionopt[torch]')")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    gpu = device.type == "cuda"
    cases = cases or parse_cases(GPU_CASES if gpu else CPU_CASES)
    precisions = precisions or (["fp32", "bf16"] if gpu else ["fp32"])
    default_run = (args.cases is None and args.precision is None and routes == list(ROUTES)
                   and (args.steps, args.warmup, args.profile_steps) == tuple(DEFAULTS.values()))
    stem = f"step-{'gpu' if gpu else 'cpu'}" + ("" if default_run else ".subset")

    import torch.distributed as dist

    from fusionopt.integrations import free_port
    from fusionopt.reporting import command_line

    sync = (lambda: torch.cuda.synchronize(device)) if gpu else (lambda: None)
    event = (lambda: _recorded(torch.cuda.Event(enable_timing=True))) if gpu else None
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.step", "version": 1, "device": str(device), "hardware": hardware(torch, device),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line("validation/step/run.py", argv, args.out), "steps": args.steps,
        "warmup": args.warmup, "profile_steps": args.profile_steps, "routes": routes,
        "time_limit": args.time_limit, "complete": False, "cases": [], "not_run": []}
    started = time.perf_counter()
    todo = [(name, batch, precision) for name, batch in cases for precision in precisions]
    traces = Path(args.traces) if args.traces else Path(tempfile.mkdtemp(prefix="fusionopt-step-"))
    code = 0
    try:
        for k, (name, batch, precision_name) in enumerate(todo):
            if args.time_limit and time.perf_counter() - started > args.time_limit:
                document["not_run"] = [list(case) for case in todo[k:]]
                write_result(args.out, stem + ".partial", document, markdown(document))
                break
            row: dict[str, Any] = {"model": name, "batch": batch, "precision": precision_name}
            precision = Precision(torch, device, precision_name)
            try:
                torch.manual_seed(0)
                model, inputs_for = build(name, torch)
                model = model.to(device).train()
                inputs = inputs_for(batch, device)
                optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
                row["measured"] = measure(lambda: plain_step(model, inputs, optimizer, precision), sync,
                                          args.steps, args.warmup, event)
                for route in routes:
                    try:
                        if route == "hooks":
                            row[route] = hooks_route(model, inputs, optimizer, precision, name, batch,
                                                     args.profile_steps)
                        else:
                            row[route] = traced_route(model, inputs, precision,
                                                      traces / precision_name / f"{name}-b{batch}", sync,
                                                      args.steps, args.warmup)
                    except Exception as exc:  # noqa: BLE001 - one route failing is a result of the run
                        row[route] = {"failed": f"{type(exc).__name__}: {exc}",
                                      "trace": traceback.format_exc()[-1500:]}
            except ValueError as exc:
                row["error"] = str(exc)
            document["cases"].append(row)
            print(f"{name} b{batch} {precision_name}: plain {_ms(row.get('measured', {}).get('median'))} ms, "
                  f"hooks {_ms(row.get('hooks', {}).get('predicted'))} ms, "
                  f"traced {_ms(row.get('traced', {}).get('predicted'))} ms", file=sys.stderr, flush=True)
            write_result(args.out, stem + ".partial", document, markdown(document))
            model = optimizer = inputs = None          # unbound where the case could not be built
            if gpu:
                torch.cuda.empty_cache()
        else:
            document["complete"] = True
    except KeyboardInterrupt:
        print(f"interrupted: the {len(document['cases'])} finished case(s) are in "
              f"{Path(args.out) / (stem + '.partial.md')}", file=sys.stderr)
        code = 130
    finally:
        dist.destroy_process_group()
    if document["complete"]:
        write_result(args.out, stem, document, markdown(document))
        for suffix in (".json", ".md"):
            (Path(args.out) / f"{stem}.partial{suffix}").unlink(missing_ok=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
