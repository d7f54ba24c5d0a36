"""The large LSTM language model of Zaremba et al. (2014) on Penn Treebank, in the layout
of PyTorch's ``examples/word_language_model``: ``RNNModel('LSTM', ntoken=10000,
ninp=1500, nhid=1500, nlayers=2, tie_weights=False)``.

``named_parameters()`` order: ``encoder.weight`` (the 10000 x 1500 embedding table);
then ``nn.LSTM``'s ``rnn.weight_ih_l{k}`` (4 x 1500, input), ``rnn.weight_hh_l{k}``
(4 x 1500, 1500), ``rnn.bias_ih_l{k}`` and ``rnn.bias_hh_l{k}`` (4 x 1500 each) for
layers k = 0, 1; then the ``decoder`` Linear (1500 -> 10000, with bias). The four gates
(input, forget, cell, output) are stacked in the first dimension. Each LSTM layer is one
:class:`~fusionopt.zoo.Layer`, named ``rnn.l0`` and ``rnn.l1`` (PyTorch keeps both
in the single module ``rnn``).

FLOPs (convention in :mod:`fusionopt.zoo._layers`) are for one sequence of ``seq_len``
tokens (the truncated-backpropagation length; 35 in the Zaremba setup and the PyTorch
example's default ``--bptt``). Per token, an LSTM layer costs
``2 * 4 * hidden * (input + hidden)`` (its two gate matmuls) and the decoder
``2 * hidden * ntoken``; the bias additions, gate nonlinearities, elementwise cell
updates and dropout are not counted, and the embedding lookup costs 0. An LSTM's time
steps run one after another, so this FLOP count says nothing about the sequential
latency that dominates its real step time.
"""

from __future__ import annotations

from fusionopt.zoo._layers import ORDERS, Architecture, Layer, Shape, check_positive_int, embedding, linear

NTOKEN = 10000  # the Penn Treebank vocabulary (with <eos>)
NINP = 1500  # embedding size
NHID = 1500  # hidden size
NLAYERS = 2
GATES = 4


def lstm_layer(k: int, fan_in: int, hidden: int, seq_len: int) -> Layer:
    """Layer ``k`` of ``nn.LSTM`` (module ``rnn``): its two weight matrices and two biases."""
    tensors: tuple[tuple[str, Shape], ...] = (
        (f"rnn.weight_ih_l{k}", (GATES * hidden, fan_in)),
        (f"rnn.weight_hh_l{k}", (GATES * hidden, hidden)),
        (f"rnn.bias_ih_l{k}", (GATES * hidden,)),
        (f"rnn.bias_hh_l{k}", (GATES * hidden,)),
    )
    # autograd accumulates weight_ih, weight_hh, bias_hh, bias_ih (torch 2.13, CPU)
    return Layer(f"rnn.l{k}", tensors, 2.0 * GATES * hidden * (fan_in + hidden) * seq_len, ready=(0, 1, 3, 2),
                 kind="lstm")


# The order in which autograd accumulates the LSTM's eight gradients when cuDNN runs it
# (CUDA): one backward node makes every gradient of both layers ready at once, and the
# AccumulateGrad nodes then run in this order of ``rnn``'s eight tensors (forward order:
# weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, then the same for l1). Measured with
# gradient-accumulation hooks on an H100 (torch 2.11.0+cu130, cuDNN), 2026-11-27.
CUDNN_READY = (0, 1, 5, 7, 4, 2, 6, 3)


def _cudnn_rnn(seq_len: int) -> Layer:
    """``nn.LSTM`` as cuDNN runs it: one node for both layers, all eight gradients together."""
    layers = [lstm_layer(k, NINP if k == 0 else NHID, NHID, seq_len) for k in range(NLAYERS)]
    tensors = tuple(t for layer in layers for t in layer.tensors)
    return Layer("rnn", tensors, sum(layer.flops for layer in layers), ready=CUDNN_READY, kind="lstm")


def lstm_lm(seq_len: int = 35, order: str = "cpu") -> Architecture:
    """The large 2-layer LSTM language model (Zaremba et al. 2014; PyTorch example layout).

    Parameters
    ----------
    seq_len : int
        Tokens per sequence (the backpropagation-through-time length), a positive integer
        (default 35). Shapes do not depend on it; FLOPs do.
    order : {"cpu", "cuda"}
        The device whose ready order the architecture carries. ``"cpu"`` (torch's native
        LSTM): each layer is its own backward node, layer 1's gradients ready before layer
        0's. ``"cuda"`` (cuDNN): the LSTM is one node (``rnn``) whose eight gradients are
        ready together, in :data:`CUDNN_READY` order. Names, shapes and FLOPs are the same.

    Returns
    -------
    Architecture
        11 tensors (``encoder.weight``, 4 per LSTM layer, ``decoder`` weight and bias) and
        66,034,000 parameters: 10000 x 1500 + 2 x (2 x 6000 x 1500 + 2 x 6000) +
        1500 x 10000 + 10000; about 3.6 GFLOPs per 35-token sequence.

    Raises
    ------
    ValueError
        If ``seq_len`` is not a positive integer.

    Examples
    --------
    >>> net = lstm_lm()
    >>> net.parameters, len(net.tensors)
    (66034000, 11)
    >>> net.tensors[1:3]
    [('rnn.weight_ih_l0', (6000, 1500)), ('rnn.weight_hh_l0', (6000, 1500))]
    >>> [layer.name for layer in lstm_lm(order="cuda").layers]
    ['encoder', 'rnn', 'decoder']
    >>> lstm_lm(order="cuda").ready_order[2:6]
    ['rnn.weight_ih_l0', 'rnn.weight_hh_l0', 'rnn.weight_hh_l1', 'rnn.bias_hh_l1']
    >>> lstm_lm(seq_len=0)
    Traceback (most recent call last):
    ...
    ValueError: seq_len must be a positive integer, got 0
    """
    seq_len = check_positive_int("seq_len", seq_len)
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: choose one of {', '.join(ORDERS)}")
    layers = [embedding("encoder", NTOKEN, NINP)]
    if order == "cuda":
        layers.append(_cudnn_rnn(seq_len))
    else:
        for k in range(NLAYERS):
            layers.append(lstm_layer(k, NINP if k == 0 else NHID, NHID, seq_len))
    layers.append(linear("decoder", NHID, NTOKEN, tokens=seq_len))
    return Architecture(
        name="lstm-lm",
        layers=tuple(layers),
        description=(
            f"{NLAYERS}-layer LSTM language model, {NHID} hidden, {NTOKEN}-word vocabulary, untied "
            "(Zaremba et al. 2014 large; PyTorch word_language_model layout)"
        ),
        input_description=f"one sequence of {seq_len} tokens",
    )
