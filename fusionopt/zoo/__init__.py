"""Model zoo: parameter tensors and forward FLOPs of standard networks, and roofline profiles.

The architectures are derived in plain Python (no deep-learning framework) and list their
parameter tensors with the names and shapes of ``model.named_parameters()``, in forward
order (the order the forward first uses them; MODEL.md section 1: ``named_parameters()``
order for every model but ViT-B/16, whose class token follows the patch embedding), in
torchvision (``resnet18``, ``resnet50``, ``resnet101``, ``resnet152``, ``vgg16``,
``vgg19``, ``alexnet``, ``googlenet``, ``inception-v3``, ``densenet121``,
``densenet201``, ``mobilenet-v2``, ``vit-b16``), HuggingFace (``bert-base``,
``bert-large``, ``gpt2``, ``gpt2-medium``) and PyTorch's word-language-model example
(``lstm-lm``).
FLOP counts follow the convention of :class:`Layer` (a multiply-add is
2 FLOPs; per sample).

:func:`profile` turns an architecture into a :class:`~fusionopt.model.Profile`.
Its compute times are by default **calibrated** against real training steps
(:mod:`fusionopt.zoo.calibrated`: measured on one H100; :mod:`fusionopt.zoo.published`:
published throughput of the A100, V100 and K80); ``compute="roofline"`` gives the
roofline ESTIMATE instead.

Examples
--------
>>> sorted(models())  # doctest: +NORMALIZE_WHITESPACE
['alexnet', 'bert-base', 'bert-large', 'densenet121', 'densenet201', 'googlenet', 'gpt2',
 'gpt2-medium', 'inception-v3', 'lstm-lm', 'mobilenet-v2', 'resnet101', 'resnet152',
 'resnet18', 'resnet50', 'vgg16', 'vgg19', 'vit-b16']
>>> architecture("resnet50").parameters
25557032
"""

from fusionopt.zoo._profiles import COMPUTES, OPTIMIZERS, architecture, device, devices, models, profile
from fusionopt.zoo._devices import Device
from fusionopt.zoo._layers import (
    NORM_FLOPS_PER_ELEMENT, Architecture, Layer, batchnorm2d, conv2d, embedding, layernorm, linear,
)
from fusionopt.zoo._lstm import CUDNN_READY, lstm_layer
from fusionopt.zoo._measured import MEASURED_DIR, measured_profile, measured_profiles

__all__ = [
    "Architecture", "COMPUTES", "CUDNN_READY", "Device", "Layer", "MEASURED_DIR", "NORM_FLOPS_PER_ELEMENT",
    "OPTIMIZERS", "architecture", "batchnorm2d", "conv2d", "device", "devices", "embedding", "layernorm", "linear",
    "lstm_layer", "measured_profile", "measured_profiles", "models", "profile",
]
