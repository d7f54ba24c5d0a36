"""Each stored validation table is its script's rendering of the JSON stored beside it, so a
change to a table's wording or to a figure derived in it cannot leave a stored table behind
the data it shows (or show data the JSON does not hold)."""

import json

import pytest

from script_helpers import ROOT, load_script

RESULTS = ROOT / "validation" / "results"

# The script that writes each stored ``STEM.{json,md}`` pair.
WRITERS = {
    "frameworks": "validation/frameworks/run.py",
    "speedup-cpu": "validation/frameworks/speedup.py",
    "contention-gpu": "validation/hardware/contention.py",
    "local-cpu": "validation/hardware/run.py",
    "mpi-cpu": "validation/hardware/run.py",
    "nccl-gpu-gemm": "validation/hardware/run.py",
    "nccl-gpu-spin": "validation/hardware/run.py",
    "online-cpu": "validation/online/run.py",
    "online-fsdp2": "validation/online/fsdp2.py",
    "online-prefetch": "validation/online/prefetch.py",
    "online-study": "validation/online/study.py",
    "profiles-cpu": "validation/profiles/run.py",
    "traces-cpu": "validation/traces/run.py",
    "traces-counterfactual-cpu": "validation/traces/counterfactual.py",
    "traces-gpu": "validation/traces/unprofiled.py",
    "training-cpu": "validation/training/run.py",
    "wire-cpu": "validation/wire/run.py",
    "wire-executor-mpi-cpu": "validation/wire/executor.py",
    "wire-powersgd": "validation/wire/powersgd.py",
    "wire-study": "validation/wire/study.py",
    "zoo-compute": "validation/zoo/run.py",
}
# Written on the H100 on 2026-11-27 by the script as it was then, and kept as written: the
# script's title and preset words have changed since, its figures have not.
AS_WRITTEN_ON_THE_GPU = {"profiles-gpu"}


def test_every_stored_pair_has_its_writer():
    pairs = {path.stem for path in RESULTS.glob("*.json") if path.with_suffix(".md").exists()}
    assert pairs == set(WRITERS) | AS_WRITTEN_ON_THE_GPU


@pytest.mark.parametrize("stem", sorted(WRITERS))
def test_the_stored_table_is_its_scripts_rendering_of_the_stored_json(stem):
    document = json.loads((RESULTS / f"{stem}.json").read_text(encoding="utf-8"))
    rendered = load_script(WRITERS[stem]).markdown(document)
    assert rendered == (RESULTS / f"{stem}.md").read_text(encoding="utf-8"), (
        f"validation/results/{stem}.md is not what {WRITERS[stem]} renders from {stem}.json")
