"""Measured PyTorch profiles of zoo models beside the zoo's profiles of them.

For each model that PyTorch can build here (the LSTM language model from ``torch.nn`` alone;
the CNNs and ViT when torchvision is installed; BERT and GPT-2 when transformers is, built
from their configurations, no download), the script measures per-tensor forward and
backward times with :func:`fusionopt.integrations.profile_model` (hooks, medians of
``--steps`` steps, CUDA events on a GPU), checks that the measured tensors' names, forward
order and byte sizes equal the zoo architecture's exactly (and its ready and registration
orders: the order the gradient hooks fire, and ``named_parameters()`` order), and sets the
measured compute beside the
zoo's profile of the same model on the chosen zoo device preset (``zoo.profile``'s default,
calibrated compute; the compute model is named in the result).

Writes each measured profile as JSON (device, torch version, batch and date in its
metadata) to ``--profiles-dir`` as ``<model>-<hardware>-b<batch>.json`` (default: the zoo's
``fusionopt/zoo/measured/``, read by ``fusionopt.zoo.measured_profile``; ``hardware`` is
``cpu`` or the GPU's short name, e.g. ``h100``; ``--profiles-dir ""`` keeps none), and the
comparison, with the versions of torch, torchvision and transformers, to
``validation/results/profiles-<cpu|gpu>.{json,md}``.

    python validation/profiles/run.py --device cuda --zoo-device h100          # on a GPU
    python validation/profiles/run.py --device cpu --models lstm-lm --steps 3  # smoke run
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt import zoo  # noqa: E402
from fusionopt.integrations import profile_model, require_torch  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, interrupted_path, nonnegative_int, positive_int,  # noqa: E402
                                 subset_location, write_result)
from fusionopt.zoo import MEASURED_DIR  # noqa: E402

sys.path.insert(0, str(ROOT / "validation"))
from models import DEFAULT_MODELS, buildable, loss_of, zoo_names  # noqa: E402

# The arguments, beside the defaults, of the runs that made the stored results and the zoo's
# measured profiles (validation/README.md).
STORED = {
    "gpu": {"device": "cuda", "zoo_device": "h100", "batch": 32, "steps": 10, "warmup": 3,
            "models": "resnet50,resnet101,vgg16,densenet121,mobilenet-v2,vit-b16,inception-v3,googlenet,bert-base,"
                      "bert-large,gpt2,lstm-lm"},
    "cpu": {"device": "cpu", "zoo_device": "v100", "batch": 2, "steps": 3, "warmup": 1,
            "models": "resnet18,resnet50,resnet101,resnet152,vgg16,vgg19,alexnet,googlenet,inception-v3,densenet121,"
                      "densenet201,mobilenet-v2,vit-b16,bert-base,bert-large,gpt2,gpt2-medium,lstm-lm"},
}

def hardware_tag(gpu_name: str) -> str:
    """A short lower-case tag of a GPU's name: "NVIDIA H100 80GB HBM3" -> "h100"."""
    for word in gpu_name.replace("NVIDIA", "").split():
        if any(ch.isdigit() for ch in word):
            return word.lower().replace("-", "")
    return gpu_name.split()[-1].lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="torch device to measure on (default cuda)")
    parser.add_argument("--zoo-device", default="h100", help="zoo preset to compare with (default h100)")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--batch", type=positive_int, default=32, help="per-worker batch (default 32)")
    parser.add_argument("--steps", type=positive_int, default=20, help="timed steps; medians taken (default 20)")
    parser.add_argument("--warmup", type=nonnegative_int, default=5)
    parser.add_argument("--profiles-dir", default=str(MEASURED_DIR),
                        help='where the measured profiles go (default the zoo\'s; "" keeps none)')
    parser.add_argument("--output-dir", default=str(ROOT / "validation" / "results"))
    args = parser.parse_args(argv)
    try:
        models = zoo_names(args.models)
    except ValueError as exc:
        parser.error(str(exc))

    torch = require_torch()
    load_before = os.getloadavg()[0]
    device = torch.device(args.device)
    label = "gpu" if device.type == "cuda" else "cpu"
    changed = changed_options(parser, args, reference=STORED[label], leave=("output_dir", "profiles_dir"))
    args.output_dir = subset_location(args.output_dir, parser.get_default("output_dir"), changed, folder=True)
    if changed and args.profiles_dir and Path(args.profiles_dir).resolve() == MEASURED_DIR.resolve():
        args.profiles_dir = str(Path(args.output_dir) / "profiles")
        print(f"{', '.join(changed)}: not the zoo's measured profiles' arguments: writing the profiles to "
              f"{args.profiles_dir} (the zoo's are left as they were)", file=sys.stderr)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    short = hardware_tag(hardware) if device.type == "cuda" else "cpu"
    with Progress(interrupted_path(Path(args.output_dir) / f"profiles-{label}.md")) as progress:
        progress.stage("models", total=len(models))
        rows, skipped = [], []
        zoo_compute = None
        for name, build, inputs in buildable(models, torch, progress, skipped):
            model = build().to(device).train()
            started = time.perf_counter()
            measured = profile_model(model, inputs(args.batch, device), loss_fn=loss_of, steps=args.steps,
                                     warmup=args.warmup, device=device, batch=args.batch, name=name)
            seconds = time.perf_counter() - started
            estimate = zoo.profile(name, device=args.zoo_device, batch=args.batch, order=device.type)
            zoo_compute = estimate.metadata.get("compute")
            same_tensors = (measured.names == estimate.names
                            and measured.sizes.tolist() == estimate.sizes.tolist())
            # The order in which the hooks saw the gradients, and the order torch registers the
            # parameters, against the zoo's.
            same_ready = measured.metadata["ready_order"] == [estimate.names[i] for i in estimate.ready_order]
            same_registration = ([measured.names[i] for i in measured.registration_order]
                                 == [estimate.names[i] for i in estimate.registration_order])
            stored = None
            if args.profiles_dir:
                path = Path(args.profiles_dir) / f"{name}-{short}-b{args.batch}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                measured.write(path)
                stored = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
            ratio_b = measured.B / estimate.B
            ratio_f = measured.F / estimate.F
            # How well the estimate's per-tensor split matches: correlation of backward times.
            correlation = float(np.corrcoef(measured.backward, estimate.backward)[0, 1]) if measured.n > 2 else None
            rows.append({"model": name, "tensors": measured.n, "same_tensors_as_zoo": bool(same_tensors),
                         "same_ready_order_as_zoo": bool(same_ready),
                         "same_registration_order_as_zoo": bool(same_registration),
                         "measured_B": measured.B, "measured_F": measured.F, "estimate_B": estimate.B,
                         "estimate_F": estimate.F, "ratio_B": ratio_b, "ratio_F": ratio_f,
                         "backward_correlation": correlation,
                         "ready_order_is_reverse_forward": measured.metadata.get("ready_order_is_reverse_forward"),
                         "profile": stored,
                         "seconds": seconds})
            progress.keep({"schema": "fusionopt.validation.profiles", "interrupted": True, "device": str(device),
                           "results": list(rows), "skipped": list(skipped)})
            progress.step(f"{name:14s} {measured.n:4d} tensors  tensors as zoo: {same_tensors}  ready order as zoo: "
                  f"{same_ready}  registration as zoo: {same_registration}  B {1e3 * measured.B:8.2f} ms "
                  f"(estimate {1e3 * estimate.B:8.2f}, x{ratio_b:.2f})  F {1e3 * measured.F:8.2f} ms "
                  f"(estimate {1e3 * estimate.F:8.2f}, x{ratio_f:.2f})")

        document = {
            "schema": "fusionopt.validation.profiles", "version": 1, "device": str(device), "hardware": hardware,
            "zoo_device": args.zoo_device, "zoo_compute": zoo_compute, "batch": args.batch, "steps": args.steps,
            "warmup": args.warmup,
            "torch": torch.__version__, "cuda": torch.version.cuda if device.type == "cuda" else None,
            "python": platform.python_version(), "libraries": library_versions(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
            "load_average": {"before": load_before, "after": os.getloadavg()[0]},
            "results": rows, "skipped": skipped,
        }
        write_result(args.output_dir, f"profiles-{label}", document, markdown(document))
    if progress.interrupted:
        return progress.exit_code
    return 0 if all(r["same_tensors_as_zoo"] and r["same_ready_order_as_zoo"]
                    and r["same_registration_order_as_zoo"] for r in rows) else 1


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries that built the models, None where one is missing."""
    versions: dict[str, str | None] = {}
    for module in ("torch", "torchvision", "transformers"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = None
    return versions


def host_load(document: dict) -> str:
    """The host's load during the run, as a sentence, or nothing for a document that lacks it."""
    load = document.get("load_average")
    if not load:
        return ""
    return (f"{document['threads']} torch threads on {document['cpus']} CPUs, 1-minute load average "
            f"{load['before']:.2f} before and {load['after']:.2f} after: the measured times are timings of that host. ")


def markdown(document: dict) -> str:
    lines = [
        f"# Measured profiles against the zoo's ({document['hardware']})",
        "",
        f"{document['date']}; "
        + ", ".join(f"{k} {v}" for k, v in document["libraries"].items() if v)
        + (f", CUDA {document['cuda']}" if document["cuda"] else "")
        + f"; batch {document['batch']}; medians of {document['steps']} steps after {document['warmup']}; "
        f"estimates from the zoo's `{document['zoo_device']}` preset ({document.get('zoo_compute') or 'roofline'} compute). "
        + host_load(document) + "Written by `validation/profiles/run.py`.",
        "",
        "| model | tensors | names, order and sizes as zoo | ready order as zoo | registration order as zoo | "
        "measured B (ms) | estimate B (ms) | B ratio | "
        "measured F (ms) | estimate F (ms) | F ratio | per-tensor backward correlation |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in document["results"]:
        corr = "-" if r["backward_correlation"] is None else f"{r['backward_correlation']:.2f}"
        flags = " | ".join("yes" if r.get(key) else ("-" if r.get(key) is None else "NO") for key in
                           ("same_tensors_as_zoo", "same_ready_order_as_zoo", "same_registration_order_as_zoo"))
        lines.append(f"| {r['model']} | {r['tensors']} | {flags} | "
                     f"{1e3 * r['measured_B']:.2f} | {1e3 * r['estimate_B']:.2f} | {r['ratio_B']:.2f} | "
                     f"{1e3 * r['measured_F']:.2f} | {1e3 * r['estimate_F']:.2f} | {r['ratio_F']:.2f} | {corr} |")
    if document["skipped"]:
        lines += ["", f"Not built here (torchvision or transformers missing): {', '.join(document['skipped'])}."]
    lines += ["", "Ratio: measured over estimated. F is each parameter-owning layer's span to the next, the "
              "last one's to the backward: the measured forward with the loss (see "
              "`fusionopt.integrations.profile_model`)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
