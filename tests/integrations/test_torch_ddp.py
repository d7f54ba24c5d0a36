"""A measured PyTorch profile, end to end: profile_model on CPU -> Problem -> DP plan -> the
closest DDP bucket_cap_mb, whose predicted T is the ddp baseline's for that cap.

Timings are measured, so nothing here asserts a wall-clock value: only structure, exact
sizes, and equalities or inequalities between independent computations."""

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from fusionopt.cost import AlphaBeta, network  # noqa: E402
from fusionopt.integrations import profile_model, require_torch  # noqa: E402
from fusionopt.model import Problem, Profile, simulate  # noqa: E402
from fusionopt.solvers import solve  # noqa: E402
from fusionopt.advice import ddp_settings  # noqa: E402
from fusionopt.model import read_profile_csv, write_profile_csv


def small_cnn() -> nn.Module:
    """12 parameter tensors, about 8.5 MB of float32 gradients."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 512), nn.ReLU(), nn.Linear(512, 10),
    )


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


@pytest.fixture(scope="module")
def cnn_profile() -> tuple[nn.Module, Profile]:
    model = small_cnn()
    x = torch.randn(16, 3, 32, 32)
    target = torch.randint(0, 10, (16,))
    loss_fn = lambda out: nn.functional.cross_entropy(out, target)  # noqa: E731
    return model, profile_model(model, x, loss_fn=loss_fn, steps=5, warmup=2)


def expected_sizes(model: nn.Module) -> tuple[list[str], list[int]]:
    named = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]
    return [nm for nm, _ in named], [p.numel() * p.element_size() for _, p in named]


def check_structure(profile: Profile, model: nn.Module) -> None:
    names, sizes = expected_sizes(model)
    assert sorted(profile.names) == sorted(names)
    assert dict(zip(profile.names, profile.sizes.tolist())) == dict(zip(names, sizes))
    assert profile.n == len(names)
    for times in (profile.forward, profile.backward, profile.update):
        assert (times >= 0).all()
    assert profile.B > 0 and profile.F > 0 and profile.U == 0
    assert sorted(profile.metadata["ready_order"]) == sorted(names)


# ---------------------------------------------------------------------------- structure
def test_mlp_structure_and_reverse_ready_order():
    model = mlp()
    p = profile_model(model, torch.randn(32, 256), steps=3, warmup=1)
    check_structure(p, model)
    names, sizes = expected_sizes(model)
    # A plain sequential model is used in registration order.
    assert p.names == tuple(names) and p.sizes.tolist() == sizes == [
        256 * 512 * 4, 512 * 4, 512 * 512 * 4, 512 * 4, 512 * 256 * 4, 256 * 4, 256 * 10 * 4, 10 * 4]
    assert p.metadata["ready_order"] == list(reversed(names))
    assert p.metadata["ready_order_is_reverse_forward"] is True
    # Backward reverse to forward: the profile's ready times are the measured ones, so they
    # fall with the forward index and the last tensor's gradient is ready first.
    assert (np.diff(p.ready_times) <= 0).all()
    # Each Linear's forward time sits on its bias, the last of its tensors.
    assert p.forward[0::2].tolist() == [0.0] * 4 and (p.forward[1::2] > 0).all()
    meta = p.metadata
    assert (meta["device"], meta["batch"], meta["steps"], meta["warmup"]) == ("cpu", 32, 3, 1)
    assert meta["torch"] == torch.__version__ and meta["timer"] == "time.perf_counter"
    assert meta["dtypes"] == ["float32"] and p.dtype_bytes == 4 and p.name == "Sequential"
    # The profile, metadata included, is plain JSON and round-trips.
    assert Profile.from_dict(json.loads(p.to_json())) == p


def test_one_step_profile_fits_inside_the_measured_step():
    # With one timed step the parts are taken from the very step whose wall time is recorded,
    # so they cannot exceed it (with several steps, a sum of medians need not stay below the
    # median of the sums).
    p = profile_model(mlp(), torch.randn(32, 256), steps=1, warmup=1, reconcile=False)
    assert 0 < p.F <= p.metadata["forward_step_s"]
    assert 0 < p.B <= p.metadata["backward_step_s"]
    # Reconciled, each part is scaled by the plain step's phase over the hooked one's, so it
    # stays inside the plain step's phase.
    p = profile_model(mlp(), torch.randn(32, 256), steps=1, warmup=1)
    reconciled = p.metadata["reconciled"]
    assert 0 < p.F <= reconciled["plain_forward_s"] * (1 + 1e-12)
    assert 0 < p.B <= reconciled["plain_backward_s"] * (1 + 1e-12)


def test_the_optimizer_is_the_update_lump_and_the_step_adds_up():
    # One timed step: its parts are that step's, and they add up to its period exactly; the
    # optimiser's zero_grad and step are the update lump, and the model is left as it was.
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    p = profile_model(model, torch.randn(32, 256), steps=1, warmup=1, optimizer=optimizer)
    step = p.metadata["step"]
    assert p.update_lump > 0 and p.post_backward == 0.0 and p.host_overhead > 0
    assert p.compute_time == pytest.approx(step["periods"][0], rel=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and optimizer.state_dict()["state"] == {}
    without = profile_model(model, torch.randn(32, 256), steps=1, warmup=1)
    assert without.update_lump == 0.0 and without.compute_time == pytest.approx(without.metadata["step"]["periods"][0])
    with pytest.raises(ValueError, match="optimizer must be a torch.optim.Optimizer, got list"):
        profile_model(model, torch.randn(32, 256), steps=1, optimizer=[])


def test_cnn_structure(cnn_profile):
    model, p = cnn_profile
    check_structure(p, model)
    assert p.n == 12
    assert p.names == tuple(expected_sizes(model)[0])


def test_forward_order_is_order_of_first_use():
    class Reversed(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(64, 8)     # registered first, used last
            self.body = nn.Linear(32, 64)

        def forward(self, x):
            return self.head(torch.relu(self.body(x)))

    model = Reversed()
    p = profile_model(model, torch.randn(4, 32), steps=2, warmup=0)
    assert p.names == ("body.weight", "body.bias", "head.weight", "head.bias")
    assert p.sizes.tolist() == [64 * 32 * 4, 64 * 4, 8 * 64 * 4, 8 * 4]
    assert p.metadata["ready_order"] == ["head.bias", "head.weight", "body.bias", "body.weight"]
    assert p.metadata["ready_order_is_reverse_forward"] is True


def test_reading_a_parameters_metadata_is_not_a_use():
    # nn.MultiheadAttention reads in_proj_bias.dtype before it touches in_proj_weight; the
    # first call that computes with them takes both, so registration order decides.
    class Checked(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(16, 16)
            self.second = nn.Linear(16, 4)

        def forward(self, x):
            assert self.second.weight.dtype == x.dtype and self.second.bias.shape == (4,)
            assert self.second.weight.size(0) == 4 and self.second.weight.dim() == 2
            return self.second(torch.relu(self.first(x)))

    p = profile_model(Checked(), torch.randn(4, 16), steps=1, warmup=0)
    assert p.names == ("first.weight", "first.bias", "second.weight", "second.bias")
    attention = profile_model(nn.MultiheadAttention(8, 2), (torch.randn(3, 1, 8),) * 3,
                              loss_fn=lambda out: out[0].sum(), steps=1, warmup=0)
    assert attention.names == ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")


def test_dtypes_frozen_tied_and_nested():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.frozen = nn.Linear(16, 16)
            self.frozen.requires_grad_(False)
            self.scale = nn.Parameter(torch.ones(16, dtype=torch.float64))
            self.out = nn.Linear(16, 50, bias=False)
            self.out.weight = self.embed.weight          # tied: one tensor, two modules

        def forward(self, tokens):
            h = self.frozen(self.embed(tokens))
            h = (h.double() * self.scale).float()        # the parent owns `scale`
            return self.out(h)

    model = Mixed()
    p = profile_model(model, torch.randint(0, 50, (4, 7)), steps=2, warmup=0)
    assert p.names == ("embed.weight", "scale")          # frozen left out, tied counted once
    assert p.sizes.tolist() == [50 * 16 * 4, 16 * 8]
    assert p.dtype_bytes == 4 and p.metadata["dtypes"] == ["float32", "float64"]
    assert p.metadata["batch"] == 4
    assert (p.forward >= 0).all() and (p.backward >= 0).all()


def test_unused_parameters_are_named():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(8, 8)
            self.spare = nn.Linear(8, 8)

        def forward(self, x):
            return self.used(x)

    with pytest.raises(ValueError, match="got no gradient .*'spare.weight', 'spare.bias'"):
        profile_model(Unused(), torch.randn(2, 8), steps=1, warmup=0)


def test_inputs_as_dict_and_grads_restored():
    class KW(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 3)

        def forward(self, *, x, y):
            return self.fc(x) + y

    model = KW()
    model.fc.bias.grad = torch.full((3,), 7.0)
    p = profile_model(model, {"x": torch.randn(5, 8), "y": torch.zeros(5, 3)}, steps=1, warmup=0, batch=64)
    assert p.names == ("fc.weight", "fc.bias") and p.metadata["batch"] == 64
    assert model.fc.bias.grad.tolist() == [7.0, 7.0, 7.0] and model.fc.weight.grad is None


@pytest.mark.parametrize("kwargs,message", [
    ({"steps": 0}, "steps must be an integer >= 1, got 0"),
    ({"warmup": -1}, "warmup must be an integer >= 0, got -1"),
    ({"steps": 2.5}, "steps must be an integer"),
    ({"loss_fn": lambda out: out}, r"the loss must be a tensor holding one number, got Tensor of shape \(2, 4\)"),
    ({"loss_fn": lambda out: 1.0}, "the loss must be a tensor holding one number, got float"),
    ({"device": "meta"}, "profile_model times CPU and CUDA devices only"),
    ({"device": "bogus"}, "device 'bogus' is not a torch device"),
])
def test_bad_arguments(kwargs, message):
    model = nn.Linear(3, 4)
    with pytest.raises(ValueError, match=message):
        profile_model(model, torch.randn(2, 3), **kwargs)
    assert model.weight.device.type == "cpu"      # a refused device leaves the model where it was


def test_not_a_module_and_no_trainable_parameter():
    with pytest.raises(ValueError, match="model must be a torch.nn.Module, got function"):
        profile_model(lambda x: x, torch.randn(2))
    with pytest.raises(ValueError, match="has no trainable parameter"):
        profile_model(nn.ReLU(), torch.randn(2))

    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x).detach()

    with pytest.raises(ValueError, match="no floating-point tensor that requires grad: pass loss_fn"):
        profile_model(Detached(), torch.randn(2, 3), steps=1)


def test_missing_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"pip install 'fusionopt\[torch\]'"):
        require_torch()
    with pytest.raises(ImportError, match=r"fusionopt\[torch\]"):
        profile_model(object(), None)


# ---------------------------------------------------------------------------- DDP, end to end
def fusion_problem(profile: Profile) -> Problem:
    """AlphaBeta scaled to the measured backward: a message costs B/4 to start, and sending
    every byte costs B. WFBP then spends n * B/4 + B >= 4B on the channel while one message
    after the backward finishes at 2.25B, so fusing strictly pays whatever was measured."""
    return Problem(profile, AlphaBeta(profile.B / 4, profile.B / profile.total_bytes))


def check_ddp_end_to_end(problem: Problem) -> None:
    dp = solve(problem, method="dp")
    s = ddp_settings(problem, dp.plan, min_gain=0.0)
    # The emitted setting's T is the ddp model's T for those arguments, exactly, and the
    # list reproduces the DP's plan (one dtype here; any gain counts with min_gain 0).
    baseline = solve(problem, method="ddp", **s.arguments)
    assert s.iteration_time == baseline.iteration_time
    assert [list(b) for b in s.buckets] == baseline.plan.groups()
    assert s.bucket_cap_mb_list is not None
    if s.kept_defaults:        # with min_gain 0 only a tie keeps them: a measured profile may give one
        assert dp.iteration_time == pytest.approx(s.default_iteration_time, rel=1e-9)
    else:
        assert baseline.plan.groups() == dp.plan.groups()
    assert simulate(problem, baseline.plan).iteration_time == baseline.iteration_time
    # The DP is optimal over fusion plans and DDP buckets are fusion plans; the single cap
    # is never slower than leaving it unset.
    assert s.plan_iteration_time == dp.iteration_time
    assert dp.iteration_time <= s.cap_iteration_time * (1 + 1e-12)
    assert s.cap_iteration_time <= s.default_iteration_time * (1 + 1e-9)
    assert s.default_iteration_time == solve(problem, method="ddp").iteration_time


def test_measured_profile_to_ddp_bucket_cap(cnn_profile):
    _, profile = cnn_profile
    problem = fusion_problem(profile)
    check_ddp_end_to_end(problem)
    dp = solve(problem, method="dp")
    wfbp = solve(problem, method="wfbp")
    assert dp.iteration_time < wfbp.iteration_time          # fusion matters here
    assert dp.num_messages < profile.n


def test_measured_profile_on_a_cluster_network(cnn_profile):
    _, profile = cnn_profile
    check_ddp_end_to_end(Problem(profile, network("10gbe", 64)))


def test_csv_round_trip_of_a_measured_profile(cnn_profile, tmp_path):
    _, measured = cnn_profile
    # A part that belongs to no tensor (the host's share of the step; measured, it may be 0).
    profile = measured.with_step_parts(host_overhead=max(measured.host_overhead, 1e-4))
    with pytest.warns(UserWarning, match="its step parts .* are not written"):
        write_profile_csv(profile, tmp_path / "cnn.csv")
    back = read_profile_csv(tmp_path / "cnn.csv", name=profile.name, metadata=profile.metadata)
    assert back == profile.with_step_parts(host_overhead=0.0)
    check_ddp_end_to_end(fusion_problem(back))


def test_forward_spans_count_parameter_free_work():
    # A parameter-free module that sleeps 5 ms between two Linear layers: with spans its
    # time counts for the first layer (on its bias), with exclusive times it is left out.
    import time as _time

    class Pause(torch.nn.Module):
        def forward(self, x):
            _time.sleep(5e-3)
            return x

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), Pause(), torch.nn.Linear(8, 2))
    span = profile_model(model, torch.randn(4, 8), steps=3, warmup=1)
    own = profile_model(model, torch.randn(4, 8), steps=3, warmup=1, forward="exclusive")
    assert span.metadata["forward_attribution"] == "span" and own.metadata["forward_attribution"] == "exclusive"
    assert span.forward[1] >= 5e-3 and own.forward[1] < 5e-3
    assert span.forward[0] == own.forward[0] == 0.0
    with pytest.raises(ValueError, match="unknown forward attribution 'all'"):
        profile_model(model, torch.randn(4, 8), forward="all")
