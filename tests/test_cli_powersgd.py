"""``--powersgd-rank``: torch's PowerSGD hook from the command line (MODEL.md section 2.4), on
three tensors in forward order, a 4 MiB weight (1024 x 1024), a 1 MiB weight (256 x 1024) and
a bias of 256, each with 1 ms of forward and of backward, over ``alpha = 1 ms``, ``beta = 1
ns/B``.

Worked by hand: at rank 4 the hook sends the weights as (1024 + 1024) 4 and (256 + 1024) 4
elements, 32,768 and 20,480 B, and the bias whole, 1,024 B, with three startups a bucket
(3 ms). Ready in the ready order b, w1, w2 at 1, 2 and 3 ms. One bucket of all three: 3 +
3.054272 + 3 (forward) = 9.054272 ms. DDP's defaults (b and w1 in the 1 MiB first bucket, ready
at 2 ms; w2 alone): 2 + 3.021504, then 3.032768, then 3 = 11.054272 ms. Without the hook the
defaults take 2 + 1 + 1.0496, then 1 + 4.194304, then 3 = 12.243904 ms, as does one plain
bucket (3 + 1 + 5.243904 + 3).
"""

from __future__ import annotations

import json

import pytest

from fusionopt.cli import main
from fusionopt.cost import AlphaBeta, PowerSGD
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.solvers.baselines import ddp_powersgd

LINK = ["--alpha", "1e-3", "--beta", "1e-9"]
HOOK = ["--powersgd-rank", "4"]
PROFILE = Profile.from_arrays([4194304, 1048576, 1024], [1e-3] * 3, [1e-3] * 3, ["w2", "w1", "b"],
                              shapes=[(1024, 1024), (256, 1024), (256,)])


@pytest.fixture
def profile_path(tmp_path):
    path = tmp_path / "profile.json"
    PROFILE.write(path)
    return str(path)


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) in (None, 0)
    return json.loads(capsys.readouterr().out)


def test_solve_prices_the_hook_and_writes_the_plan_in_the_gradients_bytes(profile_path, tmp_path, capsys):
    out = tmp_path / "plan.json"
    document = run_json(capsys, "solve", profile_path, "--method", "dp", *LINK, *HOOK, "--output", str(out))
    assert document["iteration_time"] == pytest.approx(9.054272e-3, abs=1e-12)
    assert document["powersgd"]["rank"] == 4 and document["powersgd"]["start_iter"] == 1000
    plan = Plan.read(out).validate(PROFILE)
    assert plan.groups() == [[2, 1, 0]] and plan.message_bytes.tolist() == [5243904]
    # The plan file simulated with the hook is the same step; without it, the plain one.
    assert run_json(capsys, "simulate", profile_path, "--plan", str(out), *LINK, *HOOK)["iteration_time"] == \
        pytest.approx(9.054272e-3, abs=1e-12)
    simulated = run_json(capsys, "simulate", profile_path, "--plan", str(out), *LINK)
    assert simulated["iteration_time"] == pytest.approx(12.243904e-3, abs=1e-12)
    assert main(["simulate", profile_path, "--plan", str(out), *LINK, *HOOK]) in (None, 0)
    text = capsys.readouterr().out
    assert "powerSGD_hook on every DDP bucket, rank 4" in text and "5243904" in text


def test_ddp_builds_its_buckets_from_the_gradients_bytes(profile_path, capsys):
    document = run_json(capsys, "solve", profile_path, "--method", "ddp", *LINK, *HOOK)
    assert document["iteration_time"] == pytest.approx(11.054272e-3, abs=1e-12)
    assert [[c[0] for c in m] for m in document["plan"]["messages"]] == [[2, 1], [0]]
    assert document["plan"]["messages"][1] == [[0, 0, 4194304]]
    library = ddp_powersgd(Problem(PROFILE, AlphaBeta(1e-3, 1e-9)), PowerSGD(rank=4))
    assert document["iteration_time"] == library.iteration_time
    capped = run_json(capsys, "solve", profile_path, "--method", "ddp", "--option", "bucket_cap_mb=5", *LINK, *HOOK)
    assert capped["iteration_time"] == pytest.approx(9.054272e-3, abs=1e-12)


def test_compare_judges_every_row_under_the_hook(profile_path, capsys):
    rows = {row["method"]: row for row in run_json(capsys, "compare", "--profile", profile_path, *LINK, *HOOK)}
    assert rows["ddp"]["iteration_time"] == pytest.approx(11.054272e-3, abs=1e-12)
    assert rows["dp"]["iteration_time"] == pytest.approx(9.054272e-3, abs=1e-12)
    # WFBP, a bucket a tensor: b ends at 1 + 3.001024, w1 at + 3.020480, w2 at + 3.032768, then 3 ms.
    assert rows["wfbp"]["iteration_time"] == pytest.approx(13.054272e-3, abs=1e-12)
    assert "horovod" not in rows
    assert main(["compare", "--profile", profile_path, *LINK, *HOOK]) in (None, 0)
    text = capsys.readouterr().out
    assert "hook      torch's powerSGD_hook on every DDP bucket, rank 4" in text
    assert "left out: horovod: Horovod has no PowerSGD: torch's powerSGD_hook is a DDP comm hook" in text


def test_advise_gives_the_buckets_the_hook_and_the_step_without_it(profile_path, capsys):
    document = run_json(capsys, "advise", "--profile", profile_path, *LINK, *HOOK)
    ddp = document["ddp"]
    assert ddp["arguments"] == {"bucket_cap_mb_list": [2.0]}
    assert ddp["iteration_time"] == pytest.approx(9.054272e-3, abs=1e-12)
    assert ddp["default_iteration_time"] == pytest.approx(11.054272e-3, abs=1e-12)
    assert ddp["plain_iteration_time"] == pytest.approx(12.243904e-3, abs=1e-12)
    assert ddp["hook_state"].endswith("PowerSGDState(process_group=None, matrix_approximation_rank=4, "
                                      "min_compression_rate=2.0, start_powerSGD_iter=1000, use_error_feedback=True, "
                                      "warm_start=True)")
    assert document["horovod"] is None and "DDP comm hook" in document["horovod_left_out"]
    assert main(["advise", "--profile", profile_path, *LINK, *HOOK]) in (None, 0)
    text = capsys.readouterr().out
    assert "DDP's defaults without the hook: T = 12.244 ms" in text
    assert "register the hook: ddp.register_comm_hook(" in text


def test_advise_says_when_the_hook_is_slower_than_no_hook(profile_path, capsys):
    # 50 ms of the hook's own work a bucket: one bucket takes 3 + 53.054272 + 3 ms.
    document = run_json(capsys, "advise", "--profile", profile_path, *LINK, *HOOK, "--powersgd-per-message", "0.05")
    assert document["ddp"]["iteration_time"] == pytest.approx(59.054272e-3, abs=1e-12)
    assert main(["advise", "--profile", profile_path, *LINK, *HOOK, "--powersgd-per-message", "0.05"]) in (None, 0)
    assert ("the hook is predicted slower than DDP's defaults without it (12.244 ms): leave it out"
            in capsys.readouterr().out)


def test_the_hooks_compute_flags_reach_the_price(profile_path, capsys):
    # 1 ps a flop: w2's products are 6 x 1024 x 1024 x 4 flops (25.165824 us), w1's
    # 6 x 256 x 1024 x 4 (6.291456 us); each tensor's compute over beta to the nearest byte,
    # 25,166 and 6,291 B, puts 31.457 us on the one bucket.
    document = run_json(capsys, "solve", profile_path, "--method", "dp", *LINK, *HOOK, "--powersgd-per-flop", "1e-12")
    assert document["iteration_time"] == pytest.approx(9.054272e-3 + 31.457e-6, abs=1e-12)
    hook = PowerSGD(rank=4, seconds_per_flop=1e-12)
    priced = hook.priced(Problem(PROFILE, AlphaBeta(1e-3, 1e-9)))
    assert document["iteration_time"] == simulate(priced, Plan.from_groups(priced.profile, [[2, 1, 0]])).iteration_time


@pytest.mark.parametrize("argv, message", [
    (["solve", "--method", "horovod", *HOOK], "--powersgd-rank: horovod: Horovod has no PowerSGD"),
    (["solve", "--method", "ddp", "--option", "bucket_mb=3", *HOOK], "unknown option 'bucket_mb' for method 'ddp'"),
    (["solve", "--encodings", "fp16", *HOOK], "goes without --encodings"),
    (["solve", "--decoupled", *HOOK], "goes without --decoupled"),
    (["solve", "--copy-cost", "1e-9", *HOOK], "this problem has copy_cost on"),
    (["solve", "--powersgd-start-iter", "1", *HOOK], "start_iter must be > 1"),
    (["solve", "--powersgd-rank", "0"], "rank must be"),
    (["solve", "--powersgd-per-flop", "1e-12"], "--powersgd-per-flop sets torch's PowerSGD hook and goes with"),
    (["solve", "--method", "p3", "--sync", "layerwise", *HOOK], "p3 cuts tensors"),
    (["advise", "--pattern", "fsdp", *HOOK], "--pattern fsdp has none"),
    (["solve", "--powersgd-as-choice"], "--powersgd-as-choice makes torch's PowerSGD hook a choice per message and "
                                        "goes with --powersgd-rank R"),
    (["solve", "--ps-servers", "2", *HOOK, "--powersgd-as-choice"], "a choice per message, and goes without "
                                                                     "--ps-servers"),
    (["solve", "--channels", "2", *HOOK, "--powersgd-as-choice"], "--powersgd-as-choice: compressor 'powersgd' prices "
                                                                   "a message by its tensors on one channel"),
])
def test_bad_powersgd_flags_are_named_in_one_line(profile_path, capsys, argv, message):
    command, *rest = argv
    where = [profile_path] if command == "solve" else ["--profile", profile_path]
    assert main([command, *where, *LINK, *rest]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("fusionopt: error: ") and message in error and "\n" not in error, error


def test_the_hook_as_one_choice_per_message(profile_path, tmp_path, capsys):
    # Each message in fp32 or through the hook, the cheaper: b alone in fp32 from 1 ms
    # (1.001024 ms, done by 2.001024), then w1 and w2 from 3 ms through it (3 ms of startups and
    # (256 + 1024 + 1024 + 1024) 4 x 4 B at 1 ns/B): 6.053248 + 3 ms, below the one bucket's
    # 9.054272 ms under the hook on every bucket.
    out = tmp_path / "plan.json"
    choice = [*HOOK, "--powersgd-as-choice"]
    document = run_json(capsys, "solve", profile_path, "--method", "dp", *LINK, *choice, "--output", str(out))
    assert document["iteration_time"] == pytest.approx(9.053248e-3, abs=1e-12)
    assert document["encodings"] == ["fp32", "powersgd"] and document["status"] == "OPTIMAL"
    assert Plan.read(out).groups() == [[2], [1, 0]]
    assert run_json(capsys, "simulate", profile_path, "--plan", str(out), *LINK, *choice)["iteration_time"] == \
        pytest.approx(9.053248e-3, abs=1e-12)
    rows = {row["method"]: row for row in run_json(capsys, "compare", "--profile", profile_path, *LINK, *choice)}
    assert rows["dp"]["iteration_time"] == pytest.approx(9.053248e-3, abs=1e-12)
    assert min(row["iteration_time"] for row in rows.values()) == pytest.approx(9.053248e-3, abs=1e-12)


def test_advise_with_the_hook_as_one_choice_per_bucket(profile_path, capsys):
    # The plan above as DDP buckets: a list of [0.0001, 2.0] MB closes the first after the bias
    # and the second after both weights; DDP's defaults take 10.082368 ms under the same
    # choice (the bias and w1 as they are, done at 4.0496 ms; w2 through the hook, 3.032768 ms).
    argv = ["advise", "--profile", profile_path, *LINK, *HOOK, "--powersgd-as-choice"]
    document = run_json(capsys, *argv)
    ddp = document["ddp"]
    assert ddp["arguments"] == {"bucket_cap_mb_list": [0.0001, 2.0]} and ddp["buckets"] == [[2], [1, 0]]
    assert ddp["iteration_time"] == pytest.approx(9.053248e-3, abs=1e-12)
    assert ddp["default_iteration_time"] == pytest.approx(10.082368e-3, abs=1e-12)
    assert ddp["through_names"] == ["w1", "w2"] and ddp["compressor"]["rank"] == 4
    assert "horovod_left_out" in document and "no powersgd" in document["horovod_left_out"]
    assert main(argv) in (None, 0)
    text = capsys.readouterr().out
    assert "wire: 1 bucket in fp32, 1 bucket in powersgd" in text
    assert ("register: ddp.register_comm_hook(None, fusionopt.integrations.wire_comm_hook([[0, 'fp32']], "
            "powersgd=torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState(process_group=None, "
            "matrix_approximation_rank=4, min_compression_rate=2.0, start_powerSGD_iter=1000, use_error_feedback=True, "
            "warm_start=True), through=[p for n, p in model.named_parameters() if n in THROUGH]))") in text
    assert "THROUGH = {'w1', 'w2'}" in text and "gloo aborts on" in text

