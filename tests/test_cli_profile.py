"""``fusionopt profile`` from each source (zoo, file, Kineto trace, PyTorch model) and CSV
profiles wherever the command line reads a profile."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.integrations import profile_from_trace
from fusionopt.model import Profile, read_profile_csv, write_profile_csv


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_zoo_profile_to_csv_and_back_to_json_is_exact(tmp_path, capsys):
    csv_path, json_path = tmp_path / "r18.csv", tmp_path / "r18.json"
    assert run(capsys, "profile", "--model", "resnet18", "--output", str(csv_path))[0] == 0
    assert csv_path.read_text().splitlines()[0] == ("name,size_bytes,forward_s,backward_s,update_s,"
                                                    "ready_index,shape")
    assert run(capsys, "profile", "--input", str(csv_path), "--output", str(json_path))[0] == 0
    reference = zoo.profile("resnet18", device="h100", batch=64)
    back = Profile.read(json_path)
    assert back.names == reference.names and back.name == "r18"
    assert back.sizes.tolist() == reference.sizes.tolist()
    assert back.forward.tolist() == reference.forward.tolist()
    assert back.backward.tolist() == reference.backward.tolist()
    assert back.ready_order == reference.ready_order and back.shapes == reference.shapes
    status, out, _ = run(capsys, "profile", "--input", str(json_path), "--csv")
    assert status == 0 and out == csv_path.read_text()


def test_csv_and_json_profiles_give_the_same_comparison(tmp_path, capsys):
    reference = zoo.profile("alexnet", device="v100", batch=32)
    write_profile_csv(reference, tmp_path / "a.csv")
    reference.write(tmp_path / "a.json")
    network = ["--workers", "16", "--network", "10gbe", "--methods", "wfbp,dp,ddp", "--json"]
    _, from_csv, _ = run(capsys, "compare", "--profile", str(tmp_path / "a.csv"), *network)
    _, from_json, _ = run(capsys, "compare", "--profile", str(tmp_path / "a.json"), *network)
    times = [{r["method"]: r["iteration_time"] for r in json.loads(doc)} for doc in (from_csv, from_json)]
    assert times[0] == times[1] and set(times[0]) == {"wfbp", "dp", "ddp"}
    status, out, _ = run(capsys, "solve", str(tmp_path / "a.csv"), "--method", "dp", "--alpha", "1e-3",
                         "--beta", "1e-9", "--json")
    assert status == 0 and json.loads(out)["iteration_time"] > reference.compute_time


@pytest.mark.parametrize("argv, message", [
    ([], "give exactly one of --model, --input, --trace or --torch"),
    (["--model", "resnet18", "--input", "x.csv"], "give exactly one of"),
    (["--trace", "t.json"], "t.json: no such file"),
    (["--model", "resnet18", "--parameters", "p.csv"], "--parameters goes with --trace"),
    (["--model", "resnet18", "--input-shape", "1,2"], "--input-shape goes with --torch"),
    (["--torch", "no_module_here:build", "--input-shape", "2,3"], "--torch no_module_here:build: No module named"),
    (["--torch", "just_a_module", "--input-shape", "2,3"], "--torch takes MODULE:FACTORY"),
    (["--torch", "math:pi", "--input-shape", "2,x"], "--input-shape takes comma-separated integers"),
])
def test_bad_profile_sources_exit_2_with_one_line(capsys, argv, message):
    status, out, err = run(capsys, "profile", *argv)
    assert status == 2 and out == ""
    assert err.startswith("fusionopt: error: ") and message in err and err.count("\n") == 1


def test_a_bad_csv_cell_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,size_bytes,forward_s,backward_s\nfc.weight,4096,0.001,-1\n")
    status, _, err = run(capsys, "profile", "--input", str(bad))
    assert status == 2 and "bad.csv" in err and "backward_s" in err and err.count("\n") == 1


# ---------------------------------------------------------------------- with PyTorch
def test_profile_a_torch_model_from_the_command_line(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    (tmp_path / "tiny_models.py").write_text(textwrap.dedent("""
        import torch

        def mlp():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

        def not_a_model():
            return 3

        def broken():
            raise RuntimeError("kaboom")

        NUMBER = 3

        class Picky(torch.nn.Linear):
            def forward(self, x):
                raise ValueError("no, thanks")

        def picky():
            return Picky(64, 10)
    """))
    monkeypatch.chdir(tmp_path)          # found in the current folder, as the command line is run
    out_path = tmp_path / "mlp.csv"
    status, out, err = run(capsys, "profile", "--torch", "tiny_models:mlp", "--input-shape", "16,64",
                           "--steps", "2", "--warmup", "1", "--output", str(out_path))
    assert status == 0, err
    p = read_profile_csv(out_path)
    assert p.names == ("0.weight", "0.bias", "2.weight", "2.bias")
    assert p.sizes.tolist() == [128 * 64 * 4, 128 * 4, 10 * 128 * 4, 10 * 4]
    assert p.B > 0 and p.F > 0
    status, _, err = run(capsys, "profile", "--torch", "tiny_models:not_a_model", "--input-shape", "2,3")
    assert status == 2 and "returned int, not a torch.nn.Module" in err
    # The user's code failing, or an input or device it cannot take: one line naming the flag.
    for argv, message in ((["tiny_models:broken", "--input-shape", "2,64"],
                           "--torch tiny_models:broken: calling it raised RuntimeError: kaboom"),
                          (["tiny_models:NUMBER", "--input-shape", "2,64"], "NUMBER is not callable (int)"),
                          (["tiny_models:mlp", "--input-shape", "2,5"],
                           "--torch tiny_models:mlp on --input-shape 2,5: RuntimeError: mat1 and mat2 shapes cannot be "
                           "multiplied"),
                          (["tiny_models:mlp", "--input-shape", "2,64", "--torch-device", "bogus"],
                           "--torch-device bogus: "),
                          (["tiny_models:mlp", "--input-shape", "2,-64"], "--input-shape 2,-64: "),
                          (["tiny_models:picky", "--input-shape", "2,64"],
                           "--torch tiny_models:picky on --input-shape 2,64: ValueError: no, thanks")):
        status, out, err = run(capsys, "profile", "--torch", *argv)
        assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_profile_from_a_real_trace_equals_the_library_reader(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    trace = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace))) as prof:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            model(torch.randn(8, 32)).sum().backward()
            prof.step()
    # The parameter list as a CSV profile with zero times: names and bytes in forward order.
    params = Profile.from_arrays([t.numel() * 4 for _, t in model.named_parameters()], [0.0] * 4, [0.0] * 4,
                                 [name for name, _ in model.named_parameters()])
    write_profile_csv(params, tmp_path / "params.csv")
    out_path = tmp_path / "measured.json"
    status, _, err = run(capsys, "profile", "--trace", str(trace), "--parameters", str(tmp_path / "params.csv"),
                         "--output", str(out_path))
    assert status == 0, err
    measured = Profile.read(out_path)
    direct = profile_from_trace(trace, model)
    assert measured.names == direct.names and measured.sizes.tolist() == direct.sizes.tolist()
    assert measured.forward.tolist() == direct.forward.tolist()
    assert measured.backward.tolist() == direct.backward.tolist()
    assert Path(out_path).exists() and measured.B > 0


def test_trace_with_a_names_and_bytes_parameter_list(capsys, tmp_path):
    # What --parameters' help describes: names and bytes alone, as CSV or JSON; the trace
    # gzip-compressed, as tensorboard_trace_handler writes it.
    import gzip

    from kineto_traces import PARAMS, two_step_trace
    trace = tmp_path / "rank0.pt.trace.json.gz"
    trace.write_bytes(gzip.compress(json.dumps(two_step_trace()).encode()))
    (tmp_path / "params.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    (tmp_path / "params.json").write_text(json.dumps(PARAMS))
    outputs = []
    for params in ("params.csv", "params.json"):
        out = tmp_path / f"from-{params}.json"
        status, _, err = run(capsys, "profile", "--trace", str(trace), "--parameters", str(tmp_path / params),
                             "--output", str(out))
        assert status == 0, err
        outputs.append(Profile.read(out))
    assert outputs[0] == outputs[1] and outputs[0].name == "rank0"
    assert outputs[0].names == tuple(n for n, _ in PARAMS) and outputs[0].metadata["steps"] == 2
    (tmp_path / "bad.csv").write_text("name,bytes\nfc1.weight,4096\n")
    status, _, err = run(capsys, "profile", "--trace", str(trace), "--parameters", str(tmp_path / "bad.csv"))
    assert status != 0 and "bad.csv: a parameter list needs 'name' and 'size_bytes' columns, got name, bytes" in err


def test_traced_prints_the_step_part_by_part(tmp_path, capsys):
    # The hand-made two-rank DDP job of tests/integrations/test_traced_step.py: predicted and
    # measured 1000 us per step; the copy 100 us late: 900 us predicted.
    from kineto_traces import PARAMS, ddp_job

    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank, copy_delay=100)))
    (tmp_path / "parameters.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    status, out, _ = run(capsys, "traced", str(tmp_path))
    assert status == 0
    assert "4 tensors, 1 bucket, 4 steps (means), cpu clock" in out
    assert "exposed                0.300         0.200" in out
    assert "step                   1.000         0.900   error -10.0%" in out
    status, out, _ = run(capsys, "traced", str(tmp_path), "--json")
    doc = json.loads(out)
    assert doc["buckets"] == [4840] and round(doc["error"], 9) == -0.1
    status, out, _ = run(capsys, "profile", "--trace", str(tmp_path))
    # Medians of the two steps: host 1000 - 290 - 130 - 320 - 105 = 155 and 135 us: 145 us.
    assert status == 0 and json.loads(out)["step"] == pytest.approx(
        {"update_lump": 105e-6, "post_backward": 20e-6, "host_overhead": 145e-6}, abs=1e-12)
    status, out, err = run(capsys, "profile", "--trace", str(tmp_path), "--csv")
    assert status == 0 and out.startswith("name,size_bytes,forward_s,backward_s,update_s,dtype\nfc1.weight,4096,")
    assert err.startswith("fusionopt: warning: profile '") and "are not written: CSV carries the tensors only" in err
    assert err.count("\n") == 1
