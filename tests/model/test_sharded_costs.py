"""Reduce-scatter and all-gather costs (MODEL.md sections 2 and 8)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusionopt.cost import (
    COLLECTIVES,
    hierarchical_all_gather,
    hierarchical_allreduce,
    hierarchical_reduce_scatter,
    network,
    network_link,
    rabenseifner_allreduce,
    read_nccl_tests,
    recursive_doubling_all_gather,
    recursive_halving_reduce_scatter,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)

A, G = 1e-5, 1e-9


def test_eight_workers_by_hand():
    # Ring: 7 steps of S/8 bytes each way; halving-doubling: 3 steps, the same bytes.
    assert (ring_reduce_scatter(8, A, G).alpha, ring_reduce_scatter(8, A, G).beta) == pytest.approx((7 * A, 0.875 * G))
    assert (ring_all_gather(8, A, G).alpha, ring_all_gather(8, A, G).beta) == pytest.approx((7 * A, 0.875 * G))
    halving = recursive_halving_reduce_scatter(8, A, G)
    assert (halving.alpha, halving.beta) == pytest.approx((3 * A, 0.875 * G))
    # 16 GPUs, 8 per node: 7 intra-node steps and 1 inter-node step each way.
    h = hierarchical_reduce_scatter(16, 8, A, G, A / 10, G / 100)
    assert (h.alpha, h.beta) == pytest.approx((7 * A / 10 + A, 7 / 8 * G / 100 + G / 2))
    assert ring_reduce_scatter(1, A, G)(1e9) == 0.0


workers = st.integers(1, 4096)
links = st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-8))


@given(workers, links)
def test_reduce_scatter_then_all_gather_is_the_all_reduce(p, link):
    a, g = link
    for rs, ag, ar in ((ring_reduce_scatter, ring_all_gather, ring_allreduce),
                       (recursive_halving_reduce_scatter, recursive_doubling_all_gather, rabenseifner_allreduce)):
        half, other, whole = rs(p, a, g), ag(p, a, g), ar(p, a, g)
        assert half.alpha + other.alpha == pytest.approx(whole.alpha, rel=1e-12, abs=1e-300)
        assert half.beta + other.beta == pytest.approx(whole.beta, rel=1e-12, abs=1e-300)
        for size in (1.0, 4e6):
            assert half(size) + other(size) == pytest.approx(whole(size), rel=1e-12, abs=1e-300)


@given(st.integers(1, 64), st.sampled_from([1, 2, 4, 8]), links, links)
def test_hierarchical_halves_make_the_all_reduce(nodes, gpus, inter, intra):
    p = nodes * gpus
    rs = hierarchical_reduce_scatter(p, gpus, *inter, *intra)
    ag = hierarchical_all_gather(p, gpus, *inter, *intra)
    whole = hierarchical_allreduce(p, gpus, *inter, *intra)
    assert rs == ag
    assert rs.alpha + ag.alpha == pytest.approx(whole.alpha, rel=1e-12, abs=1e-300)
    assert rs.beta + ag.beta == pytest.approx(whole.beta, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner"])
def test_presets_price_each_collective(collective, algorithm):
    latency, inverse_bandwidth = network_link("100gb-ib")
    assert network("100gb-ib", 64, algorithm=algorithm, collective=collective) == \
        COLLECTIVES[collective][algorithm](64, latency, inverse_bandwidth)
    half = network("100gb-ib", 64, algorithm=algorithm, collective=collective)
    whole = network("100gb-ib", 64, algorithm=algorithm)
    assert 2 * half(1e8) == pytest.approx(whole(1e8), rel=1e-12)


def test_what_a_collective_does_not_have_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^algorithm 'double_binary_tree' has no reduce_scatter; for it: ring, rabenseifner$"):
        network("10gbe", 8, algorithm="double_binary_tree", collective="reduce_scatter")
    with pytest.raises(ValueError, match="^network 'usbyte' is a measured all-reduce; it has no all_gather"):
        network("usbyte", 8, collective="all_gather")
    with pytest.raises(ValueError, match="^unknown collective 'allgather'; known: all_reduce, reduce_scatter, all_gather$"):
        network("10gbe", 8, collective="allgather")


REDUCE_SCATTER_PERF = """
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         32768     float     sum      -1    40.00   26.21   22.94      0    39.00   26.89   23.53      0
     2097152         65536     float     sum      -1    60.00   34.95   30.58      0    59.00   35.54   31.10      0
     4194304        131072     float     sum      -1   100.00   41.94   36.70      0    98.00   42.80   37.45      0
# Avg bus bandwidth    : 30.38
"""


def test_a_reduce_scatter_table_prices_the_unsharded_size():
    # reduce_scatter_perf on 8 ranks: the size column is the bytes each rank sends (S), the
    # count column S / 4 / 8 elements received; the curve is read on S.
    cost = read_nccl_tests(REDUCE_SCATTER_PERF)
    assert cost.sizes.tolist() == [1048576.0, 2097152.0, 4194304.0]
    assert cost(2097152) == pytest.approx(60e-6) and cost(3145728) == pytest.approx(80e-6)
