"""The padding comm hook (``fusionopt.integrations.padded_comm_hook``) on real DDP, 2 gloo
ranks: a model whose buckets break a 64-byte-a-rank alignment (odd layer widths); every
all-reduce the hook makes is the bucket rounded up to a multiple of 2 x 64 bytes, every
step's gradients are bit-identical to DDP's without a hook, and a unit that is not a whole
number of elements is refused in one line."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dist_helpers import gloo_rank, spawn_gloo  # noqa: E402

from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.integrations import EmulatedLink, padded_comm_hook  # noqa: E402

UNIT = 64


def _model():
    nn = torch.nn
    return nn.Sequential(nn.Linear(13, 7), nn.ReLU(), nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))


def _rank(rank, port, folder):
    from torch.nn.parallel import DistributedDataParallel as DDP

    with gloo_rank(rank, port, folder) as report:
        torch.manual_seed(0)
        plain, padded = _model(), _model()
        padded.load_state_dict(plain.state_dict())
        reference = DDP(plain, bucket_cap_mb=1e-4)              # a bucket of about 100 B: one per layer or so
        mine = DDP(padded, bucket_cap_mb=1e-4)
        link = EmulatedLink(AlphaBeta(1e-4, 0.0))
        hook = padded_comm_hook(UNIT, link=link)
        mine.register_comm_hook(None, hook)
        report["same"], report["buckets"] = [], []
        for step in range(3):
            x = torch.randn(8, 13, generator=torch.Generator().manual_seed(10 * step + rank))
            for ddp in (reference, mine):
                ddp.zero_grad()
                ddp(x).pow(2).mean().backward()
            report["same"].append(all(torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(),
                                                                                   padded.parameters())))
        report["sent"] = list(hook.sent)
        report["held"] = [h.nbytes for h in link.log]
        report["bucket_bytes"] = sorted(p.numel() * p.element_size() for p in plain.parameters())
        odd = DDP(_model())
        odd.register_comm_hook(None, padded_comm_hook(6))
        try:
            odd(torch.randn(2, 13)).sum().backward()
        except Exception as exc:                               # DDP re-raises the hook's error
            report["odd"] = str(exc)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return spawn_gloo(_rank, tmp_path_factory.mktemp("padded"))


def test_every_all_reduce_is_a_multiple_of_the_alignment(reports):
    for report in reports:
        assert report["sent"] and all(nbytes % (2 * UNIT) == 0 for nbytes in report["sent"])
        assert report["held"] == report["sent"]                # the link held what went on the wire
        # Three steps of every gradient once, each bucket padded by less than one alignment step.
        total, sent = 3 * sum(report["bucket_bytes"]), report["sent"]
        assert total < sum(sent) < total + 2 * UNIT * len(sent)


def test_the_gradients_are_ddps_own_bit_for_bit(reports):
    for report in reports:
        assert report["same"] == [True, True, True]


def test_a_unit_that_splits_an_element_is_refused(reports):
    for report in reports:
        assert "unit 6 B is not a whole number of the bucket's 4-byte elements" in report["odd"]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="unit must be a whole number of bytes >= 1, got 0"):
        padded_comm_hook(0)
    with pytest.raises(ValueError, match="link must be an EmulatedLink, got AlphaBeta"):
        padded_comm_hook(64, link=AlphaBeta(1e-4, 0.0))
