"""`fusionopt advise --pattern zero2|fsdp` from the command line: advice never slower than the
defaults, FSDP2 calls for any naming, a memory cap one framework cannot meet said in one
line while the other is still advised, and flags advise does not take refused in one line
that does not point to another refused flag."""

import json
import re

from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.model import Profile

TEN_GBE_1024 = ["--workers", "1024", "--network", "10gbe"]
IB_64 = ["--workers", "64", "--network", "100gb-ib"]


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def run_json(capsys, *argv):
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0 and err == "", err
    return json.loads(out)


def run_error(capsys, *argv):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == "" and len(err.splitlines()) == 1, (status, out, err)
    assert err.startswith("fusionopt: error: ")
    return err


def test_megatron_advice_leaves_its_default_bucket_size_where_that_is_fastest(capsys):
    # bert-large at 1024 ranks: Megatron-LM's own max(4e7, 1e6 x 1024) beats every size tried.
    status, out, err = run(capsys, "advise", "--model", "bert-large", *TEN_GBE_1024, "--pattern", "zero2")
    assert status == 0, err
    line = next(line for line in out.splitlines() if line.startswith("megatron"))
    assert "data_parallel_size=1024, leave bucket_size unset: " in line
    advised, default = re.search(r"T = ([\d.]+) ms \(defaults: ([\d.]+) ms", line).groups()
    assert advised == default
    for model in ("bert-large", "vgg16"):
        for workers in ("256", "1024"):
            doc = run_json(capsys, "advise", "--model", model, "--workers", workers, "--network", "10gbe",
                           "--pattern", "zero2")
            for framework in ("zero2", "megatron"):
                assert doc[framework]["iteration_time"] <= doc[framework]["default_iteration_time"], (model, workers)


def test_fsdp_advice_for_vit_and_for_names_without_dots(capsys, tmp_path):
    for atoms in ([], ["--atoms", "module"]):
        doc = run_json(capsys, "advise", "--model", "vit-b16", "--batch", "16", *IB_64, "--pattern", "fsdp", *atoms)
        assert doc["fsdp2"]["units"][-1] == [""] and doc["fsdp2"]["plan"]["root"]
        assert doc["fsdp2"]["iteration_time"] <= doc["fsdp2"]["default_iteration_time"]
    profile = zoo.profile("resnet18", batch=16).to_dict()
    for tensor in profile["tensors"]:
        tensor["name"] = tensor["name"].replace(".", "_")
    profile["ready_order"] = [name.replace(".", "_") for name in profile.get("ready_order") or []] or None
    path = tmp_path / "flat.json"
    Profile.from_dict(profile).write(path)
    status, out, err = run(capsys, "advise", "--profile", path, *IB_64, "--pattern", "fsdp", "--atoms", "module")
    assert status == 0, err
    assert "advised (the defaults, no plan searched being faster)" in out
    assert "            fully_shard(model, reshard_after_forward=False)\n" in out


def test_a_cap_fsdp2_can_meet_is_met_and_zero3_is_still_advised(capsys):
    doc = run_json(capsys, "advise", "--model", "gpt2", *IB_64, "--pattern", "fsdp", "--memory-cap", "330MB")
    assert doc["fsdp2"]["peak_memory"] <= 330e6 < doc["fsdp2"]["default_peak_memory"]
    assert doc["zero3"]["peak_memory"] <= 330e6 and "over_memory_cap" not in doc


def test_a_cap_one_framework_cannot_meet_is_said_in_one_line(capsys):
    # lstm-lm (batch 16): ZeRO-3 fits 300 MB, no FSDP2 plan searched does (its embedding and
    # LSTM units are large); mobilenet-v2: FSDP2 fits 13 MB, no ZeRO-3 setting tried does.
    lstm = ["advise", "--model", "lstm-lm", "--batch", "16", *IB_64, "--pattern", "fsdp"]
    status, out, err = run(capsys, *lstm, "--memory-cap", "300MB")
    assert status == 0 and err == "", err
    assert len([line for line in out.splitlines() if line.startswith("fsdp2     no setting fits the cap: ")]) == 1
    assert "fully_shard(" not in out
    assert re.search(r"^deepspeed ZeRO-3 \(zero_optimization\): prefetch_bucket_size=", out, re.M)
    doc = run_json(capsys, *lstm, "--memory-cap", "300MB")
    assert "fsdp2" not in doc and "memory cap" in doc["over_memory_cap"]["fsdp2"]
    assert doc["zero3"]["peak_memory"] <= 300e6
    doc = run_json(capsys, "advise", "--model", "mobilenet-v2", "--batch", "16", *IB_64, "--pattern", "fsdp",
                   "--memory-cap", "13MB")
    assert "zero3" not in doc and "memory cap" in doc["over_memory_cap"]["zero3"]
    assert doc["fsdp2"]["peak_memory"] <= 13e6
    err = run_error(capsys, *lstm, "--memory-cap", "100MB")
    assert "neither FSDP2 nor DeepSpeed ZeRO-3 fits it" in err


def test_update_after_gather_is_refused_without_pointing_to_a_refused_flag(capsys):
    for pattern in ("allreduce", "zero2", "fsdp"):
        err = run_error(capsys, "advise", "--model", "resnet18", "--workers", "8", "--network", "10gbe",
                        "--pattern", pattern, "--update-after-gather")
        assert "--update-after-gather does not apply to advise" in err and "--decoupled" not in err


def test_a_bucket_list_slower_than_ddps_defaults_says_to_leave_it_unset(capsys):
    # The list reproduces the plan asked for; where that plan is slower than DDP's own buckets
    # (every tensor alone, WFBP, on a slow network), the line says so and what to do instead.
    status, out, _ = run(capsys, "advise", "--model", "resnet50", "--workers", "64", "--network", "10gbe",
                         "--method", "wfbp")
    document = run_json(capsys, "advise", "--model", "resnet50", "--workers", "64", "--network", "10gbe",
                        "--method", "wfbp")
    ddp = document["ddp"]
    assert status == 0 and ddp["list_iteration_time"] > ddp["default_iteration_time"]
    [line] = [line for line in out.splitlines() if line.startswith("ddp ")]
    assert line.endswith(f"the plan's): T = {1e3 * ddp['list_iteration_time']:.3f} ms; slower than DDP's defaults "
                         f"({1e3 * ddp['default_iteration_time']:.3f} ms): leave it unset")
    # With the DP's plan, never slower, nothing is added (any gain counts with --min-gain 0).
    status, out, _ = run(capsys, "advise", "--model", "resnet50", "--workers", "64", "--network", "10gbe",
                         "--min-gain", "0")
    [line] = [line for line in out.splitlines() if line.startswith("ddp ")]
    assert status == 0 and line.endswith(" ms") and "slower" not in line


def test_a_gain_under_min_gain_keeps_the_frameworks_defaults(capsys):
    # ResNet-50 on 10 GbE at 64 workers: the DP's two buckets are predicted 4.4% faster than
    # DDP's defaults, under the 5% default --min-gain, so the advice keeps the defaults (no
    # DDP argument) and names the list; at --min-gain 0.04 the list is advised.
    argv = ["advise", "--model", "resnet50", "--workers", "64", "--network", "10gbe"]
    kept = run_json(capsys, *argv)["ddp"]
    gain = 1 - kept["plan_iteration_time"] / kept["default_iteration_time"]
    assert 0.04 < gain < 0.05
    assert kept["kept_defaults"] and kept["arguments"] == {} and kept["bucket_cap_mb_list"] is not None
    assert kept["iteration_time"] == kept["default_iteration_time"] and kept["min_gain"] == 0.05
    advised = run_json(capsys, *argv, "--min-gain", "0.04")["ddp"]
    assert advised["arguments"] == {"bucket_cap_mb_list": kept["bucket_cap_mb_list"]}
    assert advised["iteration_time"] == kept["plan_iteration_time"] and not advised["kept_defaults"]
    status, out, _ = run(capsys, *argv)
    assert status == 0 and "ddp       keep DDP's defaults: T = " in out and "predicted 5% faster (--min-gain)" in out
    err = run_error(capsys, *argv, "--min-gain", "1.5")
    assert "--min-gain: takes a fraction in [0, 1)" in err and len(err.splitlines()) == 1
