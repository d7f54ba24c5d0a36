"""The zoo's models by name: their builders, descriptions and the architecture of each.

Examples
--------
>>> models()["resnet50"]
'ResNet-50 v1.5, torchvision layout, 224x224 ImageNet (25.6M parameters)'
>>> [layer.name for layer in build("lstm-lm", order="cuda").layers]
['encoder', 'rnn', 'decoder']
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from fusionopt.zoo._alexnet import alexnet
from fusionopt.zoo._bert import bert_base, bert_large
from fusionopt.zoo._densenet import densenet121, densenet201
from fusionopt.zoo._googlenet import googlenet
from fusionopt.zoo._gpt2 import gpt2, gpt2_medium
from fusionopt.zoo._inception import inception_v3
from fusionopt.zoo._layers import ORDERS, Architecture
from fusionopt.zoo._lstm import lstm_lm
from fusionopt.zoo._mobilenet import mobilenet_v2
from fusionopt.zoo._resnet import resnet18, resnet50, resnet101, resnet152
from fusionopt.zoo._vgg import vgg16, vgg19
from fusionopt.zoo._vit import vit_b16

# name -> (builder, one-line description)
MODELS: dict[str, tuple[Callable[..., Architecture], str]] = {
    "resnet18": (resnet18, "ResNet-18, torchvision layout, 224x224 ImageNet (11.7M parameters)"),
    "resnet50": (resnet50, "ResNet-50 v1.5, torchvision layout, 224x224 ImageNet (25.6M parameters)"),
    "resnet101": (resnet101, "ResNet-101 v1.5, torchvision layout, 224x224 ImageNet (44.5M parameters)"),
    "resnet152": (resnet152, "ResNet-152 v1.5, torchvision layout, 224x224 ImageNet (60.2M parameters)"),
    "vgg16": (vgg16, "VGG-16 without BatchNorm, torchvision layout, 224x224 ImageNet (138.4M parameters)"),
    "vgg19": (vgg19, "VGG-19 without BatchNorm, torchvision layout, 224x224 ImageNet (143.7M parameters)"),
    "alexnet": (alexnet, "AlexNet, torchvision layout, 224x224 ImageNet (61.1M parameters)"),
    "googlenet": (googlenet, "GoogLeNet / Inception v1, torchvision layout, no aux heads, 224x224 (6.6M parameters)"),
    "inception-v3": (inception_v3, "Inception-v3 with aux classifier, torchvision layout, 299x299 (27.2M parameters)"),
    "densenet121": (densenet121, "DenseNet-121, torchvision layout, 224x224 ImageNet (8.0M parameters)"),
    "densenet201": (densenet201, "DenseNet-201, torchvision layout, 224x224 ImageNet (20.0M parameters)"),
    "mobilenet-v2": (mobilenet_v2, "MobileNet-v2, width 1.0, torchvision layout, 224x224 ImageNet (3.5M parameters)"),
    "vit-b16": (vit_b16, "ViT-B/16, torchvision layout, 224x224 ImageNet, 197 tokens (86.6M parameters)"),
    "bert-base": (bert_base, "BERT-base uncased with pooler, HuggingFace layout, seq_len 128 (109.5M parameters)"),
    "bert-large": (bert_large, "BERT-large uncased with pooler, HuggingFace layout, seq_len 128 (335.1M parameters)"),
    "gpt2": (gpt2, "GPT-2 small, HuggingFace GPT2Model, tied LM head, seq_len 1024 (124.4M parameters)"),
    "gpt2-medium": (gpt2_medium, "GPT-2 medium, HuggingFace GPT2Model, tied LM head, seq_len 1024 (354.8M parameters)"),
    "lstm-lm": (lstm_lm, "2-layer LSTM LM (Zaremba large), PyTorch example layout, PTB, seq_len 35 (66.0M parameters)"),
}


def lookup(kind: str, name: object, known: dict[str, Any]) -> str:
    """``name`` lower-cased and stripped if ``known`` has it, else a ``ValueError`` naming
    the ``kind`` of thing and listing the known ones.

    >>> lookup("model", " ResNet50", MODELS)
    'resnet50'
    """
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in known:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")
    return key


def models() -> dict[str, str]:
    """The available models: name -> one-line description."""
    return {name: desc for name, (_, desc) in MODELS.items()}


def architecture(name: str, **kwargs: Any) -> Architecture:
    """The :class:`Architecture` of model ``name``; ``kwargs`` go to its builder
    (:func:`fusionopt.zoo.architecture` documents them)."""
    builder, _ = MODELS[lookup("model", name, MODELS)]
    return builder(**kwargs)


def build(name: str, order: str = "cuda", **kwargs: Any) -> Architecture:
    """The architecture of model ``name`` whose ready order is that of device ``order``
    (``"cuda"`` or ``"cpu"``); only builders whose layers depend on it take it."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: choose one of {', '.join(ORDERS)}")
    builder, _ = MODELS[lookup("model", name, MODELS)]
    if "order" in inspect.signature(builder).parameters:
        kwargs = {**kwargs, "order": order}
    return architecture(name, **kwargs)
