"""torch's ``powerSGD_hook`` (torch 2.13) on real DDP, 2 gloo ranks: what it puts on the wire is
what ``fusionopt.cost.PowerSGD`` says. The first ``start_powerSGD_iter`` steps all-reduce each
bucket whole; later steps all-reduce, per bucket, its uncompressed gradients, then the ``P``
factors, then the ``Q`` factors, with the element counts the model's split gives from the
bucket's shapes, and torch's own compression statistics are the model's.

One bucket: on gloo the hook's later all-reduces are issued from the callbacks of earlier ones,
so with several buckets the ranks may issue them in different orders, and gloo aborts on the
mismatch (checked: two buckets at 0.05 MB end in ``EnforceNotMet ... Is there a distributed
collective mismatch``). On an emulated link (``powersgd_comm_hook``) each bucket has a process
group of its own, and several buckets run: each of the hook's all-reduces is held, the next
posted only once the last is back, and ``apply_advice`` registers an advice's hook so."""

import contextlib
import math

import pytest

from fusionopt.cost import PowerSGD

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

from dist_helpers import gloo_rank, spawn_gloo  # noqa: E402

RANK, START = 2, 2


def _net():
    nn = torch.nn
    # conv (16, 3, 3, 3) and the 96 x 576 weight are compressed at rank 2; the 4 x 96 weight
    # just misses ((4 + 96) 2 x 2 = 400 > 384), and the smaller matrices and the biases never pass.
    return nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(576, 96), nn.ReLU(),
                         nn.Linear(96, 4), nn.ReLU(), nn.Linear(4, 3), nn.Linear(3, 1))


@contextlib.contextmanager
def _logged_all_reduces(sink):
    """Every ``dist.all_reduce`` while open appends ``[dtype, numel]`` to ``sink``."""
    sent = dist.all_reduce

    def logged(tensor, *args, **kwargs):
        sink.append([str(tensor.dtype).replace("torch.", ""), tensor.numel()])
        return sent(tensor, *args, **kwargs)

    dist.all_reduce = logged
    try:
        yield
    finally:
        dist.all_reduce = sent


def _run(rank, report):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.nn.parallel import DistributedDataParallel as DDP

    sink = []
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START,
                               min_compression_rate=2)

    def hook(state, bucket):
        sink.append(["bucket", bucket.index(), [list(g.shape) for g in bucket.gradients()]])
        return psgd.powerSGD_hook(state, bucket)

    torch.manual_seed(0)
    ddp = DDP(_net(), bucket_cap_mb=1)
    ddp.register_comm_hook(state, hook)
    with _logged_all_reduces(sink):
        for step in range(START + 2):
            x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(10 * step + rank))
            ddp.zero_grad()
            sink.clear()
            ddp(x).pow(2).mean().backward()
            report["steps"].append(list(sink))
    report["stats"] = list(state.compression_stats())
    report["shapes"] = [list(p.shape) for p in ddp.module.parameters()]


def _mixed(rank, report):
    """The hook as one choice per message (``wire_comm_hook(..., powersgd=, through=)``): the
    bucket DDP marks last (the first layer's) through ``powerSGD_hook``, the other in fp16;
    and a second job whose hook buckets are none, where the hook counts the steps itself."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.integrations import wire_comm_hook

    nn = torch.nn
    sink = []
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))
              for _ in range(2)]
    states = [psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START,
                                 min_compression_rate=2) for _ in models]
    hooks = [wire_comm_hook([(0, "fp16")], powersgd=state, through=through)
             for state, through in zip(states, ([models[0][0].weight], []))]
    wrapped = [DDP(model, bucket_cap_mb=0.02) for model in models]
    for ddp, hook in zip(wrapped, hooks):
        ddp.register_comm_hook(None, hook)
    report["mixed"], report["iters"] = [], []
    with _logged_all_reduces(sink):
        for step in range(START + 2):
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + rank))
            for k, ddp in enumerate(wrapped):
                ddp.zero_grad()
                sink.clear()
                ddp(x).pow(2).mean().backward()
                if k == 0:
                    report["mixed"].append(list(sink))
            report["iters"].append([state.iter for state in states])
    report["sent"] = [hook.sent for hook in hooks]
    report["mixed_shapes"] = [list(p.shape) for p in models[0].parameters()]


def _rank(rank, port, folder):
    with gloo_rank(rank, port, folder, report_errors=True) as report:
        report["steps"] = []
        _run(rank, report)
        _mixed(rank, report)
        _held(rank, report)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    documents = spawn_gloo(_rank, tmp_path_factory.mktemp("powersgd"))
    assert [d.get("error") for d in documents] == [None, None]
    return documents


def _buckets(step):
    """Each bucket of a step's record with the all-reduces it issued: [(shapes, [numel, ...])]."""
    out = []
    for entry in step:
        if entry[0] == "bucket":
            out.append((entry[2], []))
        else:
            out[-1][1].append(entry[1])
    return out


def test_the_first_steps_all_reduce_each_bucket_whole(reports):
    import math

    for report in reports:
        for step in report["steps"][:START]:
            for shapes, sent in _buckets(step):
                assert sent == [sum(math.prod(s) for s in shapes)]


def test_then_each_bucket_sends_what_the_models_split_says(reports):
    model = PowerSGD(rank=RANK, start_iter=START, min_compression_rate=2)
    for report in reports:
        for step in report["steps"][START:]:
            buckets = _buckets(step)
            assert len(buckets) == 1
            for shapes, sent in buckets:
                assert sent == list(model.split(shapes).elements)
        # Which tensors the hook compressed: the conv's and the 96 x 576 weights only.
        split = model.split(report["shapes"])
        assert [list(s) for s, c in zip(report["shapes"], split.compressed) if c] == [[16, 3, 3, 3], [96, 576]]


def test_torchs_compression_statistics_are_the_models(reports):
    model = PowerSGD(rank=RANK, start_iter=START)
    for report in reports:
        rate, before, after = report["stats"]
        split = model.split(report["shapes"])
        # Two compressed steps, every tensor counted once a step.
        assert (before, after) == (2 * sum(split.numel), 2 * sum(split.elements))
        assert rate == pytest.approx(split.compression_rate(), rel=1e-12)
        # By hand: 56,247 elements; after, the conv's (16 + 27) 2 = 86, the 96 x 576 weight's
        # (96 + 576) 2 = 1,344 and the 519 left whole: 1,949.
        assert (before, after) == (2 * 56247, 2 * 1949)


def test_the_hook_as_one_choice_per_bucket_sends_what_the_model_prices(reports):
    import math

    model = PowerSGD(rank=RANK, start_iter=START, min_compression_rate=2)
    for report in reports:
        shapes = report["mixed_shapes"]
        first_layer, rest = shapes[:2], shapes[2:]
        # Both jobs count one step a step, the second with no bucket through the hook.
        assert report["iters"] == [[k + 1, k + 1] for k in range(START + 2)]
        # DDP's first step: one bucket (its first takes 1 MiB), holding the first layer: through
        # the hook, which all-reduces it whole in its warm-up.
        assert [name for name, _ in report["sent"][0][:1]] == ["powersgd"]
        assert report["mixed"][0] == [["float32", sum(math.prod(s) for s in shapes)]]
        # Then two buckets: the later layers in fp16, then the first layer through the hook,
        # whole in the warm-up, and after it as the model's split says (its bias as it is,
        # then the weight's P and Q factors).
        for step, wire in enumerate(report["mixed"][1:], start=1):
            fp16 = ["float16", sum(math.prod(s) for s in rest)]
            if step < START:
                assert wire == [fp16, ["float32", sum(math.prod(s) for s in first_layer)]]
            else:
                assert wire == [fp16] + [["float32", n] for n in model.split(first_layer).elements]
        assert {name for name, _ in report["sent"][1]} == {"fp16"}


def test_the_mixed_hook_refuses_what_it_cannot_send():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    from fusionopt.cost import AlphaBeta
    from fusionopt.integrations import EmulatedLink, HeldGroup, wire_comm_hook

    weight = torch.nn.Parameter(torch.zeros(4, 4))
    state = psgd.PowerSGDState(process_group=None, start_powerSGD_iter=2)
    with pytest.raises(ValueError, match=r"^through names the parameters whose buckets go through powerSGD_hook"):
        wire_comm_hook([(0, "fp16")], through=[weight])
    with pytest.raises(ValueError, match=r"^powersgd must be torch's PowerSGDState, got int$"):
        wire_comm_hook([(0, "fp16")], powersgd=1, through=[weight])
    with pytest.raises(ValueError, match=r"^groups are the process groups of the buckets through powerSGD_hook: give "
                                         r"powersgd too$"):
        wire_comm_hook([(0, "fp16")], link=EmulatedLink(AlphaBeta(0, 0)), groups=[object()])
    with pytest.raises(ValueError, match=r"^groups are the process groups whose all-reduces the link holds: give "
                                         r"link too$"):
        wire_comm_hook([(0, "fp16")], powersgd=state, through=[weight], groups=[object()])
    with pytest.raises(ValueError, match=r"^group must be a torch.distributed process group, got NoneType$"):
        HeldGroup(EmulatedLink(AlphaBeta(0, 0)), None)
    with pytest.raises(ValueError, match=r"^a parameter is both kept exact"):
        wire_comm_hook([(0, "fp16")], exact=[weight], powersgd=state, through=[weight])


def _held(rank, report):
    """torch's hook on an emulated link (``powersgd_comm_hook``): several buckets, each on a
    process group of its own; and an advice whose every bucket goes through the hook, applied
    with ``apply_advice`` on a link."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.advice import ddp_settings
    from fusionopt.cost import AlphaBeta
    from fusionopt.integrations import EmulatedLink, apply_advice, powersgd_comm_hook
    from fusionopt.model import Plan, Problem, Profile

    link = EmulatedLink(AlphaBeta(1e-3, 0.0))
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=RANK, start_powerSGD_iter=START,
                               min_compression_rate=2)
    inner = powersgd_comm_hook(state, link, [dist.new_group() for _ in range(6)])
    buckets = []

    def hook(state, bucket):
        buckets[-1].append([list(g.shape) for g in bucket.gradients()])
        return inner(state, bucket)

    torch.manual_seed(0)
    ddp = DDP(_net(), bucket_cap_mb=0.05)
    ddp.register_comm_hook(state, hook)
    report["held"] = []
    for step in range(START + 2):
        x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(10 * step + rank))
        ddp.zero_grad()
        link.reset()
        buckets.append([])
        ddp(x).pow(2).mean().backward()
        report["held"].append({"buckets": buckets[-1], "log": [list(hold) for hold in link.log]})
    report["held_parameters"] = [float(p.detach().double().sum()) for p in ddp.module.parameters()]

    torch.manual_seed(0)
    model = _net()
    shapes = [tuple(p.shape) for p in model.parameters()]
    sizes = [4 * math.prod(s) for s in shapes]
    profile = Profile.from_arrays(sizes, [1e-4] * len(sizes), [1e-4] * len(sizes),
                                  [n for n, _ in model.named_parameters()], shapes=shapes)
    problem, hook = Problem(profile, AlphaBeta(1e-3, 1e-9)), PowerSGD(rank=RANK, start_iter=START)
    advice = ddp_settings(problem, Plan.from_groups(hook.priced(problem).profile, [list(range(len(sizes)))[::-1]]),
                          powersgd=hook)
    link = EmulatedLink(AlphaBeta(0.02, 0.0))         # 20 ms a message: longer than a loopback all-reduce
    advised = apply_advice(model, {"ddp": advice.to_dict()}, framework="ddp", link=link)
    report["advised"] = []
    for step in range(START + 2):
        x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(10 * step + rank))
        advised.zero_grad()
        link.reset()
        advised(x).pow(2).mean().backward()
        report["advised"].append([list(hold) for hold in link.log])
    report["advised_shapes"] = [list(s) for s in shapes]


def test_on_an_emulated_link_each_of_the_hooks_all_reduces_is_held(reports):
    model = PowerSGD(rank=RANK, min_compression_rate=2)
    for report in reports:
        steps = report["held"]
        assert all(len(step["buckets"]) >= 2 for step in steps[1:])       # several buckets, no abort
        for step, record in enumerate(steps):
            sent = sorted(hold[0] for hold in record["log"])
            if step < START:      # the warm-up: each bucket whole, one message
                assert sent == sorted(4 * sum(math.prod(s) for s in shapes) for shapes in record["buckets"])
            else:                 # then three a bucket, the model's split in fp32 bytes, empty ones included
                assert sent == sorted(4 * n for shapes in record["buckets"] for n in model.split(shapes).elements)
    # Both ranks end with the same parameters: the same sums, bucket by bucket, in every group.
    assert reports[0]["held_parameters"] == reports[1]["held_parameters"]


def test_apply_advice_registers_the_advised_powersgd_hook_on_the_link(reports):
    model = PowerSGD(rank=RANK, min_compression_rate=2)
    whole = [tuple(s) for s in reports[0]["advised_shapes"]]
    for report in reports:
        # The advice's one bucket: whole in the warm-up (DDP's first step builds its own), then
        # the three all-reduces of the model's split.
        sent = [[hold[0] for hold in step] for step in report["advised"]]
        assert sent[START:] == [[4 * n for n in model.split(whole).elements]] * 2
        assert sent[1] == [4 * sum(math.prod(s) for s in whole)]
        # The hook issues P once the link delivers U, and Q after P: each posted after the
        # one before it left the link (Hold: nbytes, start, end, posted).
        for step in report["advised"][START:]:
            assert step[1][3] >= step[0][2] and step[2][3] >= step[1][2]
