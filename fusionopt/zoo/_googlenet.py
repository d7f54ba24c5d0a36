"""GoogLeNet (Inception v1) in the layout of ``torchvision.models.googlenet``.

Matches torchvision with ``aux_logits=False`` (no auxiliary classifiers; this is the
model torchvision's pretrained weights load into by default). ``transform_input`` only
rescales the input and owns no parameters. Every convolution is a ``BasicConv2d``: a
bias-free ``conv`` followed by a ``bn`` BatchNorm (weight and bias). As in torchvision,
the "5x5" branch (``branch3``) uses a **3x3** convolution, and ``branch4`` starts with a
max-pool, so its convolution is ``branch4.1``. Max-pools use ``ceil_mode=True``.
FLOP convention: :mod:`fusionopt.zoo._layers`.
"""

from __future__ import annotations

from fusionopt.zoo._layers import (
    Architecture,
    Layer,
    batchnorm2d,
    check_positive_int,
    conv2d,
    linear,
    out_size,
)

# name: (ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj), in network order; None marks
# the max-pool (kernel, stride) between stages.
INCEPTIONS: tuple[tuple[str, tuple[int, ...]] | None, ...] = (
    ("inception3a", (64, 96, 128, 16, 32, 32)),
    ("inception3b", (128, 128, 192, 32, 96, 64)),
    None,  # maxpool3: 3x3, stride 2
    ("inception4a", (192, 96, 208, 16, 48, 64)),
    ("inception4b", (160, 112, 224, 24, 64, 64)),
    ("inception4c", (128, 128, 256, 24, 64, 64)),
    ("inception4d", (112, 144, 288, 32, 64, 64)),
    ("inception4e", (256, 160, 320, 32, 128, 128)),
    None,  # maxpool4: 2x2, stride 2
    ("inception5a", (256, 160, 320, 32, 128, 128)),
    ("inception5b", (384, 192, 384, 48, 128, 128)),
)


def _basic_conv(prefix: str, cin: int, cout: int, kernel: int, size: int, stride: int = 1,
                padding: int = 0) -> tuple[list[Layer], int]:
    """torchvision ``BasicConv2d``: ``prefix.conv`` (no bias) then ``prefix.bn``."""
    out = out_size(size, kernel, stride, padding)
    return [conv2d(f"{prefix}.conv", cin, cout, kernel, out), batchnorm2d(f"{prefix}.bn", cout, out)], out


def _inception(prefix: str, cin: int, widths: tuple[int, ...], size: int) -> tuple[list[Layer], int]:
    """One torchvision ``Inception`` block; returns its layers and output channels."""
    ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj = widths
    layers: list[Layer] = []
    for branch, cin_, cout, kernel, padding in (
        ("branch1", cin, ch1x1, 1, 0),
        ("branch2.0", cin, ch3x3red, 1, 0),
        ("branch2.1", ch3x3red, ch3x3, 3, 1),
        ("branch3.0", cin, ch5x5red, 1, 0),
        ("branch3.1", ch5x5red, ch5x5, 3, 1),  # 3x3 in torchvision, not 5x5
        ("branch4.1", cin, pool_proj, 1, 0),  # branch4.0 is a 3x3 stride-1 max-pool
    ):
        more, _ = _basic_conv(f"{prefix}.{branch}", cin_, cout, kernel, size, padding=padding)
        layers += more
    return layers, ch1x1 + ch3x3 + ch5x5 + pool_proj


def googlenet(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """GoogLeNet (torchvision layout, no auxiliary heads) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224).
    num_classes : int
        Outputs of the final ``fc`` layer (default 1000).

    Returns
    -------
    Architecture
        57 ``BasicConv2d`` (conv weight, bn weight, bn bias) and ``fc``: 173 tensors,
        6,624,904 parameters with 1000 classes; about 3.0 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = googlenet()
    >>> net.parameters, len(net.tensors)
    (6624904, 173)
    >>> net.tensors[9]
    ('inception3a.branch1.conv.weight', (64, 192, 1, 1))
    """
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    layers, s = _basic_conv("conv1", 3, 64, 7, image_size, stride=2, padding=3)
    s = out_size(s, 3, 2, ceil_mode=True)  # maxpool1
    more, s = _basic_conv("conv2", 64, 64, 1, s)
    layers += more
    more, s = _basic_conv("conv3", 64, 192, 3, s, padding=1)
    layers += more
    s = out_size(s, 3, 2, ceil_mode=True)  # maxpool2
    cin, pools = 192, iter([(3, 2), (2, 2)])  # maxpool3, maxpool4
    for entry in INCEPTIONS:
        if entry is None:
            kernel, stride = next(pools)
            s = out_size(s, kernel, stride, ceil_mode=True)
            continue
        name, widths = entry
        more, cin = _inception(name, cin, widths, s)
        layers += more
    layers.append(linear("fc", cin, num_classes))  # after global average pooling and dropout
    return Architecture(
        name="googlenet",
        layers=tuple(layers),
        description="GoogLeNet / Inception v1 without auxiliary heads (torchvision.models.googlenet)",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )
