"""Inception-v3 in the layout of ``torchvision.models.inception_v3`` (``aux_logits=True``).

Every convolution is a ``BasicConv2d``: a bias-free ``conv`` followed by a ``bn``
BatchNorm (weight and bias; its ``eps=0.001`` does not change shapes or FLOPs). The stem
is ``Conv2d_1a_3x3`` .. ``Conv2d_4a_3x3``; then the blocks ``Mixed_5b`` .. ``Mixed_5d``
(``InceptionA``), ``Mixed_6a`` (``InceptionB``), ``Mixed_6b`` .. ``Mixed_6e``
(``InceptionC``, with 1x7 and 7x1 convolutions), ``Mixed_7a`` (``InceptionD``), ``Mixed_7b``
and ``Mixed_7c`` (``InceptionE``); and ``fc``. The auxiliary classifier ``AuxLogits``
(``conv0``, ``conv1``, ``fc``) is registered between ``Mixed_6e`` and ``Mixed_7a``, so its
tensors sit there in ``named_parameters()`` order. ``transform_input`` owns no
parameters.

FLOP convention: :mod:`fusionopt.zoo._layers`, with ``kh * kw`` in place of ``k^2`` for
the asymmetric kernels. The auxiliary branch runs only in training mode; since a profile
describes a training step, **its FLOPs are counted** (about 11.5 MFLOPs, 0.1% of the
total at 299 x 299). Pooling and concatenation cost 0.
"""

from __future__ import annotations

from fusionopt.zoo._layers import (
    Architecture,
    Layer,
    Shape,
    batchnorm2d,
    check_positive_int,
    linear,
    out_size,
)


def _basic_conv(prefix: str, cin: int, cout: int, kernel: tuple[int, int], out: int) -> list[Layer]:
    """torchvision ``BasicConv2d``: ``prefix.conv`` (no bias, ``kh x kw``) then ``prefix.bn``."""
    kh, kw = kernel
    tensors: tuple[tuple[str, Shape], ...] = ((f"{prefix}.conv.weight", (cout, cin, kh, kw)),)
    conv = Layer(f"{prefix}.conv", tensors, 2.0 * cin * kh * kw * cout * out * out, kind="conv")
    return [conv, batchnorm2d(f"{prefix}.bn", cout, out)]


def _inception_a(prefix: str, cin: int, pool_features: int, s: int) -> tuple[list[Layer], int]:
    convs = [
        ("branch1x1", cin, 64, (1, 1)),
        ("branch5x5_1", cin, 48, (1, 1)),
        ("branch5x5_2", 48, 64, (5, 5)),
        ("branch3x3dbl_1", cin, 64, (1, 1)),
        ("branch3x3dbl_2", 64, 96, (3, 3)),
        ("branch3x3dbl_3", 96, 96, (3, 3)),
        ("branch_pool", cin, pool_features, (1, 1)),  # after a 3x3 stride-1 average pool
    ]
    return _same_size(prefix, convs, s), 64 + 64 + 96 + pool_features


def _inception_b(prefix: str, cin: int, s: int) -> tuple[list[Layer], int, int]:
    half = out_size(s, 3, 2)
    layers = _basic_conv(f"{prefix}.branch3x3", cin, 384, (3, 3), half)
    layers += _same_size(prefix, [("branch3x3dbl_1", cin, 64, (1, 1)), ("branch3x3dbl_2", 64, 96, (3, 3))], s)
    layers += _basic_conv(f"{prefix}.branch3x3dbl_3", 96, 96, (3, 3), half)
    return layers, 384 + 96 + cin, half  # the max-pool branch passes cin maps through


def _inception_c(prefix: str, cin: int, c7: int, s: int) -> tuple[list[Layer], int]:
    convs = [
        ("branch1x1", cin, 192, (1, 1)),
        ("branch7x7_1", cin, c7, (1, 1)),
        ("branch7x7_2", c7, c7, (1, 7)),
        ("branch7x7_3", c7, 192, (7, 1)),
        ("branch7x7dbl_1", cin, c7, (1, 1)),
        ("branch7x7dbl_2", c7, c7, (7, 1)),
        ("branch7x7dbl_3", c7, c7, (1, 7)),
        ("branch7x7dbl_4", c7, c7, (7, 1)),
        ("branch7x7dbl_5", c7, 192, (1, 7)),
        ("branch_pool", cin, 192, (1, 1)),
    ]
    return _same_size(prefix, convs, s), 4 * 192


def _inception_d(prefix: str, cin: int, s: int) -> tuple[list[Layer], int, int]:
    half = out_size(s, 3, 2)
    layers = _same_size(prefix, [("branch3x3_1", cin, 192, (1, 1))], s)
    layers += _basic_conv(f"{prefix}.branch3x3_2", 192, 320, (3, 3), half)
    layers += _same_size(prefix, [
        ("branch7x7x3_1", cin, 192, (1, 1)),
        ("branch7x7x3_2", 192, 192, (1, 7)),
        ("branch7x7x3_3", 192, 192, (7, 1)),
    ], s)
    layers += _basic_conv(f"{prefix}.branch7x7x3_4", 192, 192, (3, 3), half)
    return layers, 320 + 192 + cin, half


def _inception_e(prefix: str, cin: int, s: int) -> tuple[list[Layer], int]:
    convs = [
        ("branch1x1", cin, 320, (1, 1)),
        ("branch3x3_1", cin, 384, (1, 1)),
        ("branch3x3_2a", 384, 384, (1, 3)),
        ("branch3x3_2b", 384, 384, (3, 1)),
        ("branch3x3dbl_1", cin, 448, (1, 1)),
        ("branch3x3dbl_2", 448, 384, (3, 3)),
        ("branch3x3dbl_3a", 384, 384, (1, 3)),
        ("branch3x3dbl_3b", 384, 384, (3, 1)),
        ("branch_pool", cin, 192, (1, 1)),
    ]
    return _same_size(prefix, convs, s), 320 + 2 * 384 + 2 * 384 + 192


def _same_size(prefix: str, convs: list[tuple[str, int, int, tuple[int, int]]], s: int) -> list[Layer]:
    """``BasicConv2d`` layers that keep the side ``s`` (stride 1, "same" padding)."""
    layers: list[Layer] = []
    for name, cin, cout, kernel in convs:
        layers += _basic_conv(f"{prefix}.{name}", cin, cout, kernel, s)
    return layers


def _aux_logits(cin: int, num_classes: int, s: int) -> list[Layer]:
    """``InceptionAux``: 5x5 stride-3 average pool, 1x1 ``conv0``, 5x5 ``conv1``, ``fc``."""
    pooled = out_size(s, 5, 3)
    layers = _basic_conv("AuxLogits.conv0", cin, 128, (1, 1), pooled)
    layers += _basic_conv("AuxLogits.conv1", 128, 768, (5, 5), out_size(pooled, 5))
    layers.append(linear("AuxLogits.fc", 768, num_classes))  # after adaptive average pooling
    return layers


def inception_v3(image_size: int = 299, num_classes: int = 1000) -> Architecture:
    """Inception-v3 (torchvision layout, with the auxiliary classifier) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 299, the smallest size for which the
        auxiliary branch's 5x5 ``conv1`` still has a 5 x 5 input, as in torchvision).
    num_classes : int
        Outputs of ``fc`` and ``AuxLogits.fc`` (default 1000).

    Returns
    -------
    Architecture
        96 ``BasicConv2d`` (5 stem, 3 x 7 in ``InceptionA``, 4 in ``InceptionB``, 4 x 10 in
        ``InceptionC``, 2 auxiliary, 6 in ``InceptionD``, 2 x 9 in ``InceptionE``), each
        conv weight, bn weight, bn bias; ``AuxLogits.fc`` and ``fc``: 292 tensors,
        27,161,264 parameters with 1000 classes (23,834,568 of them outside
        ``AuxLogits``); about 11.5 GFLOPs per 299 x 299 image.

    Examples
    --------
    >>> net = inception_v3()
    >>> net.parameters, len(net.tensors)
    (27161264, 292)
    >>> net.tensors[0]
    ('Conv2d_1a_3x3.conv.weight', (32, 3, 3, 3))
    >>> [name for name, _ in net.tensors].index('AuxLogits.conv0.conv.weight')
    210
    >>> inception_v3(image_size=298)
    Traceback (most recent call last):
    ...
    ValueError: input of side 4 is too small for a 5x5 window (stride 1, padding 0): the image size is too small for this network
    """
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    layers: list[Layer] = []
    s, cin = image_size, 3
    for name, cout, kernel, stride, padding, pool_after in (
        ("Conv2d_1a_3x3", 32, 3, 2, 0, False),
        ("Conv2d_2a_3x3", 32, 3, 1, 0, False),
        ("Conv2d_2b_3x3", 64, 3, 1, 1, True),  # maxpool1: 3x3, stride 2
        ("Conv2d_3b_1x1", 80, 1, 1, 0, False),
        ("Conv2d_4a_3x3", 192, 3, 1, 0, True),  # maxpool2
    ):
        s = out_size(s, kernel, stride, padding)
        layers += _basic_conv(name, cin, cout, (kernel, kernel), s)
        cin = cout
        if pool_after:
            s = out_size(s, 3, 2)
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        more, cin = _inception_a(name, cin, pool_features, s)
        layers += more
    more, cin, s = _inception_b("Mixed_6a", cin, s)
    layers += more
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        more, cin = _inception_c(name, cin, c7, s)
        layers += more
    layers += _aux_logits(cin, num_classes, s)
    more, cin, s = _inception_d("Mixed_7a", cin, s)
    layers += more
    for name in ("Mixed_7b", "Mixed_7c"):
        more, cin = _inception_e(name, cin, s)
        layers += more
    layers.append(linear("fc", cin, num_classes))  # after global average pooling and dropout
    return Architecture(
        name="inception-v3",
        layers=tuple(layers),
        description="Inception-v3 with the auxiliary classifier (torchvision.models.inception_v3)",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )
