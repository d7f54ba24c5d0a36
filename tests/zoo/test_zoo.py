"""Tests of the model zoo: exact parameter counts, tensor order and names, FLOPs, profiles."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fusionopt.model import Profile
from fusionopt.zoo import Architecture, Device, Layer, architecture, device, devices, models, profile

# Reference parameter counts: torchvision resnet18 / resnet50 / resnet101 / resnet152 /
# vgg16 / vgg19 / alexnet / googlenet(aux_logits=False) / inception_v3 (aux_logits=True) /
# densenet121 / densenet201 / mobilenet_v2 / vit_b_16; HuggingFace BertModel
# ("bert-base-uncased", "bert-large-uncased") with pooler; HuggingFace GPT2Model("gpt2",
# "gpt2-medium"), whose tied LM head counts the embedding matrix once; PyTorch's
# word_language_model RNNModel('LSTM', 10000, 1500, 1500, 2) (see tests/zoo/test_zoo_more.py).
PARAMETERS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "alexnet": 61_100_840,
    "googlenet": 6_624_904,
    "bert-base": 109_482_240,
    "bert-large": 335_141_888,
    "gpt2": 124_439_808,
    "inception-v3": 27_161_264,
    "densenet121": 7_978_856,
    "densenet201": 20_013_928,
    "mobilenet-v2": 3_504_872,
    "vit-b16": 86_567_656,
    "gpt2-medium": 354_823_168,
    "lstm-lm": 66_034_000,
}

# Tensor counts derived from the structure, independently of the zoo code:
#   ResNet-50: 1 stem conv + 16 bottlenecks x 3 convs + 4 downsample convs = 53 convs
#              (no bias), 53 BatchNorms x (weight, bias), fc weight + bias.
#   ResNet-152: the same with 3 + 8 + 36 + 3 = 50 bottlenecks: 1 + 150 + 4 = 155 convs.
#   ResNet-101: 3 + 4 + 23 + 3 = 33 bottlenecks: 1 + 99 + 4 = 104 convs.
#   ResNet-18: 8 basic blocks x 2 convs + 1 stem + 3 downsamples (layer2..4) = 20 convs.
#   VGG-16:    13 convs + 3 linears, each weight + bias.
#   VGG-19:    16 convs + 3 linears, each weight + bias.
#   AlexNet:   5 convs + 3 linears, each weight + bias.
#   GoogLeNet: 3 stem BasicConv2d + 9 inceptions x 6 BasicConv2d = 57, each conv weight +
#              bn weight + bn bias; fc weight + bias.
#   BERT-base: 3 embedding tables + LayerNorm (2); 12 layers x (q, k, v, attn-out dense,
#              LayerNorm, intermediate, output dense, LayerNorm) x 2; pooler weight + bias.
#   BERT-large: the same with 24 layers.
#   GPT-2:     wte + wpe; 12 blocks x (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj) x 2; ln_f x 2.
#   GPT-2 medium: the same with 24 blocks.
#   Inception-v3: 96 BasicConv2d (5 stem + 3 x 7 A + 4 B + 4 x 10 C + 2 aux + 6 D + 2 x 9 E)
#              x (conv weight, bn weight, bn bias); AuxLogits.fc and fc, weight + bias.
#   DenseNet-121: 6 + 12 + 24 + 16 = 58 dense layers x (norm1 x 2, conv1, norm2 x 2, conv2);
#              conv0 + norm0 x 2; 3 transitions x (norm x 2, conv); norm5 x 2; classifier x 2.
#   DenseNet-201: the same with 6 + 12 + 48 + 32 = 98 dense layers.
#   MobileNet-v2: 52 convs (stem, 2 in block 1, 3 in each of 16 blocks, head) + 52 BNs x 2 +
#              classifier x 2.
#   ViT-B/16:  conv_proj x 2, class_token, pos_embedding; 12 layers x (ln_1, in_proj,
#              out_proj, ln_2, mlp.0, mlp.3) x 2; encoder.ln x 2; heads.head x 2.
#   LSTM LM:   encoder; 2 LSTM layers x (weight_ih, weight_hh, bias_ih, bias_hh); decoder x 2.
TENSORS = {
    "resnet18": 20 + 20 * 2 + 2,
    "resnet50": 53 + 53 * 2 + 2,
    "resnet101": 104 + 104 * 2 + 2,
    "resnet152": 155 + 155 * 2 + 2,
    "vgg16": 16 * 2,
    "vgg19": 19 * 2,
    "alexnet": 8 * 2,
    "googlenet": 57 * 3 + 2,
    "bert-base": 3 + 2 + 12 * 8 * 2 + 2,
    "bert-large": 3 + 2 + 24 * 8 * 2 + 2,
    "gpt2": 2 + 12 * 6 * 2 + 2,
    "gpt2-medium": 2 + 24 * 6 * 2 + 2,
    "inception-v3": 96 * 3 + 2 + 2,
    "densenet121": 58 * 6 + 3 + 3 * 3 + 2 + 2,
    "densenet201": 98 * 6 + 3 + 3 * 3 + 2 + 2,
    "mobilenet-v2": 52 + 52 * 2 + 2,
    "vit-b16": 1 + 2 + 1 + 12 * 6 * 2 + 2 + 2,
    "lstm-lm": 1 + 2 * 4 + 2,
}

# Models with parameters that are not a module's ``weight``/``bias``: ViT's bare
# ``class_token`` and ``encoder.pos_embedding`` and MultiheadAttention's
# ``in_proj_weight``; nn.LSTM's ``weight_ih_l0`` etc. (checked in test_zoo_more.py).
NON_WEIGHT_LAYOUT = {"vit-b16", "lstm-lm"}


def shapes(name: str, **kwargs) -> dict[str, tuple[int, ...]]:
    return dict(architecture(name, **kwargs).tensors)


# ---------------------------------------------------------------------- catalogue
def test_models_lists_the_models():
    assert set(models()) == set(PARAMETERS) == set(TENSORS)
    assert all(isinstance(d, str) and d for d in models().values())


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameter_counts_are_exact(name):
    arch = architecture(name)
    assert arch.parameters == PARAMETERS[name]
    assert sum(math.prod(s) for _, s in arch.tensors) == PARAMETERS[name]
    assert arch.name == name


@pytest.mark.parametrize("name", sorted(TENSORS))
def test_tensor_counts(name):
    arch = architecture(name)
    assert len(arch.tensors) == TENSORS[name]
    names = [n for n, _ in arch.tensors]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("name", sorted(set(PARAMETERS) - NON_WEIGHT_LAYOUT))
def test_each_layer_leads_with_its_weight(name):
    for layer in architecture(name).layers:
        first, _ = layer.tensors[0]
        assert first == f"{layer.name}.weight"
        assert all(t.startswith(layer.name + ".") for t, _ in layer.tensors)


def test_architecture_name_is_case_insensitive():
    assert architecture(" ResNet50 ").parameters == PARAMETERS["resnet50"]


# ---------------------------------------------------------------------- ResNet-50
def test_resnet50_names_and_shapes():
    arch = architecture("resnet50")
    names = [n for n, _ in arch.tensors]
    assert names[:3] == ["conv1.weight", "bn1.weight", "bn1.bias"]
    assert names[3:18] == [
        "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
        "layer1.0.conv2.weight", "layer1.0.bn2.weight", "layer1.0.bn2.bias",
        "layer1.0.conv3.weight", "layer1.0.bn3.weight", "layer1.0.bn3.bias",
        "layer1.0.downsample.0.weight", "layer1.0.downsample.1.weight", "layer1.0.downsample.1.bias",
        "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias",
    ]
    assert names[-2:] == ["fc.weight", "fc.bias"]
    s = dict(arch.tensors)
    assert s["conv1.weight"] == (64, 3, 7, 7)
    assert s["layer1.0.downsample.0.weight"] == (256, 64, 1, 1)
    assert s["layer2.0.conv2.weight"] == (128, 128, 3, 3)
    assert s["layer3.5.bn3.bias"] == (1024,)
    assert s["layer4.2.conv3.weight"] == (2048, 512, 1, 1)
    assert s["fc.weight"] == (1000, 2048)
    # Only the first block of each stage has a downsample; v1.5 has blocks 3, 4, 6, 3.
    assert sorted(n for n in names if n.endswith("downsample.0.weight")) == [
        f"layer{k}.0.downsample.0.weight" for k in range(1, 5)
    ]
    assert "layer3.5.conv1.weight" in s and "layer3.6.conv1.weight" not in s
    assert not any(n.endswith("conv1.bias") or n.endswith("conv2.bias") for n in names)


def test_resnet50_flops_about_8_2_gflops():
    assert architecture("resnet50").flops == pytest.approx(8.2e9, rel=0.02)


def test_resnet50_conv1_flops():
    # 7x7x3 -> 64 at 112x112: 118,013,952 multiply-adds.
    assert architecture("resnet50").layers[0].flops == 2 * 118_013_952


# ---------------------------------------------------------------------- ResNet-152
def test_resnet152_parameter_count_matches_torchvision():
    # torchvision.models.resnet152(): sum(p.numel() for p in model.parameters()) == 60,192,808.
    assert architecture("resnet152").parameters == 60_192_808


def test_resnet152_blocks_and_shapes():
    arch = architecture("resnet152")
    names = [n for n, _ in arch.tensors]
    s = dict(arch.tensors)
    # Blocks 3, 8, 36, 3: the last block of each stage exists, the next one does not.
    for stage, blocks in enumerate((3, 8, 36, 3), start=1):
        assert f"layer{stage}.{blocks - 1}.conv3.weight" in s
        assert f"layer{stage}.{blocks}.conv1.weight" not in s
    assert sorted(n for n in names if n.endswith("downsample.0.weight")) == [
        f"layer{k}.0.downsample.0.weight" for k in range(1, 5)
    ]
    assert s["layer3.35.conv2.weight"] == (256, 256, 3, 3)
    assert s["layer2.0.conv2.weight"] == (128, 128, 3, 3)
    assert s["fc.weight"] == (1000, 2048)
    # The stem and the first stage are ResNet-50's, tensor for tensor.
    assert arch.tensors[:3 + 12 + 9 + 9] == architecture("resnet50").tensors[:3 + 12 + 9 + 9]


def test_resnet152_flops_about_23_gflops():
    # torchvision reports 11.51 GMACs per 224 x 224 image.
    assert architecture("resnet152").flops == pytest.approx(2 * 11.51e9, rel=0.01)


# ---------------------------------------------------------------------- ResNet-18 / -101
def test_resnet18_basic_blocks():
    arch = architecture("resnet18")
    names = [n for n, _ in arch.tensors]
    assert names[3:12] == [
        "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
        "layer1.0.conv2.weight", "layer1.0.bn2.weight", "layer1.0.bn2.bias",
        "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias",
    ]
    assert not any(".conv3." in n for n in names)
    # layer1 keeps 64 channels at stride 1, so it has no downsample.
    assert sorted(n for n in names if n.endswith("downsample.0.weight")) == [
        f"layer{k}.0.downsample.0.weight" for k in range(2, 5)
    ]
    s = dict(arch.tensors)
    assert s["layer2.0.conv1.weight"] == (128, 64, 3, 3)
    assert s["layer2.0.downsample.0.weight"] == (128, 64, 1, 1)
    assert s["layer4.1.conv2.weight"] == (512, 512, 3, 3)
    assert "layer4.1.bn2.bias" in s and "layer4.2.conv1.weight" not in s
    assert s["fc.weight"] == (1000, 512)


def test_resnet18_flops_about_3_6_gflops():
    # torchvision reports 1.81 GMACs per 224 x 224 image.
    assert architecture("resnet18").flops == pytest.approx(2 * 1.81e9, rel=0.01)


def test_resnet101_blocks_and_flops():
    arch = architecture("resnet101")
    s = dict(arch.tensors)
    for stage, blocks in enumerate((3, 4, 23, 3), start=1):
        assert f"layer{stage}.{blocks - 1}.conv3.weight" in s
        assert f"layer{stage}.{blocks}.conv1.weight" not in s
    assert s["layer3.22.conv2.weight"] == (256, 256, 3, 3)
    # The stem, layer1, layer2 and the first six blocks of layer3 are ResNet-50's.
    prefix = 3 + (12 + 9 * 2) + (12 + 9 * 3) + (12 + 9 * 5)
    assert arch.tensors[:prefix] == architecture("resnet50").tensors[:prefix]
    assert arch.tensors[prefix][0] == "layer3.6.conv1.weight"
    # torchvision reports 7.80 GMACs per 224 x 224 image.
    assert arch.flops == pytest.approx(2 * 7.80e9, rel=0.01)


# ---------------------------------------------------------------------- VGG-16
def test_vgg16_names_and_shapes():
    arch = architecture("vgg16")
    conv_idx = [0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]
    expected = [f"features.{i}.{p}" for i in conv_idx for p in ("weight", "bias")]
    expected += [f"classifier.{i}.{p}" for i in (0, 3, 6) for p in ("weight", "bias")]
    assert [n for n, _ in arch.tensors] == expected
    s = dict(arch.tensors)
    assert s["features.0.weight"] == (64, 3, 3, 3)
    assert s["features.28.weight"] == (512, 512, 3, 3)
    assert s["classifier.0.weight"] == (4096, 25088)
    assert s["classifier.6.bias"] == (1000,)


def test_vgg16_flops_about_31_gflops():
    assert architecture("vgg16").flops == pytest.approx(31.0e9, rel=0.02)


def test_vgg16_classifier_does_not_depend_on_image_size():
    small = architecture("vgg16", image_size=64)
    assert small.parameters == PARAMETERS["vgg16"]
    assert small.flops < architecture("vgg16").flops


# ---------------------------------------------------------------------- VGG-19, AlexNet
def test_vgg19_names_and_flops():
    arch = architecture("vgg19")
    conv_idx = [0, 2, 5, 7, 10, 12, 14, 16, 19, 21, 23, 25, 28, 30, 32, 34]
    expected = [f"features.{i}.{p}" for i in conv_idx for p in ("weight", "bias")]
    expected += [f"classifier.{i}.{p}" for i in (0, 3, 6) for p in ("weight", "bias")]
    assert [n for n, _ in arch.tensors] == expected
    s = dict(arch.tensors)
    assert s["features.16.weight"] == (256, 256, 3, 3)
    assert s["features.34.weight"] == (512, 512, 3, 3)
    assert s["classifier.0.weight"] == (4096, 25088)
    # torchvision reports 19.63 GMACs per 224 x 224 image.
    assert arch.flops == pytest.approx(2 * 19.63e9, rel=0.01)
    assert architecture("vgg19", image_size=64).parameters == PARAMETERS["vgg19"]


def test_alexnet_names_shapes_and_flops():
    arch = architecture("alexnet")
    expected = [f"features.{i}.{p}" for i in (0, 3, 6, 8, 10) for p in ("weight", "bias")]
    expected += [f"classifier.{i}.{p}" for i in (1, 4, 6) for p in ("weight", "bias")]
    assert [n for n, _ in arch.tensors] == expected
    s = dict(arch.tensors)
    assert s["features.0.weight"] == (64, 3, 11, 11)
    assert s["features.3.weight"] == (192, 64, 5, 5)
    assert s["features.6.weight"] == (384, 192, 3, 3)
    assert s["features.10.weight"] == (256, 256, 3, 3)
    assert s["classifier.1.weight"] == (4096, 9216)
    # conv1: 11x11x3 -> 64 at 55x55.
    assert arch.layers[0].flops == 2 * 3 * 121 * 64 * 55 * 55
    # torchvision reports 0.71 GMACs per 224 x 224 image.
    assert arch.flops == pytest.approx(2 * 0.714e9, rel=0.01)
    assert architecture("alexnet", image_size=63).parameters == PARAMETERS["alexnet"]
    with pytest.raises(ValueError, match="too small"):
        architecture("alexnet", image_size=62)


# ---------------------------------------------------------------------- GoogLeNet
def test_googlenet_names_and_shapes():
    arch = architecture("googlenet")
    names = [n for n, _ in arch.tensors]
    assert names[:3] == ["conv1.conv.weight", "conv1.bn.weight", "conv1.bn.bias"]
    block = [
        f"inception3a.{b}.{m}.{p}"
        for b in ("branch1", "branch2.0", "branch2.1", "branch3.0", "branch3.1", "branch4.1")
        for m, p in (("conv", "weight"), ("bn", "weight"), ("bn", "bias"))
    ]
    assert names[9:27] == block
    assert names[-2:] == ["fc.weight", "fc.bias"]
    assert not any(n.endswith("conv.bias") for n in names)  # BasicConv2d: bias=False
    assert not any(n.startswith("aux") for n in names)
    s = dict(arch.tensors)
    assert s["conv3.conv.weight"] == (192, 64, 3, 3)
    assert s["inception3a.branch3.1.conv.weight"] == (32, 16, 3, 3)  # torchvision: 3x3
    assert s["inception4e.branch2.1.conv.weight"] == (320, 160, 3, 3)
    assert s["inception5b.branch4.1.conv.weight"] == (128, 832, 1, 1)
    assert s["fc.weight"] == (1000, 1024)


def test_googlenet_flops_about_3_gflops():
    # torchvision reports 1.50 GMACs ("GFLOPS") for googlenet.
    assert architecture("googlenet").flops == pytest.approx(3.0e9, rel=0.03)


# ---------------------------------------------------------------------- BERT-base
def test_bert_names_and_shapes():
    arch = architecture("bert-base")
    names = [n for n, _ in arch.tensors]
    # Forward order: BertEmbeddings adds the token-type embedding before the position one.
    assert names[:5] == [
        "embeddings.word_embeddings.weight",
        "embeddings.token_type_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    ]
    layer0 = [
        f"encoder.layer.0.{m}.{p}"
        for m in (
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense", "attention.output.LayerNorm",
            "intermediate.dense", "output.dense", "output.LayerNorm",
        )
        for p in ("weight", "bias")
    ]
    assert names[5:21] == layer0
    assert names[-4:] == [
        "encoder.layer.11.output.LayerNorm.weight", "encoder.layer.11.output.LayerNorm.bias",
        "pooler.dense.weight", "pooler.dense.bias",
    ]
    s = dict(arch.tensors)
    assert s["embeddings.word_embeddings.weight"] == (30522, 768)
    assert s["embeddings.position_embeddings.weight"] == (512, 768)
    assert s["embeddings.token_type_embeddings.weight"] == (2, 768)
    assert s["encoder.layer.3.intermediate.dense.weight"] == (3072, 768)
    assert s["encoder.layer.3.output.dense.weight"] == (768, 3072)
    assert s["pooler.dense.bias"] == (768,)


@pytest.mark.parametrize("seq", [1, 128, 512])
def test_bert_flops_formula(seq):
    h, ff = 768, 3072
    per_layer = 2 * seq * (4 * h * h + 2 * h * ff) + 2 * 2 * seq * seq * h + 2 * 4 * h * seq
    expected = 12 * per_layer + 4 * h * seq + 2 * h * h
    arch = architecture("bert-base", seq_len=seq)
    assert arch.flops == expected
    assert arch.parameters == PARAMETERS["bert-base"]


def test_bert_attention_core_goes_on_value():
    arch = architecture("bert-base", seq_len=128)
    by_name = {layer.name: layer.flops for layer in arch.layers}
    q = by_name["encoder.layer.0.attention.self.query"]
    v = by_name["encoder.layer.0.attention.self.value"]
    assert v - q == 2 * 2 * 128 * 128 * 768
    assert by_name["embeddings.word_embeddings"] == 0


def test_bert_large_shapes_and_flops():
    arch = architecture("bert-large", seq_len=128)
    names = [n for n, _ in arch.tensors]
    assert names[:5] == [n for n, _ in architecture("bert-base").tensors[:5]]
    assert names[-4:] == [
        "encoder.layer.23.output.LayerNorm.weight", "encoder.layer.23.output.LayerNorm.bias",
        "pooler.dense.weight", "pooler.dense.bias",
    ]
    s = dict(arch.tensors)
    assert s["embeddings.word_embeddings.weight"] == (30522, 1024)
    assert s["encoder.layer.7.intermediate.dense.weight"] == (4096, 1024)
    assert s["encoder.layer.7.output.dense.weight"] == (1024, 4096)
    # HuggingFace BertModel without the pooler: 334,092,288 parameters.
    assert arch.parameters - 1024 * 1024 - 1024 == 334_092_288
    seq, h, ff = 128, 1024, 4096
    per_layer = 2 * seq * (4 * h * h + 2 * h * ff) + 2 * 2 * seq * seq * h + 2 * 4 * h * seq
    assert arch.flops == 24 * per_layer + 4 * h * seq + 2 * h * h


def test_gpt2_names_shapes_and_flops():
    arch = architecture("gpt2", seq_len=256)
    names = [n for n, _ in arch.tensors]
    assert names[:2] == ["wte.weight", "wpe.weight"]
    assert names[2:14] == [
        f"h.0.{m}.{p}"
        for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
        for p in ("weight", "bias")
    ]
    assert names[-2:] == ["ln_f.weight", "ln_f.bias"]
    s = dict(arch.tensors)
    assert s["wte.weight"] == (50257, 768)
    assert s["wpe.weight"] == (1024, 768)
    # Conv1D weights are (in, out).
    assert s["h.11.attn.c_attn.weight"] == (768, 2304)
    assert s["h.11.mlp.c_fc.weight"] == (768, 3072)
    assert s["h.11.mlp.c_proj.weight"] == (3072, 768)
    assert "lm_head.weight" not in s
    seq, h = 256, 768
    per_layer = 2 * seq * (12 * h * h) + 2 * 2 * seq * seq * h + 2 * 4 * h * seq
    assert arch.flops == 12 * per_layer + 4 * h * seq
    by_name = {layer.name: layer.flops for layer in arch.layers}
    assert by_name["h.0.attn.c_attn"] == 2 * seq * h * 3 * h + 2 * 2 * seq * seq * h
    assert architecture("gpt2").input_description == "one sequence of 1024 tokens"


@pytest.mark.parametrize("bad", [0, 1025, 2.0])
def test_gpt2_bad_seq_len(bad):
    with pytest.raises(ValueError, match="seq_len"):
        architecture("gpt2", seq_len=bad)


@pytest.mark.parametrize("bad", [0, -1, 513, 1.5, "128"])
def test_bert_bad_seq_len(bad):
    with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
        architecture("bert-base", seq_len=bad)


def test_image_too_small_raises():
    with pytest.raises(ValueError, match="too small"):
        architecture("vgg16", image_size=16)


# ---------------------------------------------------------------------- data model
def test_dataclasses_are_frozen():
    arch = architecture("resnet50")
    with pytest.raises(dataclasses.FrozenInstanceError):
        arch.name = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        arch.layers[0].flops = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        device("h100").efficiency = 1.0  # type: ignore[misc]


def test_architecture_rejects_repeated_tensor_names():
    layer = Layer("a", (("a.weight", (2,)),), 0.0)
    with pytest.raises(ValueError, match="repeated"):
        Architecture("x", (layer, layer), "", "")


# ---------------------------------------------------------------------- devices
def test_device_presets():
    d = devices()
    assert set(d) == {"k80", "v100", "a100", "h100"}
    assert d["k80"].peak_flops == 4.37e12
    assert d["v100"].peak_flops == 125e12
    assert d["a100"].peak_flops == 312e12
    assert d["h100"].peak_flops == 989e12
    assert all(0 < x.efficiency <= 1 for x in d.values())
    assert device("H100") is d["h100"]


# ---------------------------------------------------------------------- profile
@pytest.mark.parametrize("name", sorted(PARAMETERS))
@pytest.mark.parametrize("dev", ["v100", "h100"])
def test_profile_is_a_consistent_roofline_estimate(name, dev):
    batch, dtype_bytes = 32, 2
    p = profile(name, device=dev, batch=batch, dtype_bytes=dtype_bytes, compute="roofline")
    arch = architecture(name)
    d = device(dev)
    assert isinstance(p, Profile)
    assert p.name == name
    assert p.names == tuple(n for n, _ in arch.tensors)
    assert p.total_bytes == arch.parameters * dtype_bytes
    assert p.dtype_bytes == dtype_bytes
    assert list(p.sizes) == [math.prod(s) * dtype_bytes for _, s in arch.tensors]
    assert np.array_equal(p.backward, 2 * p.forward)
    assert p.F == pytest.approx(arch.flops * batch / (d.peak_flops * d.efficiency), rel=1e-12)
    for i, n in enumerate(p.names):
        if n.endswith(".weight") and i + 1 < p.n and p.names[i + 1] == n[:-len("weight")] + "bias":
            assert p.forward[i] == 0 and p.backward[i] == 0   # the layer's time is on its bias
    assert p.metadata == {
        "source": "roofline estimate", "device": dev, "batch": batch,
        "peak_flops": d.peak_flops, "efficiency": d.efficiency, "ready_order_for": "cuda",
    }


@pytest.mark.parametrize("name", ["googlenet", "bert-base", "lstm-lm"])
def test_profile_times_go_on_each_layers_last_tensor(name):
    # As profile_model attributes measured times: every gradient of a layer is ready only
    # after the layer's backward, and a layerwise forward waits for all of its tensors.
    arch = architecture(name)
    p = profile(name, device="a100", batch=8, order="cpu", compute="roofline")   # the architecture's own (CPU) layers
    rate = device("a100").peak_flops * device("a100").efficiency
    ready = p.ready_times
    for layer in arch.layers:
        first = p.index(layer.tensors[0][0])
        last = first + len(layer.tensors) - 1
        assert p.forward[last] == pytest.approx(layer.flops * 8 / rate, rel=1e-15)
        assert p.backward[last] == 2 * p.forward[last]
        for k in range(first, last):
            assert p.forward[k] == 0.0 and p.backward[k] == 0.0
            assert ready[k] == ready[last]     # the whole layer ready at once


def test_profile_passes_architecture_arguments():
    short = profile("bert-base", seq_len=64, compute="roofline")
    long = profile("bert-base", seq_len=256, compute="roofline")
    assert short.total_bytes == long.total_bytes
    assert long.F > 4 * short.F


def test_profile_accepts_a_device_object():
    toy = Device("toy", peak_flops=1e12, efficiency=1.0, description="toy")
    p = profile("vgg16", device=toy, batch=1, compute="roofline")
    assert p.F == pytest.approx(architecture("vgg16").flops / 1e12, rel=1e-12)
    assert p.metadata["device"] == "toy"


def test_profile_roundtrips_through_json():
    p = profile("resnet50")
    assert Profile.from_dict(p.to_dict()) == p


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", ["resnet-50", "resnet34", "", None])
def test_unknown_model(bad):
    with pytest.raises(ValueError, match="unknown model") as err:
        architecture(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(err.value) and "resnet50" in str(err.value)
    with pytest.raises(ValueError, match="unknown model"):
        profile(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["tpu-v4", "H200", ""])
def test_unknown_device(bad):
    with pytest.raises(ValueError, match="unknown device") as err:
        device(bad)
    assert repr(bad) in str(err.value) and "h100" in str(err.value)
    with pytest.raises(ValueError, match="unknown device") as err:
        profile("resnet50", device=bad)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", [0, -4, 2.5, 64.0, "64", True, None])
def test_bad_batch(bad):
    with pytest.raises(ValueError, match="batch") as err:
        profile("resnet50", batch=bad)  # type: ignore[arg-type]
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize("bad", [0, -2, 2.0])
def test_bad_dtype_bytes(bad):
    with pytest.raises(ValueError, match="dtype_bytes"):
        profile("resnet50", dtype_bytes=bad)  # type: ignore[arg-type]


def test_numpy_integer_batch_is_accepted():
    assert profile("resnet50", batch=np.int64(16)).metadata["batch"] == 16
