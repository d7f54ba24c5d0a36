"""DenseNet-121 and DenseNet-201 in the layout of ``torchvision.models.densenet121`` and
``densenet201`` (DenseNet-BC: growth rate 32, bottleneck width 4 x 32 = 128, transitions
halving the channels).

``features`` holds ``conv0`` (7x7, stride 2, no bias), ``norm0``, a 3x3 stride-2
max-pool, then four dense blocks ``denseblock{k}`` of ``denselayer{j}`` (numbered from 1),
each BatchNorm ``norm1``, 1x1 ``conv1`` (to 128 maps), BatchNorm ``norm2``, 3x3 ``conv2``
(to 32 maps); between the blocks ``transition{k}``: BatchNorm ``norm``, 1x1 ``conv``
halving the channels, 2x2 average pool; then the final BatchNorm ``norm5``. The
``classifier`` is a Linear layer after global average pooling. Convolutions have no bias.

FLOP convention: :mod:`fusionopt.zoo._layers`. A dense layer's ``norm1`` normalises all
the maps concatenated so far, so BatchNorm is a larger share of the FLOPs than in a
ResNet (about 1.1% of the total at 224 x 224); concatenation and pooling cost 0.
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

GROWTH_RATE = 32
BOTTLENECK_WIDTH = 4 * GROWTH_RATE  # bn_size * growth_rate
INIT_FEATURES = 64
DENSENET121_BLOCKS = (6, 12, 24, 16)
DENSENET201_BLOCKS = (6, 12, 48, 32)


def _dense_layer(prefix: str, cin: int, size: int) -> list[Layer]:
    """One ``_DenseLayer`` on ``cin`` maps of side ``size``; it adds GROWTH_RATE maps."""
    return [
        batchnorm2d(f"{prefix}.norm1", cin, size),
        conv2d(f"{prefix}.conv1", cin, BOTTLENECK_WIDTH, 1, size),
        batchnorm2d(f"{prefix}.norm2", BOTTLENECK_WIDTH, size),
        conv2d(f"{prefix}.conv2", BOTTLENECK_WIDTH, GROWTH_RATE, 3, size),
    ]


def _densenet(name: str, label: str, blocks: tuple[int, ...], image_size: int,
              num_classes: int) -> Architecture:
    """A torchvision DenseNet-BC with ``blocks`` dense layers in its four blocks."""
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    s = out_size(image_size, 7, 2, 3)
    layers = [conv2d("features.conv0", 3, INIT_FEATURES, 7, s), batchnorm2d("features.norm0", INIT_FEATURES, s)]
    s = out_size(s, 3, 2, 1)  # pool0
    channels = INIT_FEATURES
    for k, count in enumerate(blocks, start=1):
        for j in range(1, count + 1):
            layers += _dense_layer(f"features.denseblock{k}.denselayer{j}", channels, s)
            channels += GROWTH_RATE
        if k < len(blocks):
            prefix = f"features.transition{k}"
            layers += [
                batchnorm2d(f"{prefix}.norm", channels, s),
                conv2d(f"{prefix}.conv", channels, channels // 2, 1, s),  # before the pool
            ]
            channels //= 2
            s = out_size(s, 2, 2)  # 2x2 average pool
    layers.append(batchnorm2d("features.norm5", channels, s))
    layers.append(linear("classifier", channels, num_classes))  # after global average pooling
    return Architecture(
        name=name,
        layers=tuple(layers),
        description=f"{label}, growth rate 32 (torchvision.models.{name})",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )


def densenet121(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """DenseNet-121 (torchvision layout) for square RGB images: dense layers 6, 12, 24, 16.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet; at least 29).
    num_classes : int
        Outputs of the ``classifier`` (default 1000).

    Returns
    -------
    Architecture
        58 dense layers x 6 tensors, ``conv0`` and ``norm0`` (3), three transitions x 3,
        ``norm5`` and ``classifier`` (4): 364 tensors, 7,978,856 parameters with 1000
        classes; about 5.7 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = densenet121()
    >>> net.parameters, len(net.tensors)
    (7978856, 364)
    >>> net.tensors[3]
    ('features.denseblock1.denselayer1.norm1.weight', (64,))
    >>> net.tensors[-1]
    ('classifier.bias', (1000,))
    """
    return _densenet("densenet121", "DenseNet-121", DENSENET121_BLOCKS, image_size, num_classes)


def densenet201(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """DenseNet-201 (torchvision layout) for square RGB images: dense layers 6, 12, 48, 32.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224, ImageNet; at least 29).
    num_classes : int
        Outputs of the ``classifier`` (default 1000).

    Returns
    -------
    Architecture
        98 dense layers x 6 tensors and the same 16 others as DenseNet-121: 604 tensors,
        20,013,928 parameters with 1000 classes; about 8.7 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = densenet201()
    >>> net.parameters, len(net.tensors)
    (20013928, 604)
    >>> net.tensors[-4]
    ('features.norm5.weight', (1920,))
    """
    return _densenet("densenet201", "DenseNet-201", DENSENET201_BLOCKS, image_size, num_classes)
