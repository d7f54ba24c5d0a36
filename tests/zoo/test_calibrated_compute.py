"""The zoo's calibrated compute: the rule by hand, the measured steps it must meet, the
published device figures, and the refusals."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from fusionopt.model import Problem

from fusionopt.solvers import solve

from fusionopt import zoo
from fusionopt.cost import AlphaBeta, network
from fusionopt.model import Decoupled, FullySharded
from fusionopt.zoo import calibrated, fitting, published, Device, Layer, conv2d

C = calibrated.H100.layer_cost


def one_worker_step(profile):
    return solve(Problem(profile, AlphaBeta(0.0, 0.0)), "wfbp").iteration_time


def layer_time(profile, arch, index, which="forward"):
    """A layer's time in a profile: it sits on the layer's last tensor."""
    return float(getattr(profile, which)[profile.index(arch.layers[index].tensors[-1][0])])


# ---------------------------------------------------------------------- the rule by hand
def test_a_layer_whose_measured_time_its_work_cannot_explain_is_capped():
    # VGG-16's classifier.0 (25088 -> 4096): 2 * 25088 * 4096 FLOPs per sample; at batch 32
    # and the linear floor rate 2.75e13 FLOP/s its forward takes 2.3915e-4 s, its backward
    # twice that; the profile measured 5.06e-4 s forward (the rest is host time).
    arch = zoo.architecture("vgg16")
    p = zoo.profile("vgg16", batch=32)
    measured_forward, _ = calibrated.measured_layer_times("vgg16", arch)
    assert measured_forward[13] == pytest.approx(5.064e-4, rel=1e-3)
    assert layer_time(p, arch, 13) == pytest.approx(32 * 2 * 25088 * 4096 / 2.75e13, rel=1e-12)
    assert layer_time(p, arch, 13, "backward") == pytest.approx(2 * 32 * 2 * 25088 * 4096 / 2.75e13, rel=1e-12)


def test_resnet50_fc_backward_is_host_time_and_costs_only_c():
    # fc's backward measured 1.05 ms at batch 32; its work (2 * 2048 * 1000 FLOPs per sample)
    # takes 2 * 32 * 4.096e6 / 2.75e13 = 9.5e-6 s at the floor rate, less than c: it costs c.
    arch = zoo.architecture("resnet50")
    _, measured_backward = calibrated.measured_layer_times("resnet50", arch)
    assert measured_backward[-1] > 1e-3
    for batch in (32, 256):
        assert layer_time(zoo.profile("resnet50", batch=batch), arch, -1, "backward") == pytest.approx(3.32e-5)


def test_at_batch_32_every_measured_layer_is_its_capped_time_or_c():
    for model in ("resnet50", "bert-base", "mobilenet-v2"):
        arch = zoo.architecture(model)
        p = zoo.profile(model, batch=32)
        forward, backward = calibrated.measured_layer_times(model, arch)
        works, rates = calibrated.work_arrays(arch)
        for i in range(len(arch.layers)):
            cap = 32 * works[i] / rates[i]
            assert layer_time(p, arch, i) == pytest.approx(max(min(forward[i], cap), C), rel=1e-12, abs=1e-15)
            assert layer_time(p, arch, i, "backward") == pytest.approx(max(min(backward[i], 2 * cap), C),
                                                                       rel=1e-12, abs=1e-15)


def test_the_batch_rule_is_c_plus_work_in_proportion_to_the_batch():
    # t(b) = c + (t(32) - c) * b / 32: t(64) = 2 t(32) - c, t(128) = 4 t(32) - 3 c.
    arch = zoo.architecture("vgg16")
    t32, t64, t128 = (layer_time(zoo.profile("vgg16", batch=b), arch, 0) for b in (32, 64, 128))
    assert t32 == pytest.approx(1.2156e-3, rel=1e-3)        # features.0 as measured
    assert t64 == pytest.approx(2 * t32 - C, rel=1e-12)
    assert t128 == pytest.approx(4 * t32 - 3 * C, rel=1e-12)
    # A layer with no work (a table lookup) costs c at every batch.
    bert = zoo.architecture("bert-base")
    for batch in (1, 8, 256):
        assert layer_time(zoo.profile("bert-base", batch=batch), bert, 0) == pytest.approx(C, rel=1e-12)


def test_the_update_is_sgd_with_momentum_by_tensors_and_bytes():
    # 161 tensors * 1.58e-6 s + 4 * 25,557,032 bytes / 3.53e11 B/s = 2.5438e-4 + 2.8960e-4 s.
    assert zoo.profile("resnet50").U == 0.0                     # no optimiser unless asked for
    p = zoo.profile("resnet50", optimizer="sgd")
    assert p.U == pytest.approx(5.4398e-4, rel=1e-4) and p.update_lump == 0.0
    # Each tensor's share: 1.58e-6 s plus its float32 bytes; fc.weight: 4 * 2048 * 1000 B.
    assert p.update[p.index("fc.weight")] == pytest.approx(1.58e-6 + 4 * 2048 * 1000 / 3.53e11, rel=1e-12)
    assert zoo.profile("resnet50", dtype_bytes=2, optimizer="sgd").U == p.U   # its bytes are float32
    assert zoo.profile("resnet50", compute="roofline").U == 0.0


@pytest.mark.parametrize("pattern", ["layerwise", "decoupled", "fully-sharded"])
def test_a_calibrated_profile_runs_under_every_sync_and_pattern(pattern):
    # The optimiser is in the tensors' update times, not in an update lump, which layerwise
    # sync and the decoupled step would refuse.
    p = zoo.profile("resnet18", batch=32, optimizer="sgd")
    if pattern == "layerwise":
        problem, method = Problem(p, network("10gbe", 8), sync="layerwise"), "wfbp"
    elif pattern == "decoupled":
        problem, method = Problem(p, pattern=Decoupled.from_network("10gbe", 8)), "megatron"
    else:
        problem, method = Problem(p, pattern=FullySharded.from_network("10gbe", 8)), "fsdp2"
    assert solve(problem, method).iteration_time >= p.F + p.B + p.U


def test_the_one_worker_step_is_forward_backward_and_update():
    p = zoo.profile("inception-v3", batch=48, optimizer="sgd")
    assert one_worker_step(p) == pytest.approx(p.F + p.B + p.U, rel=1e-9)
    assert calibrated.step_time("inception-v3", 48) == pytest.approx(p.F + p.B + p.U, rel=1e-12)


# ---------------------------------------------------------------------- models the H100 did not measure
def test_an_unmeasured_model_runs_at_its_references_rates():
    # resnet152 borrows resnet101's per-kind rates: t = c + batch * work * k / rate.
    arch = zoo.architecture("resnet152")
    p = zoo.profile("resnet152", batch=16)
    rates = calibrated.effective_rates("resnet101")
    conv = arch.layers[0]                                   # conv1, 7x7, 118 MFLOPs per image
    assert conv.kind == "conv" and conv.flops == pytest.approx(2 * 3 * 49 * 64 * 112 * 112)
    assert layer_time(p, arch, 0) == pytest.approx(C + 16 * conv.flops / rates[("conv", "forward")], rel=1e-12)
    assert layer_time(p, arch, 0, "backward") == pytest.approx(
        C + 2 * 16 * conv.flops / rates[("conv", "backward")], rel=1e-12)
    # fc: resnet101 has no linear rate (its fc time is host time), so fc runs at the floor rate.
    assert ("linear", "forward") not in rates
    assert layer_time(p, arch, -1) == pytest.approx(C + 16 * arch.layers[-1].flops / 2.75e13, rel=1e-12)
    assert p.metadata["layer_times"].startswith("work at the per-kind rates of resnet101")


def test_a_measured_model_in_another_configuration_uses_its_own_rates():
    default = zoo.profile("bert-base", batch=8)
    explicit = zoo.profile("bert-base", batch=8, seq_len=128)
    assert explicit == default and default.metadata["layer_times"].startswith("measured")
    short = zoo.profile("bert-base", batch=8, seq_len=64)
    assert short.metadata["layer_times"].startswith("work at the per-kind rates of bert-base")
    assert short.F < default.F and short.total_bytes == default.total_bytes


def test_the_lstm_keeps_its_total_time_in_either_ready_order():
    cpu, cuda = zoo.profile("lstm-lm", order="cpu"), zoo.profile("lstm-lm", order="cuda")
    assert cpu.F == pytest.approx(cuda.F, rel=1e-12) and cpu.B == pytest.approx(cuda.B, rel=1e-12)
    # On the CPU the two layers share cuDNN's one measured node by their FLOPs (1500 -> 1500 each).
    l0, l1 = cpu.index("rnn.bias_hh_l0"), cpu.index("rnn.bias_hh_l1")
    assert cpu.forward[l0] == pytest.approx(cpu.forward[l1], rel=1e-12)
    assert cpu.forward[l0] + cpu.forward[l1] == pytest.approx(cuda.forward[l1], rel=1e-12)


# ---------------------------------------------------------------------- against the measured steps
STEPS = json.loads(fitting.STEPS_FILE.read_text())["cases"]


@pytest.mark.parametrize("case", STEPS, ids=lambda c: f"{c['model']}-{c['batch']}-{c['precision']}")
def test_the_zoo_step_is_within_15_percent_of_the_measured_plain_step(case):
    p = zoo.profile(case["model"], device="h100", batch=case["batch"], precision=case["precision"], optimizer="sgd")
    assert one_worker_step(p) == pytest.approx(case["step_median"], rel=0.15)


def test_the_roofline_step_is_an_order_of_magnitude_short_of_the_measured_one():
    case = next(c for c in STEPS if c["model"] == "resnet50" and c["batch"] == 256)
    roofline = one_worker_step(zoo.profile("resnet50", batch=256, compute="roofline"))
    assert one_worker_step(zoo.profile("resnet50", batch=256)) < case["step_median"]   # without the update
    assert roofline < case["step_median"] / 5


def test_the_stored_constants_are_the_fit_of_the_stored_steps():
    fit = fitting.fit_h100()
    stored = calibrated.H100
    assert fit.layer_cost == pytest.approx(stored.layer_cost, rel=5e-3)
    for kind, rate in stored.floor_rates.items():
        assert fit.floor_rates[kind] == pytest.approx(rate, rel=5e-3)
    assert fit.update_per_tensor == pytest.approx(stored.update_per_tensor, rel=5e-3)
    assert fit.update_bandwidth == pytest.approx(stored.update_bandwidth, rel=5e-3)
    assert fit.bf16_speedup == pytest.approx(dict(stored.bf16_speedup), rel=5e-3)


def test_a_refit_without_a_case_still_predicts_it_within_15_percent():
    cases = fitting.load_steps()
    for left in [c for c in cases if c.precision == "fp32" and c.model in ("densenet121", "resnet50")]:
        rest = [c for c in cases if c is not left]
        assert fitting.predicted_step(left, fitting.fit_h100(rest)) == pytest.approx(left.step, rel=0.15)


# ---------------------------------------------------------------------- bf16
def test_bf16_divides_the_work_not_the_fixed_cost_nor_the_update():
    arch = zoo.architecture("gpt2")
    fp32 = zoo.profile("gpt2", batch=8, optimizer="sgd")
    bf16 = zoo.profile("gpt2", batch=8, precision="bf16", optimizer="sgd")
    speedup = calibrated.H100.bf16_speedup["decoder"]
    assert speedup == 2.85 and bf16.metadata["bf16_speedup"] == speedup
    for i in (0, 3, 7):
        assert layer_time(bf16, arch, i) - C == pytest.approx((layer_time(fp32, arch, i) - C) / speedup, rel=1e-9)
    assert bf16.update.tolist() == fp32.update.tolist()
    assert bf16.sizes.tolist() == fp32.sizes.tolist()        # float32 gradients under autocast
    assert zoo.profile("gpt2", precision="bf16", dtype_bytes=2).total_bytes == fp32.total_bytes // 2


# ---------------------------------------------------------------------- other devices
def test_a_device_profile_is_the_h100_fp32_profile_times_its_published_factor():
    h100 = zoo.profile("resnet101", batch=64, optimizer="sgd")
    v100 = zoo.profile("resnet101", device="v100", batch=64, optimizer="sgd")
    factor = (112 / 367.0) / calibrated.step_time("resnet50", 112)
    assert v100.metadata["device_figure"]["factor"] == pytest.approx(factor, rel=1e-12)
    np.testing.assert_allclose(v100.backward, h100.backward * factor, rtol=1e-12)
    np.testing.assert_allclose(v100.forward, h100.forward * factor, rtol=1e-12)
    np.testing.assert_allclose(v100.update, h100.update * factor, rtol=1e-12)
    # A100 bf16 scales the H100's fp32 profile by the A100's own mixed-precision figure.
    a100 = zoo.profile("bert-base", device="a100", batch=16, precision="bf16")
    a100_factor = (64 / 415.0) / calibrated.step_time("bert-large", 64)
    assert a100.B == pytest.approx(zoo.profile("bert-base", batch=16).B * a100_factor, rel=1e-12)


def test_the_devices_rank_as_their_published_figures():
    steps = {d: one_worker_step(zoo.profile("resnet50", device=d, batch=64)) for d in ("h100", "a100", "v100", "k80")}
    assert steps["h100"] < steps["a100"] < steps["v100"] < steps["k80"]
    # K80 / V100: 367 images/s at 112 against 51.9 at 64, through the H100 rule at each batch.
    ratio = (64 / 51.9 / calibrated.step_time("resnet50", 64)) / (112 / 367.0 / calibrated.step_time("resnet50", 112))
    assert steps["k80"] / steps["v100"] == pytest.approx(ratio, rel=1e-9)


def test_metadata_says_where_each_figure_came_from():
    p = zoo.profile("resnet50", batch=32)
    assert p.metadata["source"].startswith("calibrated: one NVIDIA H100 80GB HBM3")
    assert p.metadata["compute"] == "calibrated" and p.metadata["precision"] == "fp32"
    assert p.metadata["layer_times"] == "measured: fusionopt/zoo/measured/resnet50-h100-b32.json"
    assert p.metadata["update"].startswith("none")
    assert "SGD with momentum" in zoo.profile("resnet50", optimizer="sgd").metadata["update"]
    for device, model, precision in (("v100", "resnet50", "fp32"), ("a100", "gpt2", "bf16"),
                                     ("k80", "bert-base", "fp32"), ("a100", "vit-b16", "fp32")):
        figure = zoo.profile(model, device=device, precision=precision).metadata["device_figure"]
        assert "DeepLearningExamples" in figure["source"] or "tensorflow/docs" in figure["source"]
        assert figure["throughput"] > 0 and figure["factor"] > 0
    assert "19.5/15.7" in published.figure("a100", "bert-base", "fp32").derived
    assert published.figure("a100", "resnet50", "fp32").derived == ""
    assert zoo.profile("resnet50", compute="roofline").metadata["source"] == "roofline estimate"


# ---------------------------------------------------------------------- refusals
@pytest.mark.parametrize("kwargs, message", [
    ({"precision": "fp16"}, "unknown precision 'fp16': choose one of fp32, bf16"),
    ({"compute": "measured"}, "unknown compute 'measured': choose one of calibrated, roofline"),
    ({"device": "v100", "precision": "bf16"}, "no bf16 on 'v100'"),
    ({"device": "k80", "precision": "bf16"}, "no bf16 on 'k80'"),
    ({"compute": "roofline", "precision": "bf16"}, "the roofline estimate takes no precision"),
    ({"compute": "roofline", "precision": "fp32"}, "the roofline estimate takes no precision"),
    ({"compute": "roofline", "optimizer": "sgd"}, "the roofline estimate has no optimiser"),
    ({"optimizer": "adam"}, "unknown optimizer 'adam': choose None or 'sgd'"),
    ({"device": Device("toy", 1e12, 0.5, "toy")}, "custom Device"),
])
def test_what_the_zoo_has_no_data_for_is_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")) as err:
        zoo.profile("bert-base", **kwargs)
    assert "\n" not in str(err.value)


def test_bf16_of_a_family_without_a_bf16_measurement_is_refused():
    with pytest.raises(ValueError, match=r"no bf16 measurement of an rnn model \(lstm-lm\) on the H100"):
        zoo.profile("lstm-lm", precision="bf16")
    assert zoo.profile("lstm-lm").metadata["precision"] == "fp32"


def test_a_custom_device_still_gives_a_roofline():
    toy = Device("toy", peak_flops=1e12, efficiency=1.0, description="toy")
    assert zoo.profile("vgg16", device=toy, batch=1, compute="roofline").F == pytest.approx(
        zoo.architecture("vgg16").flops / 1e12, rel=1e-12)


# ---------------------------------------------------------------------- layer kinds and work
def test_layer_kinds_and_their_work():
    assert conv2d("dw", 32, 32, 3, out=10, groups=32).kind == "depthwise"
    assert conv2d("g", 32, 64, 3, out=10, groups=2).kind == "conv"
    assert calibrated.work(conv2d("dw", 32, 32, 3, out=10, groups=32)) == 32 * 10 * 10   # output elements
    with pytest.raises(ValueError, match="layer 'x': unknown kind 'pool'"):
        Layer("x", (("x.weight", (2,)),), 0.0, kind="pool")
    assert all(layer.kind != "other" for name in zoo.models() for layer in zoo.architecture(name).layers)
    assert math.isinf(calibrated.work_arrays(zoo.architecture("bert-base"))[1][0])    # an embedding: no rate


# ---------------------------------------------------------------------- the validation script
def test_the_validation_script_writes_the_zoo_against_every_stored_step(tmp_path):
    path = Path(__file__).resolve().parents[2] / "validation" / "zoo" / "run.py"
    spec = importlib.util.spec_from_file_location("zoo_run", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "zoo-compute.json").read_text())
    assert len(document["steps"]) == len(STEPS)
    assert max(abs(row["error"]) for row in document["steps"]) < 0.15
    assert all(row["roofline"] < row["measured"] / 2 for row in document["steps"])
    assert len(document["devices"]) == len(published.FIGURES)
    assert "| resnet50 | 256 | fp32 |" in (tmp_path / "zoo-compute.md").read_text()
    # The steps measured after the fit are predicted by the zoo as it is: each row's zoo step
    # is the zoo's one-worker step of that case, its error against the later measurement.
    later = document["later_steps"]
    # run1 12 cases, run2 4, run3 12 and 9 more.
    assert len(later) == 37 and {r["precision"] for r in later} == {"fp32", "bf16"}
    row = next(r for r in later if (r["model"], r["batch"], r["precision"]) == ("resnet50", 128, "fp32"))
    profile = zoo.profile("resnet50", device="h100", batch=128, precision="fp32", optimizer="sgd")
    assert row["zoo"] == pytest.approx(script.one_worker_step(profile), rel=1e-12)
    assert row["error"] == pytest.approx(row["zoo"] / row["measured"] - 1.0, rel=1e-12)
    assert "## Held out: steps measured later" in (tmp_path / "zoo-compute.md").read_text()
