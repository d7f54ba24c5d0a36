"""fusionopt's DDP buckets against real DistributedDataParallel (gloo, CPU, world size 1).

A comm hook records, per bucket index, the parameters torch put in each bucket; after the
rebuild (third step) that is the steady-state layout the ``ddp`` model claims.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

from dist_helpers import one_rank_group  # noqa: E402

from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.integrations import ddp_bucket_layout, profile_model  # noqa: E402
from fusionopt.model import Problem  # noqa: E402
from fusionopt.solvers import solve  # noqa: E402
from fusionopt.advice import ddp_settings  # noqa: E402
from fusionopt.solvers.baselines import ddp_buckets  # noqa: E402

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def process_group():
    with one_rank_group():
        yield


class Mixed(nn.Module):
    """Convolution, batch norm, layer norm, LSTM and linear layers, about 9 MiB of fp32."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3)
        self.bn = nn.BatchNorm2d(64)
        self.proj = nn.Linear(64, 512)
        self.rnn = nn.LSTM(512, 256)                      # 3 MiB
        self.norm = nn.LayerNorm(256)
        self.wide = nn.Linear(256, 4096)                  # 4 MiB
        self.head = nn.Linear(4096, 64)                   # 1 MiB

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))
        seq = self.proj(y).unsqueeze(0).repeat(3, 1, 1)
        h = self.norm(self.rnn(seq)[0][-1])
        return self.head(torch.relu(self.wide(h)))


class TwoDtypes(nn.Module):
    """float64 and float32 layers side by side: DDP keeps one bucket per dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(256, 256).double()
        self.b = nn.Linear(256, 512)
        self.c = nn.Linear(512, 256).double()
        self.d = nn.Linear(256, 600)

    def forward(self, x):
        y = self.b(self.a(x.double()).float())
        return self.d(self.c(y.double()).float())


def model_layout(profile, **options) -> list[list[str]]:
    return [[profile.names[i] for i in bucket] for bucket in ddp_buckets(profile, **options)]


CASES = [
    {},
    {"bucket_cap_mb": 1},
    {"bucket_cap_mb": 5},
    {"bucket_cap_mb": 25},
    {"bucket_cap_mb": 100},
    {"bucket_cap_mb": 0.3},
    {"bucket_cap_mb_list": [0.5, 2, 3.5]},
    {"find_unused_parameters": True},
    {"find_unused_parameters": True, "bucket_cap_mb": 1},
    {"find_unused_parameters": True, "bucket_cap_mb_list": [0.5, 2]},
    {"static_graph": True, "bucket_cap_mb": 1},
]


@pytest.fixture(scope="module")
def mixed():
    torch.manual_seed(0)
    model, inputs = Mixed(), torch.randn(2, 3, 8, 8)
    return model, inputs, profile_model(model, inputs, steps=1, warmup=0)


@pytest.fixture(scope="module")
def two_dtypes():
    torch.manual_seed(0)
    model, inputs = TwoDtypes(), torch.randn(2, 256)
    return model, inputs, profile_model(model, inputs, steps=1, warmup=0)


@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_layouts_equal_real_ddp(mixed, options):
    model, inputs, profile = mixed
    assert model_layout(profile, **options) == ddp_bucket_layout(model, inputs, **options)


@pytest.mark.parametrize("options", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_layouts_over_two_dtypes_equal_real_ddp(two_dtypes, options):
    model, inputs, profile = two_dtypes
    assert model_layout(profile, **options) == ddp_bucket_layout(model, inputs, **options)


def test_the_unset_cap_differs_from_an_explicit_25(mixed):
    # Unset: a 1 MiB first bucket; bucket_cap_mb=25: the first bucket takes 25 MiB too.
    _, _, profile = mixed
    assert model_layout(profile) != model_layout(profile, bucket_cap_mb=25)


@pytest.mark.parametrize("alpha", [1e-4, 3e-3])
def test_the_advised_list_makes_ddp_build_the_plan(mixed, alpha):
    model, inputs, profile = mixed
    problem = Problem(profile, AlphaBeta(alpha, 1e-9))
    for method in ("dp", "wfbp", "mgwfbp"):
        plan = solve(problem, method).plan
        s = ddp_settings(problem, plan)
        assert s.bucket_cap_mb_list is not None
        built = ddp_bucket_layout(model, inputs, bucket_cap_mb_list=list(s.bucket_cap_mb_list))
        assert built == [[profile.names[i] for i in group] for group in plan.groups()]
        if s.bucket_cap_mb is not None:
            assert ddp_bucket_layout(model, inputs, bucket_cap_mb=s.bucket_cap_mb) == model_layout(
                profile, bucket_cap_mb=s.bucket_cap_mb)
