"""VGG-16 and VGG-19 in the layout of ``torchvision.models.vgg16`` and ``vgg19``
(configurations "D" and "E", no BatchNorm).

``features`` is an ``nn.Sequential`` of 3x3 convolutions (with bias, padding 1), each
followed by a ReLU, with 2x2 max-pools between stages; so the convolutions sit at
indices 0, 2, 5, 7, 10, ... (VGG-16). VGG-19 has four convolutions, not three, in
each of the last three stages. ``classifier`` is Linear(25088, 4096), ReLU, Dropout,
Linear(4096, 4096), ReLU, Dropout, Linear(4096, classes): indices 0, 3 and 6.
FLOP convention: :mod:`fusionopt.zoo._layers`.
"""

from __future__ import annotations

from fusionopt.zoo._layers import Architecture, Layer, check_positive_int, conv2d, linear, out_size

# Output channels of each convolution; "M" is a 2x2, stride-2 max-pool.
VGG16_CONFIG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)
VGG19_CONFIG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
    512, 512, 512, 512, "M",
)


def vgg16(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """VGG-16 (torchvision layout, no BatchNorm) for square RGB images.

    The adaptive average pool before the classifier always yields 512 x 7 x 7, so the
    classifier's shapes do not depend on ``image_size``.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224; at least 32).
    num_classes : int
        Outputs of the last classifier layer (default 1000).

    Returns
    -------
    Architecture
        13 convolutions and 3 linear layers, each with weight and bias: 32 tensors,
        138,357,544 parameters with 1000 classes; about 31 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = vgg16()
    >>> net.parameters, len(net.tensors)
    (138357544, 32)
    >>> net.tensors[-1]
    ('classifier.6.bias', (1000,))
    """
    return _vgg("vgg16", "VGG-16", VGG16_CONFIG, image_size, num_classes)


def vgg19(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """VGG-19 (torchvision layout, no BatchNorm) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224; at least 32).
    num_classes : int
        Outputs of the last classifier layer (default 1000).

    Returns
    -------
    Architecture
        16 convolutions and 3 linear layers, each with weight and bias: 38 tensors,
        143,667,240 parameters with 1000 classes; about 39 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = vgg19()
    >>> net.parameters, len(net.tensors)
    (143667240, 38)
    >>> net.tensors[-7]
    ('features.34.bias', (512,))
    """
    return _vgg("vgg19", "VGG-19", VGG19_CONFIG, image_size, num_classes)


def _vgg(name: str, label: str, config: tuple[int | str, ...], image_size: int,
         num_classes: int) -> Architecture:
    """A torchvision VGG without BatchNorm; ``config`` lists conv widths and "M" pools."""
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    layers: list[Layer] = []
    index, cin, s = 0, 3, image_size
    for item in config:
        if item == "M":
            s = out_size(s, 2, 2)
            index += 1
        else:
            s = out_size(s, 3, 1, 1)
            layers.append(conv2d(f"features.{index}", cin, int(item), 3, s, bias=True))
            cin = int(item)
            index += 2  # the convolution and its ReLU
    layers += [
        linear("classifier.0", 512 * 7 * 7, 4096),
        linear("classifier.3", 4096, 4096),
        linear("classifier.6", 4096, num_classes),
    ]
    return Architecture(
        name=name,
        layers=tuple(layers),
        description=f"{label} without BatchNorm (torchvision.models.{name})",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )
