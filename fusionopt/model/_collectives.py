"""Collective cost formulas over ``P`` workers, and network presets (MODEL.md sections 2 and 8).

Every formula is Hockney-style in the per-link latency ``a`` (seconds) and inverse bandwidth
``g`` (seconds per byte) and returns an :class:`~fusionopt.cost.AlphaBeta` in seconds
and bytes. ``P = 1`` needs no communication and gives a zero cost.

All-reduce, and its two halves for sharded data parallelism (section 8): a reduce-scatter
leaves each worker ``1/P`` of the reduced message, an all-gather gives every worker the
whole message back. Both are priced on ``S``, the message's unsharded size (the size
column of nccl-tests' ``reduce_scatter_perf`` and ``all_gather_perf``), and for the ring,
the halving-doubling and the hierarchical algorithms ``c_RS + c_AG`` is the all-reduce.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable

from fusionopt.model._cost import AlphaBeta, check_param

__all__ = [
    "ring_allreduce",
    "ring_reduce_scatter",
    "ring_all_gather",
    "recursive_halving_reduce_scatter",
    "recursive_doubling_all_gather",
    "hierarchical_reduce_scatter",
    "hierarchical_all_gather",
    "COLLECTIVES",
    "recursive_doubling_allreduce",
    "rabenseifner_allreduce",
    "double_binary_tree_allreduce",
    "hierarchical_allreduce",
    "ALGORITHMS",
    "network",
    "network_link",
    "networks",
]


def _check_count(label: str, value: object) -> int:
    # bool is an int subclass, but workers=True is a mistake, not one worker.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{label} must be >= 1, got {value!r}")
    return int(value)


def _check_link(workers: object, latency: float, inverse_bandwidth: float) -> tuple[int, float, float]:
    return (_check_count("workers", workers), check_param("latency", latency),
            check_param("inverse_bandwidth", inverse_bandwidth))


def ring_allreduce(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Ring all-reduce (reduce-scatter then all-gather around a ring of ``P`` workers).

    ``alpha = 2 (P - 1) a``, ``beta = 2 (P - 1) / P * g``.

    Parameters
    ----------
    workers : int
        Number of workers ``P >= 1``.
    latency : float
        Per-link, per-step latency ``a`` in seconds, ``>= 0``.
    inverse_bandwidth : float
        Per-link inverse bandwidth ``g`` in seconds per byte, ``>= 0``.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = ring_allreduce(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (0.00014, 1.75e-09)
    >>> ring_allreduce(1, 1e-5, 1e-9)(1e6)
    0.0
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta(2 * (p - 1) * a, 2 * (p - 1) / p * g)


def recursive_doubling_allreduce(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Recursive-doubling all-reduce (``log2 P`` exchanges of the whole message).

    ``alpha = log2(P) a``, ``beta = log2(P) g``. Exact for ``P`` a power of two; for other
    ``P`` it is the spec's idealisation (real implementations add a fold-in step).

    Parameters
    ----------
    workers : int
        Number of workers ``P >= 1``.
    latency : float
        Per-link latency ``a`` in seconds, ``>= 0``.
    inverse_bandwidth : float
        Per-link inverse bandwidth ``g`` in seconds per byte, ``>= 0``.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = recursive_doubling_allreduce(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (3e-05, 3e-09)
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    steps = math.log2(p)
    return AlphaBeta(steps * a, steps * g)


def rabenseifner_allreduce(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Rabenseifner all-reduce (recursive-halving reduce-scatter, recursive-doubling all-gather).

    ``alpha = 2 log2(P) a``, ``beta = 2 (P - 1) / P * g``. Exact for ``P`` a power of two; for
    other ``P`` it is the spec's idealisation.

    Parameters
    ----------
    workers : int
        Number of workers ``P >= 1``.
    latency : float
        Per-link latency ``a`` in seconds, ``>= 0``.
    inverse_bandwidth : float
        Per-link inverse bandwidth ``g`` in seconds per byte, ``>= 0``.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = rabenseifner_allreduce(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (6e-05, 1.75e-09)
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta(2 * math.log2(p) * a, 2 * (p - 1) / p * g)


def double_binary_tree_allreduce(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Double-binary-tree all-reduce (NCCL's tree algorithm), pipelined, large-message limit.

    ``alpha = 2 log2(P) a`` (up one tree and down again), ``beta = 2 (P - 1) / P * g``. Exact
    for ``P`` a power of two; for other ``P`` it is the spec's idealisation.

    Parameters
    ----------
    workers : int
        Number of workers ``P >= 1``.
    latency : float
        Per-link latency ``a`` in seconds, ``>= 0``.
    inverse_bandwidth : float
        Per-link inverse bandwidth ``g`` in seconds per byte, ``>= 0``.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = double_binary_tree_allreduce(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (6e-05, 1.75e-09)
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta(2 * math.log2(p) * a, 2 * (p - 1) / p * g)


def hierarchical_allreduce(workers: int, gpus_per_node: int, latency: float, inverse_bandwidth: float,
                           intra_latency: float, intra_inverse_bandwidth: float) -> AlphaBeta:
    """Hierarchical all-reduce: intra-node ring, inter-node ring, intra-node ring again.

    With ``G`` GPUs per node and ``N = P / G`` nodes, a message of ``S`` bytes costs

    * intra-node ring reduce-scatter: ``(G - 1) a_intra + (G - 1) / G * S g_intra``;
    * inter-node ring all-reduce of the full ``S`` bytes per node: ``2 (N - 1) a +
      2 (N - 1) / N * S g``. Each GPU all-reduces its ``S / G`` shard with its peers on the
      other nodes, and the ``G`` rings run concurrently, but all of a node's GPUs share the
      node's one NIC, so together they move what one ring of ``S`` bytes would;
    * intra-node ring all-gather: ``(G - 1) a_intra + (G - 1) / G * S g_intra``.

    The sum is affine: ``alpha = 2 (G - 1) a_intra + 2 (N - 1) a`` and
    ``beta = 2 (G - 1) / G * g_intra + 2 (N - 1) / N * g``.

    Parameters
    ----------
    workers : int
        Total number of GPUs ``P >= 1``, a multiple of ``gpus_per_node``.
    gpus_per_node : int
        GPUs per node ``G >= 1``.
    latency, inverse_bandwidth : float
        Inter-node (NIC) link latency ``a`` in seconds and inverse bandwidth ``g`` in s/B.
    intra_latency, intra_inverse_bandwidth : float
        Intra-node link latency ``a_intra`` in seconds and inverse bandwidth ``g_intra`` in s/B.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = hierarchical_allreduce(16, 8, latency=1e-5, inverse_bandwidth=1e-9,
    ...                            intra_latency=1e-6, intra_inverse_bandwidth=1e-11)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (3.4e-05, 1.0175e-09)
    """
    # Its reduce-scatter and all-gather halves, each priced once (doubling is exact).
    half = _hierarchical_half(workers, gpus_per_node, latency, inverse_bandwidth, intra_latency,
                              intra_inverse_bandwidth)
    return AlphaBeta(2 * half.alpha, 2 * half.beta)


ALGORITHMS: dict[str, Callable[[int, float, float], AlphaBeta]] = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "double_binary_tree": double_binary_tree_allreduce,
}
"""The flat all-reduce algorithms :func:`network` accepts, by name."""



def ring_reduce_scatter(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Ring reduce-scatter of ``S`` bytes: ``P - 1`` steps, each sending ``S / P`` bytes.

    ``alpha = (P - 1) a``, ``beta = (P - 1) / P * g``: the first half of
    :func:`ring_allreduce`.

    Examples
    --------
    >>> c = ring_reduce_scatter(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (7e-05, 8.75e-10)
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta((p - 1) * a, (p - 1) / p * g)


def ring_all_gather(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Ring all-gather of ``S`` bytes (``S / P`` from each worker): ``alpha = (P - 1) a``,
    ``beta = (P - 1) / P * g``, the second half of :func:`ring_allreduce`.

    >>> ring_all_gather(8, 1e-5, 1e-9) == ring_reduce_scatter(8, 1e-5, 1e-9)
    True
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta((p - 1) * a, (p - 1) / p * g)


def recursive_halving_reduce_scatter(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Recursive-halving reduce-scatter: ``log2 P`` exchanges of ``S/2, S/4, ...`` bytes.

    ``alpha = log2(P) a``, ``beta = (P - 1) / P * g``: the first half of
    :func:`rabenseifner_allreduce`. Exact for ``P`` a power of two.

    >>> c = recursive_halving_reduce_scatter(8, latency=1e-5, inverse_bandwidth=1e-9)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (3e-05, 8.75e-10)
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta(math.log2(p) * a, (p - 1) / p * g)


def recursive_doubling_all_gather(workers: int, latency: float, inverse_bandwidth: float) -> AlphaBeta:
    """Recursive-doubling all-gather: ``log2 P`` exchanges of ``S/P, 2S/P, ...`` bytes.

    ``alpha = log2(P) a``, ``beta = (P - 1) / P * g``: the second half of
    :func:`rabenseifner_allreduce`. Exact for ``P`` a power of two.

    >>> recursive_doubling_all_gather(8, 1e-5, 1e-9) == recursive_halving_reduce_scatter(8, 1e-5, 1e-9)
    True
    """
    p, a, g = _check_link(workers, latency, inverse_bandwidth)
    return AlphaBeta(math.log2(p) * a, (p - 1) / p * g)


def _hierarchical_half(workers: int, gpus_per_node: int, latency: float, inverse_bandwidth: float,
                       intra_latency: float, intra_inverse_bandwidth: float) -> AlphaBeta:
    p = _check_count("workers", workers)
    gpus = _check_count("gpus_per_node", gpus_per_node)
    if p % gpus:
        raise ValueError(f"workers ({p}) must be a multiple of gpus_per_node ({gpus})")
    a = check_param("latency", latency)
    g = check_param("inverse_bandwidth", inverse_bandwidth)
    a_intra = check_param("intra_latency", intra_latency)
    g_intra = check_param("intra_inverse_bandwidth", intra_inverse_bandwidth)
    nodes = p // gpus
    return AlphaBeta((gpus - 1) * a_intra + (nodes - 1) * a, (gpus - 1) / gpus * g_intra + (nodes - 1) / nodes * g)


def hierarchical_reduce_scatter(workers: int, gpus_per_node: int, latency: float, inverse_bandwidth: float,
                                intra_latency: float, intra_inverse_bandwidth: float) -> AlphaBeta:
    """Hierarchical reduce-scatter: an intra-node ring reduce-scatter of ``S`` bytes over the
    ``G`` GPUs of a node, then an inter-node ring reduce-scatter of each GPU's ``S / G``
    shard over the ``N = P / G`` nodes (the ``G`` rings share the node's NIC, so together
    they move what one ring of ``S`` bytes would); each GPU ends with ``S / P`` bytes.

    ``alpha = (G - 1) a_intra + (N - 1) a``, ``beta = (G - 1) / G * g_intra + (N - 1) / N * g``:
    the first half of :func:`hierarchical_allreduce`.

    >>> c = hierarchical_reduce_scatter(16, 8, latency=1e-5, inverse_bandwidth=1e-9,
    ...                                 intra_latency=1e-6, intra_inverse_bandwidth=1e-11)
    >>> round(c.alpha, 12), round(c.beta, 18)
    (1.7e-05, 5.0875e-10)
    """
    return _hierarchical_half(workers, gpus_per_node, latency, inverse_bandwidth, intra_latency,
                              intra_inverse_bandwidth)


def hierarchical_all_gather(workers: int, gpus_per_node: int, latency: float, inverse_bandwidth: float,
                            intra_latency: float, intra_inverse_bandwidth: float) -> AlphaBeta:
    """Hierarchical all-gather: the inter-node ring all-gather of each GPU's shard, then the
    intra-node ring all-gather; the same cost as :func:`hierarchical_reduce_scatter`, the
    second half of :func:`hierarchical_allreduce`.

    >>> hierarchical_all_gather(16, 8, 1e-5, 1e-9, 1e-6, 1e-11) == hierarchical_reduce_scatter(16, 8, 1e-5, 1e-9, 1e-6, 1e-11)
    True
    """
    return _hierarchical_half(workers, gpus_per_node, latency, inverse_bandwidth, intra_latency,
                              intra_inverse_bandwidth)


COLLECTIVES: dict[str, dict[str, Callable[[int, float, float], AlphaBeta]]] = {
    "all_reduce": ALGORITHMS,
    "reduce_scatter": {"ring": ring_reduce_scatter, "rabenseifner": recursive_halving_reduce_scatter},
    "all_gather": {"ring": ring_all_gather, "rabenseifner": recursive_doubling_all_gather},
}
"""The flat algorithms :func:`network` accepts for each collective. A reduce-scatter or an
all-gather has no tree algorithm (NCCL runs both on rings) and no recursive doubling of the
whole message; ``"rabenseifner"`` names the halving-doubling halves."""


@dataclass(frozen=True)
class _Link:
    bandwidth: float  # bytes per second, per link and direction
    latency: float  # seconds, nominal
    description: str


_PRESETS: dict[str, _Link] = {
    "1gbe": _Link(1.25e8, 25e-6, "1 Gigabit Ethernet, TCP: 1.25e8 B/s, nominal 25 us latency"),
    "10gbe": _Link(1.25e9, 25e-6, "10 Gigabit Ethernet, TCP: 1.25e9 B/s, nominal 25 us latency"),
    "25gbe": _Link(3.125e9, 25e-6, "25 Gigabit Ethernet, TCP: 3.125e9 B/s, nominal 25 us latency"),
    "100gb-ib": _Link(12.5e9, 2e-6, "100 Gb/s InfiniBand EDR, RDMA: 12.5e9 B/s, nominal 2 us latency"),
    "nvlink-h100": _Link(450e9, 1e-6, "NVLink 4 on H100 (per GPU, per direction): 450e9 B/s, "
                                      "nominal 1 us latency"),
    "nvlink-a100": _Link(300e9, 1e-6, "NVLink 3 on A100 (per GPU, per direction): 300e9 B/s, "
                                      "nominal 1 us latency"),
    "pcie4": _Link(32e9, 5e-6, "PCIe 4.0 x16 (per direction): 32e9 B/s, nominal 5 us latency"),
    "pcie5": _Link(64e9, 5e-6, "PCIe 5.0 x16 (per direction): 64e9 B/s, nominal 5 us latency"),
    "200gb-ib": _Link(25e9, 2e-6, "200 Gb/s InfiniBand HDR, RDMA: 25e9 B/s, nominal 2 us latency"),
    "400gb-ib": _Link(50e9, 2e-6, "400 Gb/s InfiniBand NDR, RDMA: 50e9 B/s, nominal 2 us latency"),
}


# All-reduce constants (alpha s, beta s/B) fitted in the reference code of a seed paper:
# measured collectives, not link figures. MG-WFBP (Shi, Chu, Li; INFOCOM 2019 / TPDS 2021),
# K80 clusters; US-Byte (Gao et al., TPDS 2024), whose code fits T = a + b * parameters, so
# beta = b / 4 per byte of FP32 gradient (docs/methods.md, section usbyte).
_FITTED: dict[str, tuple[str, dict[int, tuple[float, float]]]] = {
    "mgwfbp-10gbe": ("MG-WFBP's fitted all-reduce on 10GbE (K80 cluster), P = 2, 4, 8, 16", {
        2: (2.5547e-06, 9.8375e-11), 4: (4.2043e-05, 2.0589e-10),
        8: (5.2303e-04, 8.5707e-10), 16: (9.0810e-04, 7.3957e-10)}),
    "mgwfbp-56gbib": ("MG-WFBP's fitted all-reduce on 56Gb InfiniBand (K80 cluster), P = 2, 4, 8, 16", {
        2: (2.5547e-06, 9.8375e-11), 4: (4.2043e-05, 2.0589e-10),
        8: (9.7537e-05, 3.0568e-10), 16: (2.3584e-04, 4.0595e-10)}),
    "usbyte": ("US-Byte's fitted all-reduce, T = a + b * parameters, as beta = b / 4 per byte "
               "of FP32 gradient, P = 2, 4, 8", {
        2: (556.6e-6, 0.352e-10 / 4), 4: (948.98e-6, 1.541e-10 / 4), 8: (1318.6e-6, 2.406e-10 / 4)}),
}


def _known() -> str:
    return ", ".join(sorted([*_PRESETS, *_FITTED]))


def _preset(name: str) -> _Link:
    key = name.lower() if isinstance(name, str) else name
    if key in _FITTED:
        raise ValueError(f"network {name!r} is a fitted all-reduce, not a link: it has no per-link figures")
    if key not in _PRESETS:
        raise ValueError(f"unknown network {name!r}; known: {_known()}")
    return _PRESETS[key]


def networks() -> dict[str, str]:
    """The network presets :func:`network` knows: name -> one-line description.

    Examples
    --------
    >>> sorted(networks())
    ['100gb-ib', '10gbe', '1gbe', '200gb-ib', '25gbe', '400gb-ib', 'mgwfbp-10gbe', 'mgwfbp-56gbib', 'nvlink-a100', 'nvlink-h100', 'pcie4', 'pcie5', 'usbyte']
    """
    listing = {name: link.description for name, link in _PRESETS.items()}
    listing.update({name: description for name, (description, _) in _FITTED.items()})
    return listing


def network_link(name: str) -> tuple[float, float]:
    """A preset's per-link ``(latency, inverse_bandwidth)`` in seconds and seconds per byte.

    Use it to build formulas :func:`network` does not cover, e.g. :func:`hierarchical_allreduce`
    with NVLink inside a node and InfiniBand between nodes. The latency is nominal; see
    :func:`network`.

    Examples
    --------
    >>> network_link("10gbe")
    (2.5e-05, 8e-10)
    >>> a, g = network_link("100gb-ib"); a_in, g_in = network_link("nvlink-h100")
    >>> c = hierarchical_allreduce(16, 8, a, g, a_in, g_in)
    >>> round(c.alpha, 12), round(c.beta, 15)
    (1.8e-05, 8.3889e-11)
    """
    link = _preset(name)
    return (link.latency, 1.0 / link.bandwidth)


def network(name: str, workers: int, *, algorithm: str = "ring", collective: str = "all_reduce") -> AlphaBeta:
    """All-reduce (or reduce-scatter, or all-gather) cost over ``workers`` peers on a preset network.

    Bandwidths (per link, per direction) and their sources:

    * ``"1gbe"``: 1 Gb/s = 1.25e8 B/s, IEEE 802.3 line rate;
    * ``"10gbe"``: 10 Gb/s = 1.25e9 B/s, IEEE 802.3 line rate;
    * ``"25gbe"``: 25 Gb/s = 3.125e9 B/s, IEEE 802.3 line rate;
    * ``"100gb-ib"``: 100 Gb/s = 12.5e9 B/s, InfiniBand EDR 4x data rate;
    * ``"nvlink-h100"``: 450e9 B/s per GPU per direction, half of the 900 GB/s bidirectional
      NVLink 4 bandwidth in the NVIDIA H100 datasheet;
    * ``"nvlink-a100"``: 300e9 B/s per GPU per direction, half of the 600 GB/s bidirectional
      NVLink 3 bandwidth in the NVIDIA A100 datasheet;
    * ``"pcie4"``, ``"pcie5"``: 32e9 and 64e9 B/s per direction, the x16 link rates of the
      PCI-SIG PCIe 4.0 (16 GT/s) and 5.0 (32 GT/s) specifications, before protocol overhead;
    * ``"200gb-ib"``, ``"400gb-ib"``: 200 and 400 Gb/s = 25e9 and 50e9 B/s, InfiniBand HDR
      and NDR 4x data rates (InfiniBand Trade Association roadmap).

    ``"mgwfbp-10gbe"`` and ``"mgwfbp-56gbib"`` are the all-reduce constants fitted in the
    MG-WFBP reference code for ``P`` = 2, 4, 8 and 16 (other ``P`` and other algorithms are
    refused): measured costs of that paper's clusters, used to reproduce it. ``"usbyte"`` is
    the same for US-Byte's code, ``P`` = 2, 4 and 8: it fits ``T = a + b * parameters``, and
    the preset's ``beta`` is ``b / 4`` seconds per byte (FP32 gradients, 4 bytes per parameter).

    The link latencies are **nominal, not fitted**: 25 us for TCP over Ethernet, 2 us for
    InfiniBand, 1 us for NVLink, 5 us for PCIe (through host memory), chosen as typical
    orders of magnitude. Real per-message
    costs depend on the library, protocol, message size and topology (NCCL's own model uses
    base latencies of a few to tens of microseconds per algorithm and protocol), and line
    rates are upper bounds on achieved bandwidth. For anything quantitative, fit your own
    model from measurements, e.g. :func:`~fusionopt.cost.read_nccl_tests` on an
    ``all_reduce_perf`` run of your cluster.

    Parameters
    ----------
    name : str
        A preset name (case-insensitive); see :func:`networks`.
    workers : int
        Number of workers ``P >= 1``.
    algorithm : str, keyword-only
        ``"ring"`` (default), ``"recursive_doubling"``, ``"rabenseifner"`` or
        ``"double_binary_tree"``; see :data:`ALGORITHMS`. For a reduce-scatter or an
        all-gather, ``"ring"`` or ``"rabenseifner"`` (its halving or doubling half); see
        :data:`COLLECTIVES`.
    collective : str, keyword-only
        ``"all_reduce"`` (default), ``"reduce_scatter"`` or ``"all_gather"`` (MODEL.md
        section 8), priced on the message's unsharded size.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = network("10gbe", 8)
    >>> round(c.alpha, 9), round(c.beta, 15)
    (0.00035, 1.4e-09)
    >>> network("100gb-ib", 8, algorithm="rabenseifner").alpha
    1.2e-05
    >>> network("mgwfbp-10gbe", 8)
    AlphaBeta(alpha=0.00052303, beta=8.5707e-10)
    >>> c = network("usbyte", 8)                      # a = 1318.6 us, b = 2.406e-10 s/parameter
    >>> round(c.alpha * 1e6, 9), round(c(4e6) * 1e3, 9)  # 1e6 FP32 parameters: a + 1e6 b
    (1318.6, 1.5592)
    >>> rs = network("10gbe", 8, collective="reduce_scatter")   # half the ring all-reduce
    >>> round(rs.alpha, 9), round(rs.beta, 15)
    (0.000175, 7e-10)
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    key = name.lower() if isinstance(name, str) else name
    if key in _FITTED:
        if collective != "all_reduce":
            raise ValueError(f"network {name!r} is a measured all-reduce; it has no {collective} "
                             "(fit one with read_nccl_tests on reduce_scatter_perf or all_gather_perf)")
        table = _FITTED[key][1]
        if _check_count("workers", workers) not in table:
            raise ValueError(f"network {name!r} has fitted constants for workers = "
                             f"{', '.join(map(str, table))} only, not {workers!r}")
        if algorithm != "ring":
            raise ValueError(f"network {name!r} is a measured all-reduce; algorithm {algorithm!r} does not apply")
        return AlphaBeta(*table[workers])
    link = _preset(name)
    algorithms = COLLECTIVES[collective]
    if algorithm not in algorithms:
        if algorithm in ALGORITHMS:
            raise ValueError(f"algorithm {algorithm!r} has no {collective}; for it: {', '.join(algorithms)}")
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(algorithms)}")
    return algorithms[algorithm](workers, link.latency, 1.0 / link.bandwidth)
