"""AlexNet in the layout of ``torchvision.models.alexnet`` (the one-GPU variant).

``features``: Conv2d(3, 64, 11, stride 4, padding 2), ReLU, MaxPool(3, 2),
Conv2d(64, 192, 5, padding 2), ReLU, MaxPool(3, 2), Conv2d(192, 384, 3, padding 1),
ReLU, Conv2d(384, 256, 3, padding 1), ReLU, Conv2d(256, 256, 3, padding 1), ReLU,
MaxPool(3, 2): convolutions (all with bias) at indices 0, 3, 6, 8, 10. An adaptive
average pool yields 256 x 6 x 6, so the classifier does not depend on the image size.
``classifier``: Dropout, Linear(9216, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU,
Linear(4096, classes): indices 1, 4 and 6. FLOP convention: :mod:`fusionopt.zoo._layers`.
"""

from __future__ import annotations

from fusionopt.zoo._layers import Architecture, check_positive_int, conv2d, linear, out_size


def alexnet(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """AlexNet (torchvision layout) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels (default 224; at least 63).
    num_classes : int
        Outputs of the last classifier layer (default 1000).

    Returns
    -------
    Architecture
        5 convolutions and 3 linear layers, each with weight and bias: 16 tensors,
        61,100,840 parameters with 1000 classes; about 1.4 GFLOPs per 224 x 224 image.

    Examples
    --------
    >>> net = alexnet()
    >>> net.parameters, len(net.tensors)
    (61100840, 16)
    >>> net.tensors[0], net.tensors[10]
    (('features.0.weight', (64, 3, 11, 11)), ('classifier.1.weight', (4096, 9216)))
    """
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    s = out_size(image_size, 11, 4, 2)
    layers = [conv2d("features.0", 3, 64, 11, s, bias=True)]
    s = out_size(s, 3, 2)  # maxpool
    s = out_size(s, 5, 1, 2)
    layers.append(conv2d("features.3", 64, 192, 5, s, bias=True))
    s = out_size(s, 3, 2)  # maxpool
    layers += [
        conv2d("features.6", 192, 384, 3, s, bias=True),
        conv2d("features.8", 384, 256, 3, s, bias=True),
        conv2d("features.10", 256, 256, 3, s, bias=True),
    ]
    out_size(s, 3, 2)  # the last maxpool must fit
    layers += [
        linear("classifier.1", 256 * 6 * 6, 4096),
        linear("classifier.4", 4096, 4096),
        linear("classifier.6", 4096, num_classes),
    ]
    return Architecture(
        name="alexnet",
        layers=tuple(layers),
        description="AlexNet (torchvision.models.alexnet)",
        input_description=f"one 3 x {image_size} x {image_size} image, {num_classes} classes",
    )
