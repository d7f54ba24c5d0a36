"""The zoo's data model (:class:`Layer`, :class:`Architecture`) and layer constructors.

An architecture is a sequence of layers in forward order: the order in which the reference
implementation (torchvision, HuggingFace) first uses their parameters, which is the order
``model.named_parameters()`` yields them except where a module registers a parameter
before it uses it (ViT-B/16's class token). Each layer
owns one or more parameter tensors (for example a weight and a bias) and the forward
FLOPs of one sample through it.

FLOP convention
---------------
All counts are forward FLOPs for **one sample** (one image, or one sequence of
``seq_len`` tokens), counting a multiply-add as **2 FLOPs**:

* Conv2d: ``2 * Cin/groups * kh * kw * Cout * Hout * Wout``; the bias add is not counted.
* Linear: ``2 * in * out`` per sample, or per token for token-wise layers; bias not counted.
* BatchNorm / LayerNorm: **4 FLOPs per output element** (subtract the mean, divide by the
  standard deviation, scale, shift); computing the statistics is not counted.
* Embedding lookups: **0 FLOPs** (a gather; memory-bound, its time is not modelled).
* Attention: the ``Q K^T`` and ``softmax(.) V`` matmuls, ``2 * seq_len^2 * hidden`` each,
  are attributed to the ``attention.self.value`` layer (see :mod:`fusionopt.zoo._bert`).
* Layers without parameters are not counted: activations (ReLU, GELU), softmax, pooling,
  residual additions, concatenation and dropout all cost 0.

The counts match the usual "GMACs x 2" figures (ResNet-50 about 4.1 GMACs, VGG-16 about
15.5 GMACs at 224 x 224) to within the small normalisation term.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

# FLOPs per output element of a BatchNorm or LayerNorm (normalise, scale, shift).
NORM_FLOPS_PER_ELEMENT = 4

# The devices a ready order can be for: autograd on the CPU, or on CUDA, where some layers
# (cuDNN's RNNs) run as one backward node and make their gradients ready together.
ORDERS = ("cpu", "cuda")

# What a layer computes, as far as its time goes (:mod:`fusionopt.zoo.calibrated` gives each
# kind its own rate): a dense convolution, a depthwise one, a normalisation, a matrix product
# (linear layers, with the attention products where a layer carries them), an LSTM, a table
# lookup or a bare parameter ("embedding"), or a layer built by hand ("other").
KINDS = ("conv", "depthwise", "norm", "linear", "lstm", "embedding", "other")

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Layer:
    """One layer: its parameter tensors, in model order, and its forward FLOPs per sample.

    Parameters
    ----------
    name : str
        Module path of the layer, e.g. ``"layer1.0.conv1"``.
    tensors : tuple of (str, tuple of int)
        Full parameter names and shapes, e.g. ``(("fc.weight", (1000, 2048)),
        ("fc.bias", (1000,)))``. The first one (the weight) carries the layer's time when
        a profile is built; the others get 0.
    flops : float
        Forward FLOPs of one sample through this layer (convention in the module docstring).
    ready : tuple of int, optional
        The order in which autograd accumulates the layer's gradients, as indices into
        ``tensors``; default the reverse of ``tensors``. One backward node produces all of
        a layer's gradients, and PyTorch (2.13, CPU, checked with
        ``register_post_accumulate_grad_hook`` by ``validation/profiles/run.py``) accumulates
        a convolution's, batch norm's and layer norm's weight before its bias, a linear
        layer's bias before its weight and an LSTM layer's ``weight_ih, weight_hh,
        bias_hh, bias_ih``.
    kind : str, optional
        What the layer computes, one of :data:`KINDS`; default ``"other"``. The layer
        constructors below set it.

    Examples
    --------
    >>> fc = Layer("fc", (("fc.weight", (10, 4)), ("fc.bias", (10,))), flops=80.0, kind="linear")
    >>> fc.parameters, fc.ready, fc.kind
    (50, (1, 0), 'linear')
    """

    name: str
    tensors: tuple[tuple[str, Shape], ...]
    flops: float
    ready: tuple[int, ...] | None = None
    kind: str = "other"

    def __post_init__(self) -> None:
        if not self.tensors:
            raise ValueError(f"layer {self.name!r} owns no parameter tensors")
        if self.kind not in KINDS:
            raise ValueError(f"layer {self.name!r}: unknown kind {self.kind!r}; known: {', '.join(KINDS)}")
        if self.ready is None:
            object.__setattr__(self, "ready", tuple(range(len(self.tensors) - 1, -1, -1)))
        elif any(isinstance(k, bool) or not isinstance(k, int) for k in self.ready) \
                or sorted(self.ready) != list(range(len(self.tensors))):
            raise ValueError(f"layer {self.name!r}: ready must order its {len(self.tensors)} tensors, "
                             f"got {self.ready!r}")
        if isinstance(self.flops, bool) or not isinstance(self.flops, numbers.Real) \
                or not (self.flops >= 0 and math.isfinite(self.flops)):
            raise ValueError(f"layer {self.name!r}: flops must be finite and >= 0, got {self.flops!r}")
        for entry in self.tensors:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)
                    and isinstance(entry[1], tuple)):
                raise ValueError(f"layer {self.name!r}: a tensor is a (name, shape tuple) pair, got {entry!r}")
            tname, shape = entry
            if not shape:
                raise ValueError(f"tensor {tname!r}: bad shape {shape!r}")
            for d in shape:
                check_positive_int(f"tensor {tname!r}: a dimension", d)

    @property
    def parameters(self) -> int:
        """Number of parameters (elements) in this layer's tensors.

        Examples
        --------
        >>> Layer("bn", (("bn.weight", (64,)), ("bn.bias", (64,))), 0.0).parameters
        128
        """
        return sum(math.prod(shape) for _, shape in self.tensors)


@dataclass(frozen=True)
class Architecture:
    """A network as an ordered sequence of :class:`Layer` objects.

    Parameters
    ----------
    name : str
        Short model name, e.g. ``"resnet50"``.
    layers : tuple of Layer
        Layers in forward order of the reference implementation.
    description : str
        One line describing the model and its reference implementation.
    input_description : str
        The input the FLOP counts assume, e.g. ``"1 x 3 x 224 x 224 image"``.
    registration : tuple of str, optional
        Tensor names in the order the reference implementation registers them
        (``named_parameters()``), where it differs from forward order; default forward
        order. DDP's initial buckets follow it.

    Examples
    --------
    >>> a = Architecture(
    ...     "tiny",
    ...     (Layer("fc", (("fc.weight", (2, 3)), ("fc.bias", (2,))), 12.0),),
    ...     description="one linear layer", input_description="a 3-vector")
    >>> a.parameters, a.flops, a.tensors
    (8, 12.0, [('fc.weight', (2, 3)), ('fc.bias', (2,))])
    """

    name: str
    layers: tuple[Layer, ...]
    description: str
    input_description: str
    registration: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise ValueError(f"architecture {self.name!r} has no layers")
        seen: set[str] = set()
        for tname, _ in self.tensors:
            if tname in seen:
                raise ValueError(f"architecture {self.name!r}: tensor name {tname!r} repeated")
            seen.add(tname)
        if self.registration is None:
            object.__setattr__(self, "registration", tuple(t for t, _ in self.tensors))
        elif sorted(self.registration) != sorted(seen):
            raise ValueError(f"architecture {self.name!r}: registration must name each tensor once")

    @property
    def ready_order(self) -> list[str]:
        """Tensor names in the order autograd accumulates their gradients: layers in reverse
        forward order, each in its own :attr:`Layer.ready` order.

        >>> from fusionopt.zoo import conv2d, linear
        >>> Architecture("x", (conv2d("c", 3, 4, 3, 8, bias=True), linear("f", 4, 2)), "", "").ready_order
        ['f.bias', 'f.weight', 'c.weight', 'c.bias']
        """
        return [layer.tensors[k][0] for layer in reversed(self.layers) for k in layer.ready]

    @property
    def parameters(self) -> int:
        """Total number of parameters (elements over all tensors).

        Examples
        --------
        >>> Architecture("x", (Layer("a", (("a.weight", (3, 3)),), 0.0),), "", "").parameters
        9
        """
        return sum(layer.parameters for layer in self.layers)

    @property
    def tensors(self) -> list[tuple[str, Shape]]:
        """``(name, shape)`` of every parameter tensor, in forward order.

        Examples
        --------
        >>> Architecture("x", (Layer("a", (("a.weight", (3, 3)),), 0.0),), "", "").tensors
        [('a.weight', (3, 3))]
        """
        return [t for layer in self.layers for t in layer.tensors]

    @property
    def flops(self) -> float:
        """Total forward FLOPs per sample.

        Examples
        --------
        >>> Architecture("x", (Layer("a", (("a.weight", (3, 3)),), 18.0),), "", "").flops
        18.0
        """
        return float(sum(layer.flops for layer in self.layers))


# ---------------------------------------------------------------------- constructors
def out_size(size: int, kernel: int, stride: int = 1, padding: int = 0, *, ceil_mode: bool = False) -> int:
    """Output side length of a convolution or pooling window, as PyTorch computes it.

    Parameters
    ----------
    size : int
        Input side length (square inputs).
    kernel, stride, padding : int
        Window size, stride and zero padding on each side.
    ceil_mode : bool
        Round up instead of down (PyTorch ``MaxPool2d(ceil_mode=True)``); a last window
        that would start in the right padding is dropped, as in PyTorch.

    Raises
    ------
    ValueError
        If the output would be empty (the input is too small for the network).

    Examples
    --------
    >>> out_size(224, 7, stride=2, padding=3)
    112
    >>> out_size(112, 3, stride=2, ceil_mode=True)
    56
    """
    span = size + 2 * padding - kernel
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + padding:
            out -= 1
    else:
        out = span // stride + 1
    if span < 0 or out < 1:
        raise ValueError(
            f"input of side {size} is too small for a {kernel}x{kernel} window "
            f"(stride {stride}, padding {padding}): the image size is too small for this network"
        )
    return out


def conv2d(name: str, cin: int, cout: int, kernel: int, out: int, *, bias: bool = False, groups: int = 1) -> Layer:
    """A square ``Conv2d`` layer producing ``cout`` maps of side ``out``.

    FLOPs per sample: ``2 * cin/groups * kernel^2 * cout * out^2``.

    Examples
    --------
    >>> c = conv2d("conv1", 3, 64, 7, out=112)
    >>> c.tensors, c.flops
    ((('conv1.weight', (64, 3, 7, 7)),), 236027904.0)
    """
    cin, cout, kernel, out, groups = (check_positive_int(label, value) for label, value in
                                      (("cin", cin), ("cout", cout), ("kernel", kernel), ("out", out),
                                       ("groups", groups)))
    if cin % groups or cout % groups:
        raise ValueError(f"conv {name!r}: groups = {groups} must divide cin = {cin} and cout = {cout}")
    tensors: list[tuple[str, Shape]] = [(f"{name}.weight", (cout, cin // groups, kernel, kernel))]
    if bias:
        tensors.append((f"{name}.bias", (cout,)))
    flops = 2.0 * (cin // groups) * kernel * kernel * cout * out * out
    kind = "depthwise" if groups == cin > 1 else "conv"
    return Layer(name, tuple(tensors), flops, ready=tuple(range(len(tensors))), kind=kind)   # weight first


def batchnorm2d(name: str, channels: int, out: int) -> Layer:
    """A ``BatchNorm2d`` layer over ``channels`` maps of side ``out`` (weight and bias).

    FLOPs per sample: 4 per output element. The running statistics are buffers, not
    parameters, and are not listed.

    Examples
    --------
    >>> bn = batchnorm2d("bn1", 64, out=112)
    >>> [n for n, _ in bn.tensors], bn.flops
    (['bn1.weight', 'bn1.bias'], 3211264.0)
    """
    channels, out = check_positive_int("channels", channels), check_positive_int("out", out)
    flops = float(NORM_FLOPS_PER_ELEMENT * channels * out * out)
    return Layer(name, ((f"{name}.weight", (channels,)), (f"{name}.bias", (channels,))), flops, ready=(0, 1),
                 kind="norm")


def linear(name: str, fan_in: int, fan_out: int, *, tokens: int = 1, bias: bool = True) -> Layer:
    """A ``Linear`` layer applied to ``tokens`` vectors per sample.

    FLOPs per sample: ``2 * fan_in * fan_out * tokens``.

    Examples
    --------
    >>> fc = linear("fc", 2048, 1000)
    >>> fc.tensors, fc.flops
    ((('fc.weight', (1000, 2048)), ('fc.bias', (1000,))), 4096000.0)
    """
    fan_in, fan_out, tokens = (check_positive_int(label, value) for label, value in
                               (("fan_in", fan_in), ("fan_out", fan_out), ("tokens", tokens)))
    tensors: list[tuple[str, Shape]] = [(f"{name}.weight", (fan_out, fan_in))]
    if bias:
        tensors.append((f"{name}.bias", (fan_out,)))
    return Layer(name, tuple(tensors), 2.0 * fan_in * fan_out * tokens, kind="linear")


def layernorm(name: str, dim: int, *, tokens: int = 1) -> Layer:
    """A ``LayerNorm`` over ``dim`` features applied to ``tokens`` vectors per sample.

    FLOPs per sample: 4 per output element, ``4 * dim * tokens``.

    Examples
    --------
    >>> layernorm("ln", 768, tokens=128).flops
    393216.0
    """
    flops = float(NORM_FLOPS_PER_ELEMENT * dim * tokens)
    return Layer(name, ((f"{name}.weight", (dim,)), (f"{name}.bias", (dim,))), flops, ready=(0, 1), kind="norm")


def embedding(name: str, num: int, dim: int) -> Layer:
    """An ``Embedding`` table of ``num`` rows of ``dim`` features; 0 FLOPs (a gather).

    Examples
    --------
    >>> embedding("emb", 30522, 768).tensors
    (('emb.weight', (30522, 768)),)
    """
    return Layer(name, ((f"{name}.weight", (num, dim)),), 0.0, kind="embedding")


def check_positive_int(label: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer, else raise ``ValueError``.

    Examples
    --------
    >>> check_positive_int("batch", 8)
    8
    >>> check_positive_int("batch", 0)
    Traceback (most recent call last):
    ...
    ValueError: batch must be a positive integer, got 0
    """
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValueError(f"{label} must be a positive integer, got {value!r}")
    number = value.__index__()  # type: ignore[attr-defined]
    if number <= 0:
        raise ValueError(f"{label} must be a positive integer, got {value!r}")
    return number
