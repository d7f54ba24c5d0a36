"""Tests of the communication cost models, collectives, presets and benchmark readers."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import (
    ALGORITHMS,
    AlphaBeta,
    CommCost,
    Composite,
    PiecewiseLinear,
    cost_from_dict,
    double_binary_tree_allreduce,
    hierarchical_allreduce,
    network,
    network_link,
    networks,
    rabenseifner_allreduce,
    read_nccl_tests,
    read_osu,
    recursive_doubling_allreduce,
    ring_allreduce,
)

A, G = 1e-5, 1e-9  # per-link latency (s) and inverse bandwidth (s/B) for hand-worked cases


# --- collectives -------------------------------------------------------------------------------

@pytest.mark.parametrize("build, alpha, beta", [
    (ring_allreduce, 14 * A, 1.75 * G),                 # 2*7 a, 2*7/8 g
    (recursive_doubling_allreduce, 3 * A, 3 * G),       # log2 8 = 3
    (rabenseifner_allreduce, 6 * A, 1.75 * G),          # 2*3 a, 2*7/8 g
    (double_binary_tree_allreduce, 6 * A, 1.75 * G),
])
def test_collectives_for_eight_workers(build, alpha, beta):
    cost = build(8, A, G)
    assert isinstance(cost, AlphaBeta)
    assert cost.alpha == pytest.approx(alpha, rel=1e-12)
    assert cost.beta == pytest.approx(beta, rel=1e-12)
    assert cost(1e6) == pytest.approx(alpha + beta * 1e6, rel=1e-12)


@pytest.mark.parametrize("build", list(ALGORITHMS.values()))
def test_one_worker_costs_nothing(build):
    cost = build(1, A, G)
    assert (cost.alpha, cost.beta) == (0.0, 0.0)
    assert cost(1e9) == 0.0


def test_recursive_doubling_four_workers():
    cost = recursive_doubling_allreduce(4, A, G)
    assert (cost.alpha, cost.beta) == pytest.approx((2 * A, 2 * G))


def test_hierarchical_hand_worked():
    # P = 16, G = 8, N = 2: alpha = 2*7*1e-6 + 2*1*1e-5, beta = 2*7/8*1e-11 + 2*1/2*1e-9
    cost = hierarchical_allreduce(16, 8, A, G, 1e-6, 1e-11)
    assert cost.alpha == pytest.approx(3.4e-5, rel=1e-12)
    assert cost.beta == pytest.approx(1.0175e-9, rel=1e-12)


def test_hierarchical_degenerates_to_a_ring():
    # One GPU per node: only the inter-node ring is left; one node: only the intra-node rings.
    flat = hierarchical_allreduce(8, 1, A, G, 1e-6, 1e-11)
    assert (flat.alpha, flat.beta) == pytest.approx((ring_allreduce(8, A, G).alpha,
                                                     ring_allreduce(8, A, G).beta))
    node = hierarchical_allreduce(8, 8, A, G, 1e-6, 1e-11)
    ring = ring_allreduce(8, 1e-6, 1e-11)
    assert (node.alpha, node.beta) == pytest.approx((ring.alpha, ring.beta))
    assert hierarchical_allreduce(1, 1, A, G, A, G)(1e6) == 0.0


def test_hierarchical_needs_whole_nodes():
    with pytest.raises(ValueError, match=r"workers \(12\) must be a multiple of gpus_per_node \(8\)"):
        hierarchical_allreduce(12, 8, A, G, A, G)
    with pytest.raises(ValueError, match="gpus_per_node"):
        hierarchical_allreduce(8, 0, A, G, A, G)
    with pytest.raises(ValueError, match="intra_inverse_bandwidth"):
        hierarchical_allreduce(8, 4, A, G, A, -1.0)


@pytest.mark.parametrize("workers", [0, -3, 2.5, 8.0, True, "8", None])
def test_collective_rejects_bad_worker_counts(workers):
    with pytest.raises(ValueError, match="workers"):
        ring_allreduce(workers, A, G)


@pytest.mark.parametrize("field, latency, inverse_bandwidth", [
    ("latency", float("nan"), G),
    ("latency", -1e-6, G),
    ("latency", "fast", G),
    ("inverse_bandwidth", A, float("inf")),
    ("inverse_bandwidth", A, -G),
])
def test_collective_rejects_bad_link_parameters(field, latency, inverse_bandwidth):
    for build in ALGORITHMS.values():
        with pytest.raises(ValueError, match=field):
            build(8, latency, inverse_bandwidth)


def test_collective_accepts_numpy_integers():
    assert ring_allreduce(np.int64(8), A, G) == ring_allreduce(8, A, G)


# --- presets -----------------------------------------------------------------------------------

# Per link and direction, from the sources the presets cite (line and data rates).
BANDWIDTHS = {"1gbe": 1.25e8, "10gbe": 1.25e9, "25gbe": 3.125e9, "100gb-ib": 12.5e9, "nvlink-h100": 450e9,
              "nvlink-a100": 300e9, "pcie4": 32e9, "pcie5": 64e9, "200gb-ib": 25e9, "400gb-ib": 50e9}


@pytest.mark.parametrize("name", sorted(BANDWIDTHS))
@pytest.mark.parametrize("workers", [1, 2, 8, 64])
def test_preset_ring_beta(name, workers):
    cost = network(name, workers)
    assert cost.beta == pytest.approx(2 * (workers - 1) / workers / BANDWIDTHS[name], rel=1e-12)
    latency, inverse_bandwidth = network_link(name)
    assert inverse_bandwidth == pytest.approx(1 / BANDWIDTHS[name], rel=1e-15)
    assert cost.alpha == pytest.approx(2 * (workers - 1) * latency, rel=1e-12)


def test_preset_latencies_are_plausible():
    # Nominal values: tens of microseconds for TCP Ethernet, a few for IB and NVLink.
    assert 1e-5 <= network_link("10gbe")[0] <= 1e-4
    assert 1e-5 <= network_link("25gbe")[0] <= 1e-4
    assert 1e-7 <= network_link("100gb-ib")[0] <= 1e-5
    assert 1e-7 <= network_link("nvlink-h100")[0] <= 1e-5


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_preset_algorithm_dispatch(algorithm):
    latency, inverse_bandwidth = network_link("100gb-ib")
    assert network("100GB-IB", 16, algorithm=algorithm) == ALGORITHMS[algorithm](16, latency,
                                                                                 inverse_bandwidth)


def test_networks_lists_the_presets():
    described = networks()
    assert set(described) == set(BANDWIDTHS) | {"mgwfbp-10gbe", "mgwfbp-56gbib", "usbyte"}
    assert all(isinstance(text, str) and text and "\n" not in text for text in described.values())


def test_mgwfbp_fitted_presets():
    # PAPERS.md seed 1, the reference code's constants.
    assert network("mgwfbp-10gbe", 16) == AlphaBeta(9.0810e-04, 7.3957e-10)
    assert network("mgwfbp-56gbib", 8) == AlphaBeta(9.7537e-05, 3.0568e-10)
    assert network("MGWFBP-56GbIB", 2) == AlphaBeta(2.5547e-06, 9.8375e-11)
    with pytest.raises(ValueError, match="fitted constants for workers = 2, 4, 8, 16 only, not 32"):
        network("mgwfbp-10gbe", 32)
    with pytest.raises(ValueError, match="measured all-reduce; algorithm 'rabenseifner' does not apply"):
        network("mgwfbp-10gbe", 8, algorithm="rabenseifner")
    with pytest.raises(ValueError, match="fitted all-reduce, not a link"):
        network_link("mgwfbp-10gbe")


def test_unknown_preset_or_algorithm():
    with pytest.raises(ValueError, match=r"unknown network '40gbe'; known: 100gb-ib, 10gbe, 1gbe, 200gb-ib, 25gbe, 400gb-ib, mgwfbp-10gbe, mgwfbp-56gbib, nvlink-a100, nvlink-h100, pcie4, pcie5, usbyte"):
        network("40gbe", 8)
    with pytest.raises(ValueError, match=r"unknown algorithm 'butterfly'; known: ring"):
        network("10gbe", 8, algorithm="butterfly")
    with pytest.raises(ValueError, match="workers"):
        network("10gbe", 0)


# --- PiecewiseLinear ---------------------------------------------------------------------------

def test_piecewise_interpolates_and_extrapolates_exactly():
    cost = PiecewiseLinear([2000, 1000, 4000], [30e-6, 10e-6, 50e-6])  # unsorted on purpose
    sizes = [0, 1, 500, 1000, 1500, 2000, 3000, 4000, 6000]
    expected = [0, 10e-6, 10e-6, 10e-6, 20e-6, 30e-6, 40e-6, 50e-6, 70e-6]
    assert cost(sizes) == pytest.approx(expected, rel=1e-12, abs=0)
    assert cost.sizes.tolist() == [1000, 2000, 4000]
    assert cost.affine is None


def test_piecewise_single_point_is_constant():
    cost = PiecewiseLinear([4096], [3e-5])
    assert cost([0, 1, 4096, 1e9]).tolist() == [0.0, 3e-5, 3e-5, 3e-5]
    assert cost.affine == (3e-5, 0.0)


def test_piecewise_flat_curve_is_affine():
    assert PiecewiseLinear([1, 10], [2e-6, 2e-6]).affine == (2e-6, 0.0)


def test_piecewise_keeps_shape_and_returns_float_for_scalars():
    cost = PiecewiseLinear([1000, 2000], [1e-5, 2e-5])
    assert isinstance(cost(1500), float)
    grid = np.array([[0, 1000], [1500, 3000]])
    assert cost(grid) == pytest.approx(np.array([[0, 1e-5], [1.5e-5, 3e-5]]))
    assert cost(grid).shape == (2, 2)


def test_piecewise_repair_averages_duplicates_and_takes_running_maximum():
    cost = PiecewiseLinear([8, 16, 16, 32, 64], [5e-6, 7e-6, 9e-6, 6e-6, 1e-5], repair=True)
    assert cost.sizes.tolist() == [8, 16, 32, 64]
    assert cost.times.tolist() == pytest.approx([5e-6, 8e-6, 8e-6, 1e-5])


def test_piecewise_scaled():
    cost = PiecewiseLinear([1000, 2000], [1e-5, 2e-5]).scaled(3)
    assert cost([500, 3000]) == pytest.approx([3e-5, 9e-5])
    with pytest.raises(ValueError, match="scale"):
        cost.scaled(-1)


@pytest.mark.parametrize("sizes, times, message", [
    ([], [], "at least one measured point"),
    ([1, 2], [1e-6], r"differ in length \(2 sizes, 1 times\)"),
    ([1, 0], [1e-6, 2e-6], r"point 1: size 0.0 B must be positive"),
    ([1, -5], [1e-6, 2e-6], r"point 1: size -5.0 B"),
    ([1, float("nan")], [1e-6, 2e-6], r"point 1: size nan B"),
    ([1, float("inf")], [1e-6, 2e-6], r"point 1: size inf B"),
    ([1, 2], [1e-6, float("nan")], r"point 1 \(size 2 B\): time nan s must be finite"),
    ([1, 2], [-1e-6, 2e-6], r"point 0 \(size 1 B\): time -1e-06 s must be finite and >= 0"),
    ([1, 2], ["a", 2e-6], "times must be numbers"),
    ([[1, 2]], [[1e-6, 2e-6]], "sizes must be a flat sequence"),
    ([4096, 1024, 4096], [1e-5, 5e-6, 2e-5], r"points 0 and 2 both have size 4096 B"),
    ([1024, 2048, 4096], [1e-5, 1.5e-5, 1.2e-5],
     r"point 2 \(size 4096 B\): time 1.2e-05 s is below the previous point's 1.5e-05 s"),
])
def test_piecewise_rejects_bad_points(sizes, times, message):
    with pytest.raises(ValueError, match=message):
        PiecewiseLinear(sizes, times)


def test_piecewise_monotonicity_error_names_the_callers_point():
    # Given unsorted, the culprit is still the caller's point 0 (size 4096 B).
    with pytest.raises(ValueError, match=r"point 0 \(size 4096 B\): time 1e-06 s"):
        PiecewiseLinear([4096, 1024], [1e-6, 5e-6])


# --- Composite ---------------------------------------------------------------------------------

def test_composite_sums_scaled_parts():
    measured = PiecewiseLinear([1000, 2000], [1e-5, 2e-5])
    cost = Composite([(AlphaBeta(1e-4, 1e-9), 1.0), (measured, 0.5)])
    # 1e-4 + 1e-9 * 4000 + measured(2000)
    assert cost(4000) == pytest.approx(1e-4 + 4e-6 + 2e-5, rel=1e-12)
    assert cost(0) == 0.0
    assert cost.affine is None


def test_composite_affine_is_the_sum():
    cost = Composite([(AlphaBeta(1e-4, 1e-9), 1.0), (AlphaBeta(2e-4, 2e-9), 0.25)])
    assert cost.affine == pytest.approx((3e-4, 1.5e-9))
    assert cost(1e6) == pytest.approx(3e-4 + 1.5e-3, rel=1e-12)
    doubled = cost.scaled(2)
    assert doubled.affine == pytest.approx((6e-4, 3e-9))


@pytest.mark.parametrize("terms, message", [
    ([], "at least one"),
    ([(AlphaBeta(1, 1), 0.0)], r"term 0: scale must be > 0"),
    ([(AlphaBeta(1, 1), 1.0), (AlphaBeta(1, 1), -2.0)], r"term 1: scale must be >= 0"),
    ([(AlphaBeta(1, 1), float("nan"))], r"term 0: scale must be finite"),
    ([("ring", 1.0)], r"term 0: cost must be a CommCost, got str"),
    ([AlphaBeta(1, 1)], r"term 0: expected a \(cost, scale\) pair"),
])
def test_composite_rejects_bad_terms(terms, message):
    with pytest.raises(ValueError, match=message):
        Composite(terms)


# --- every model: c(0) = 0, non-decreasing, non-negative; JSON round trip ----------------------

MODELS = {
    "alpha_beta": AlphaBeta(5e-5, 8e-10),
    "ring": ring_allreduce(8, A, G),
    "hierarchical": hierarchical_allreduce(32, 8, A, G, 1e-6, 1e-11),
    "preset": network("nvlink-h100", 8, algorithm="double_binary_tree"),
    "piecewise": PiecewiseLinear([8, 1024, 65536, 1 << 20], [1e-5, 1.2e-5, 4e-5, 3e-4]),
    "piecewise_one_point": PiecewiseLinear([1024], [1e-5]),
    "composite": Composite([(PiecewiseLinear([8, 1 << 20], [1e-5, 1e-4]), 2.0),
                            (AlphaBeta(1e-6, 1e-10), 1.0)]),
    "nested": Composite([(Composite([(AlphaBeta(1e-6, 1e-10), 0.5)]), 3.0)]),
}
GRID = np.concatenate([[0.0, 0.5, 1.0], np.logspace(0, 10, 300)])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_rules_on_a_grid(name):
    cost = MODELS[name]
    times = cost(GRID)
    assert cost(0) == 0.0
    assert np.all(times >= 0)
    assert np.all(np.diff(times) >= 0)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_json_round_trip(name):
    cost = MODELS[name]
    doc = json.loads(json.dumps(cost.to_dict()))
    rebuilt = cost_from_dict(doc)
    assert type(rebuilt) is type(cost)
    assert rebuilt == cost
    assert rebuilt(GRID).tolist() == cost(GRID).tolist()
    assert rebuilt.affine == cost.affine


@pytest.mark.parametrize("doc, message", [
    ({"kind": "piecewise_linear"}, "needs a 'points' list"),
    ({"kind": "piecewise_linear", "points": [[1, 1e-6], [2]]}, r"points\[1\] must be a \[size, time\] pair"),
    ({"kind": "piecewise_linear", "points": [[1, 2e-6], [2, 1e-6]]}, r"cost: point 1 \(size 2 B\)"),
    ({"kind": "composite"}, "needs a 'terms' list"),
    ({"kind": "composite", "terms": [{"cost": {"kind": "alpha_beta", "alpha": 0, "beta": 0}}]},
     r"cost.terms\[0\]: expected an object with 'cost' and 'scale'"),
    ({"kind": "composite", "terms": [{"cost": {"kind": "fancy"}, "scale": 1}]},
     r"cost.terms\[0\].cost: unknown cost kind 'fancy'"),
    ({"kind": "composite", "terms": [{"cost": {"kind": "alpha_beta", "alpha": 0, "beta": 0},
                                      "scale": 0}]}, r"term 0: scale must be > 0"),
    ({"kind": "alpha_beta", "alpha": 1e-6, "beta": -1.0}, "beta must be >= 0"),
])
def test_cost_from_dict_rejects_bad_documents(doc, message):
    with pytest.raises(ValueError, match=message):
        cost_from_dict(doc)


sizes_strategy = st.lists(st.floats(1.0, 1e10, allow_nan=False), min_size=1, max_size=12, unique=True)


@settings(deadline=None)
@given(sizes=sizes_strategy,
       times=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=12, max_size=12),
       probes=st.lists(st.floats(0.0, 1e12, allow_nan=False), min_size=1, max_size=20),
       scale=st.floats(1e-3, 1e3))
def test_property_repaired_measurements_give_a_valid_cost(sizes, times, probes, scale):
    curve = PiecewiseLinear(sizes, times[:len(sizes)], repair=True)
    cost = Composite([(curve, scale), (AlphaBeta(1e-6, 1e-9), 1.0)])
    grid = np.sort(np.array(probes + [0.0]))
    for model in (curve, cost):
        values = model(grid)
        assert model(0) == 0.0
        assert np.all(values >= 0)
        assert np.all(np.diff(values) >= 0)
    # Every measured point is interpolated exactly.
    assert curve(curve.sizes).tolist() == curve.times.tolist()


@settings(deadline=None)
@given(workers=st.integers(1, 4096), latency=st.floats(0, 1e-3), inverse_bandwidth=st.floats(0, 1e-8))
def test_property_collective_bandwidth_terms(workers, latency, inverse_bandwidth):
    ring = ring_allreduce(workers, latency, inverse_bandwidth)
    tree = double_binary_tree_allreduce(workers, latency, inverse_bandwidth)
    # Ring and tree move the same bytes per worker; the tree has fewer latency steps.
    assert ring.beta == tree.beta
    assert tree.alpha <= ring.alpha * (1 + 1e-12)
    assert ring.beta <= 2 * inverse_bandwidth


# --- readers -----------------------------------------------------------------------------------

NCCL_NEW = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41230 on    gpu-node01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  41230 on    gpu-node01 device  1 [0x2a] NVIDIA H100 80GB HBM3
gpu-node01:41230:41230 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.11<0>
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           0             0     float     sum      -1     0.12    0.00    0.00      0     0.11    0.00    0.00      0
           8             2     float     sum      -1    18.52    0.00    0.00      0    18.31    0.00    0.00      0
          16             4     float     sum      -1    18.47    0.00    0.00      0    18.40    0.00    0.00      0
          32             8     float     sum      -1    18.90    0.00    0.00      0    18.62    0.00    0.00      0
        1024           256     float     sum      -1    19.85    0.05    0.09      0    19.70    0.05    0.09      0
       65536         16384     float     sum      -1    27.40    2.39    4.19      0    27.02    2.43    4.24      0
     1048576        262144     float     sum      -1    52.10   20.13   35.22      0    51.60   20.32   35.56      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 5.59263
#
"""

NCCL_OLD = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    42.35    0.02    0.04  0e+00    41.86    0.02    0.04  0e+00
        2048           512   float     sum    43.10    0.05    0.07  0e+00    40.00    0.05    0.08  0e+00
        4096          1024   float     sum    45.00    0.09    0.14  0e+00    44.50    0.09    0.14  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0825
"""

OSU_SHORT = """\
# OSU MPI Allreduce Latency Test v7.3
# Datatype: MPI_FLOAT.
# Size       Avg Latency(us)
4                       2.51
8                       2.49
16                      2.60
1024                    6.75
1048576               412.30
"""

OSU_FULL = """\
# OSU MPI Allreduce Latency Test v5.9
# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations
4                       3.12              2.90              3.40        1000
8                       3.20              2.95              3.51        1000
16                      3.41              3.10              3.77        1000
"""


def test_nccl_tests_new_format_out_of_place():
    cost = read_nccl_tests(NCCL_NEW)
    assert cost.sizes.tolist() == [8, 16, 32, 1024, 65536, 1048576]  # size 0 row skipped
    # 18.52 and 18.47 us are noise: the running maximum keeps 18.52.
    assert cost.times == pytest.approx([18.52e-6, 18.52e-6, 18.90e-6, 19.85e-6, 27.40e-6, 52.10e-6],
                                       rel=1e-12)
    assert cost(65536) == pytest.approx(27.40e-6, rel=1e-12)


def test_nccl_tests_in_place_and_old_format():
    in_place = read_nccl_tests(NCCL_NEW, in_place=True)
    assert in_place(1024) == pytest.approx(19.70e-6, rel=1e-12)
    old = read_nccl_tests(NCCL_OLD)
    assert old.times == pytest.approx([42.35e-6, 43.10e-6, 45.00e-6], rel=1e-12)
    old_in_place = read_nccl_tests(NCCL_OLD, in_place=True)
    assert old_in_place.times == pytest.approx([41.86e-6, 41.86e-6, 44.50e-6], rel=1e-12)


def test_nccl_tests_without_repair_rejects_noise():
    with pytest.raises(ValueError, match=r"<text>: point 1 \(size 16 B\): time 1.847e-05 s is below"):
        read_nccl_tests(NCCL_NEW, repair=False)


def test_readers_accept_a_path(tmp_path):
    nccl_file = tmp_path / "allreduce.txt"
    nccl_file.write_text(NCCL_OLD)
    assert read_nccl_tests(nccl_file) == read_nccl_tests(NCCL_OLD)
    assert read_nccl_tests(str(nccl_file)) == read_nccl_tests(NCCL_OLD)
    osu_file = tmp_path / "osu.txt"
    osu_file.write_text(OSU_FULL)
    assert read_osu(osu_file) == read_osu(OSU_FULL)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_osu(tmp_path / "missing.txt")


def test_nccl_tests_malformed_rows_name_file_and_line(tmp_path):
    broken = NCCL_OLD.replace("  45.00  ", "  fast  ")
    path = tmp_path / "broken.txt"
    path.write_text(broken)
    with pytest.raises(ValueError, match=r"broken.txt, line 8: time 'fast' is not a number"):
        read_nccl_tests(path)
    truncated = NCCL_OLD.replace("    44.50    0.09    0.14  0e+00", "")
    with pytest.raises(ValueError, match=r"<text>, line 8: expected 12 columns as in the header, found 8"):
        read_nccl_tests(truncated)
    bad_size = NCCL_OLD.replace("        2048  ", "        2k48  ")
    with pytest.raises(ValueError, match=r"line 7: size '2k48' is not a whole number of bytes"):
        read_nccl_tests(bad_size)
    mixed = NCCL_OLD.replace("float     sum    45.00", " half     sum    45.00")
    with pytest.raises(ValueError, match=r"line 8: type 'half' differs from 'float' on line 6"):
        read_nccl_tests(mixed)


def test_nccl_tests_structure_errors():
    header_only = "\n".join(NCCL_OLD.splitlines()[:5]) + "\n"
    with pytest.raises(ValueError, match="<text>: no data rows found"):
        read_nccl_tests(header_only)
    with pytest.raises(ValueError, match="no nccl-tests header line"):
        read_nccl_tests(OSU_SHORT)
    with pytest.raises(ValueError, match="line 4: in_place=True but the header has no in-place"):
        read_nccl_tests("#\n#\n#\n#  size  count  type  time\n 8  2  float  1.0\n", in_place=True)
    with pytest.raises(ValueError, match="line 14: a second table header"):
        read_nccl_tests(NCCL_OLD + NCCL_OLD)
    with pytest.raises(ValueError, match="expected a file path"):
        read_nccl_tests(b"bytes\n")


def test_osu_reads_average_latency():
    short = read_osu(OSU_SHORT)
    assert short.sizes.tolist() == [4, 8, 16, 1024, 1048576]
    assert short.times == pytest.approx([2.51e-6, 2.51e-6, 2.60e-6, 6.75e-6, 412.30e-6], rel=1e-12)
    full = read_osu(OSU_FULL)
    assert full.times == pytest.approx([3.12e-6, 3.20e-6, 3.41e-6], rel=1e-12)
    assert full(12) == pytest.approx(3.305e-6, rel=1e-12)


def test_osu_errors():
    with pytest.raises(ValueError, match=r"<text>, line 3: expected 5 columns as in the header, found 4"):
        read_osu(OSU_FULL.replace("        1000\n8", "\n8"))
    with pytest.raises(ValueError, match=r"line 5: time 'x' is not a number"):
        read_osu(OSU_FULL.replace("3.41", "x"))
    with pytest.raises(ValueError, match="no data rows found"):
        read_osu("# OSU MPI Allreduce Latency Test v7.3\n# Size       Avg Latency(us)\n")
    with pytest.raises(ValueError, match="no OSU header line"):
        read_osu(NCCL_OLD)
    with pytest.raises(ValueError, match=r"point 1 \(size 8 B\): time 2.49e-06 s is below"):
        read_osu(OSU_SHORT, repair=False)
    with pytest.raises(ValueError, match=r"line 1: latency column 'Avg Latency\(ms\)' is not in microseconds"):
        read_osu("# Size       Avg Latency(ms)\n4    1.0\n")


def test_every_model_is_a_commcost():
    assert all(isinstance(cost, CommCost) for cost in MODELS.values())
