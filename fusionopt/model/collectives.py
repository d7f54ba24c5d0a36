"""All-reduce cost formulas over ``P`` workers, and network presets (MODEL.md section 2).

Every formula is Hockney-style in the per-link latency ``a`` (seconds) and inverse bandwidth
``g`` (seconds per byte) and returns an :class:`~fusionopt.model.cost.AlphaBeta` in seconds
and bytes. ``P = 1`` needs no communication and gives a zero cost.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable

from fusionopt.model.cost import AlphaBeta, check_param

__all__ = [
    "ring_allreduce",
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
    p = _check_count("workers", workers)
    gpus = _check_count("gpus_per_node", gpus_per_node)
    if p % gpus:
        raise ValueError(f"workers ({p}) must be a multiple of gpus_per_node ({gpus})")
    a = check_param("latency", latency)
    g = check_param("inverse_bandwidth", inverse_bandwidth)
    a_intra = check_param("intra_latency", intra_latency)
    g_intra = check_param("intra_inverse_bandwidth", intra_inverse_bandwidth)
    nodes = p // gpus
    alpha = 2 * (gpus - 1) * a_intra + 2 * (nodes - 1) * a
    beta = 2 * (gpus - 1) / gpus * g_intra + 2 * (nodes - 1) / nodes * g
    return AlphaBeta(alpha, beta)


ALGORITHMS: dict[str, Callable[[int, float, float], AlphaBeta]] = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "double_binary_tree": double_binary_tree_allreduce,
}
"""The flat all-reduce algorithms :func:`network` accepts, by name."""


@dataclass(frozen=True)
class _Link:
    bandwidth: float  # bytes per second, per link and direction
    latency: float  # seconds, nominal
    description: str


_PRESETS: dict[str, _Link] = {
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
    ['100gb-ib', '10gbe', '200gb-ib', '25gbe', '400gb-ib', 'mgwfbp-10gbe', 'mgwfbp-56gbib', 'nvlink-a100', 'nvlink-h100', 'pcie4', 'pcie5', 'usbyte']
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


def network(name: str, workers: int, *, algorithm: str = "ring") -> AlphaBeta:
    """All-reduce cost over ``workers`` peers on a preset network.

    Bandwidths (per link, per direction) and their sources:

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
    model from measurements, e.g. :func:`~fusionopt.model.cost.read_nccl_tests` on an
    ``all_reduce_perf`` run of your cluster.

    Parameters
    ----------
    name : str
        A preset name (case-insensitive); see :func:`networks`.
    workers : int
        Number of workers ``P >= 1``.
    algorithm : str, keyword-only
        ``"ring"`` (default), ``"recursive_doubling"``, ``"rabenseifner"`` or
        ``"double_binary_tree"``; see :data:`ALGORITHMS`.

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
    """
    key = name.lower() if isinstance(name, str) else name
    if key in _FITTED:
        table = _FITTED[key][1]
        if isinstance(workers, bool) or workers not in table:
            raise ValueError(f"network {name!r} has fitted constants for workers = "
                             f"{', '.join(map(str, table))} only, not {workers!r}")
        if algorithm != "ring":
            raise ValueError(f"network {name!r} is a measured all-reduce; algorithm {algorithm!r} does not apply")
        return AlphaBeta(*table[workers])
    link = _preset(name)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[algorithm](workers, link.latency, 1.0 / link.bandwidth)
