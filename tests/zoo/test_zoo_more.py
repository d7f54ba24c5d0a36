"""Tests of the zoo's DenseNet, Inception-v3, MobileNet-v2, ViT-B/16, GPT-2 medium and LSTM
language model: exact parameter counts, tensor names, shapes and order, FLOPs.

Published FLOPs: torchvision's model tables list "GFLOPS" that are multiply-adds of the
convolutions, linear layers and attention matmuls (ResNet-50: 4.09), so the zoo's FLOPs
without the normalisation layers (4 FLOPs per element, which torchvision does not count)
must be 2x them; the tolerance of 1% covers the rounding of the published figures to two
decimals (0.30 for MobileNet-v2 is rounded by up to 1.7%, hence 2% there).
"""

from __future__ import annotations

import math

import pytest

from fusionopt.zoo import architecture, models, profile, NORM_FLOPS_PER_ELEMENT

# Published parameter counts (the reference implementation's sum of numel over
# named_parameters()):
PUBLISHED = {
    "densenet121": 7_978_856,  # torchvision densenet121 weights table
    "densenet201": 20_013_928,  # torchvision densenet201 weights table
    "inception-v3": 27_161_264,  # torchvision inception_v3 (aux_logits=True) weights table
    "mobilenet-v2": 3_504_872,  # torchvision mobilenet_v2 weights table
    "vit-b16": 86_567_656,  # torchvision vit_b_16 weights table (224 x 224)
    "gpt2-medium": 354_823_168,  # HuggingFace GPT2Model.from_pretrained("gpt2-medium")
    # RNNModel('LSTM', 10000, 1500, 1500, 2, tie_weights=False), from the layout:
    # 10000*1500 + 2*(4*1500*(1500+1500) + 2*4*1500) + 1500*10000 + 10000.
    "lstm-lm": 66_034_000,
}

# torchvision's "GFLOPS" (multiply-adds) per image at the model's default size.
PUBLISHED_GMACS = {
    "densenet121": 2.83,
    "densenet201": 4.29,
    "inception-v3": 5.71,  # eval mode: without the auxiliary branch
    "mobilenet-v2": 0.30,
    "vit-b16": 17.56,
}


def names(arch):
    return [n for n, _ in arch.tensors]


def is_norm(layer) -> bool:
    """A BatchNorm or LayerNorm: a 1-D weight and a 1-D bias (a conv or linear weight is not 1-D)."""
    return [(n.rsplit(".", 1)[-1], len(s)) for n, s in layer.tensors] == [("weight", 1), ("bias", 1)]


def test_new_models_are_registered():
    assert set(PUBLISHED) <= set(models())
    for name, count in PUBLISHED.items():  # descriptions quote the count in millions
        assert f"({count / 1e6:.1f}M parameters)" in models()[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    arch = architecture(name)
    assert arch.parameters == PUBLISHED[name]
    assert sum(math.prod(s) for _, s in arch.tensors) == PUBLISHED[name]
    assert arch.name == name
    assert len(set(names(arch))) == len(arch.tensors)


def test_lstm_count_from_the_layout():
    ntoken, ninp, nhid = 10000, 1500, 1500
    lstm = sum(4 * nhid * (fan_in + nhid) + 2 * 4 * nhid for fan_in in (ninp, nhid))
    assert ntoken * ninp + lstm + nhid * ntoken + ntoken == PUBLISHED["lstm-lm"]


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_flops_match_published_multiply_adds(name):
    arch = architecture(name)
    norm = sum(layer.flops for layer in arch.layers if is_norm(layer))
    aux = sum(layer.flops for layer in arch.layers if layer.name.startswith("AuxLogits"))
    tolerance = 0.02 if name == "mobilenet-v2" else 0.01
    assert arch.flops - norm - aux == pytest.approx(2e9 * PUBLISHED_GMACS[name], rel=tolerance)
    # The normalisation term is small but present (BatchNorm or LayerNorm on every layer).
    assert 0 < norm < 0.05 * arch.flops


# ---------------------------------------------------------------------- DenseNet
def test_densenet121_names_and_shapes():
    arch = architecture("densenet121")
    n = names(arch)
    assert n[:3] == ["features.conv0.weight", "features.norm0.weight", "features.norm0.bias"]
    layer1 = [
        f"features.denseblock1.denselayer1.{m}"
        for m in ("norm1.weight", "norm1.bias", "conv1.weight", "norm2.weight", "norm2.bias", "conv2.weight")
    ]
    assert n[3:9] == layer1
    # After the 6 dense layers of block 1: transition1.
    assert n[3 + 6 * 6:3 + 6 * 6 + 3] == [
        "features.transition1.norm.weight", "features.transition1.norm.bias", "features.transition1.conv.weight",
    ]
    assert n[-4:] == ["features.norm5.weight", "features.norm5.bias", "classifier.weight", "classifier.bias"]
    s = dict(arch.tensors)
    assert s["features.conv0.weight"] == (64, 3, 7, 7)
    # Block 1 layer j (from 1) sees 64 + 32 (j - 1) maps; the bottleneck is 128 wide.
    assert s["features.denseblock1.denselayer6.norm1.weight"] == (64 + 5 * 32,)
    assert s["features.denseblock1.denselayer6.conv1.weight"] == (128, 224, 1, 1)
    assert s["features.denseblock1.denselayer6.conv2.weight"] == (32, 128, 3, 3)
    assert s["features.transition1.conv.weight"] == (128, 256, 1, 1)
    assert s["features.transition3.conv.weight"] == (512, 1024, 1, 1)
    assert s["features.denseblock4.denselayer16.conv1.weight"] == (128, 512 + 15 * 32, 1, 1)
    assert "features.denseblock4.denselayer17.conv1.weight" not in s
    assert s["classifier.weight"] == (1000, 1024)
    assert not any(x.endswith("conv.bias") or x.endswith(("conv1.bias", "conv2.bias")) for x in n)


def test_densenet_flops_of_one_dense_layer():
    arch = architecture("densenet121")
    by_name = {layer.name: layer.flops for layer in arch.layers}
    p = "features.denseblock2.denselayer3"  # 128 + 2 * 32 = 192 maps at 28 x 28
    assert by_name[f"{p}.norm1"] == NORM_FLOPS_PER_ELEMENT * 192 * 28 * 28
    assert by_name[f"{p}.conv1"] == 2 * 192 * 128 * 28 * 28
    assert by_name[f"{p}.conv2"] == 2 * 128 * 9 * 32 * 28 * 28
    # The transition convolution runs before its 2x2 pool: at 56 x 56.
    assert by_name["features.transition1.conv"] == 2 * 256 * 128 * 56 * 56


def test_densenet201_shapes_and_image_size():
    s = dict(architecture("densenet201").tensors)
    assert s["features.transition3.conv.weight"] == (896, 1792, 1, 1)  # 256 + 48 * 32 = 1792
    assert s["features.denseblock3.denselayer48.conv2.weight"] == (32, 128, 3, 3)
    assert s["features.norm5.bias"] == (1920,)
    assert s["classifier.weight"] == (1000, 1920)
    small = architecture("densenet201", image_size=29, num_classes=10)
    assert small.parameters == PUBLISHED["densenet201"] - 990 * 1920 - 990
    with pytest.raises(ValueError, match="too small"):
        architecture("densenet121", image_size=28)


# ---------------------------------------------------------------------- Inception-v3
def test_inception_v3_names_and_shapes():
    arch = architecture("inception-v3")
    n = names(arch)
    assert n[:3] == ["Conv2d_1a_3x3.conv.weight", "Conv2d_1a_3x3.bn.weight", "Conv2d_1a_3x3.bn.bias"]
    assert not any(x.endswith("conv.bias") for x in n)  # BasicConv2d: bias=False
    # AuxLogits is registered between Mixed_6e and Mixed_7a.
    aux = [i for i, x in enumerate(n) if x.startswith("AuxLogits.")]
    assert n[aux[0] - 1] == "Mixed_6e.branch_pool.bn.bias"
    assert n[aux[-1] + 1] == "Mixed_7a.branch3x3_1.conv.weight"
    assert [n[i] for i in aux] == [
        "AuxLogits.conv0.conv.weight", "AuxLogits.conv0.bn.weight", "AuxLogits.conv0.bn.bias",
        "AuxLogits.conv1.conv.weight", "AuxLogits.conv1.bn.weight", "AuxLogits.conv1.bn.bias",
        "AuxLogits.fc.weight", "AuxLogits.fc.bias",
    ]
    # 5 stem + 3 InceptionA x 7 + InceptionB 4 + 4 InceptionC x 10 BasicConv2d before it.
    assert aux[0] == 3 * (5 + 21 + 4 + 40)
    assert n[-2:] == ["fc.weight", "fc.bias"]
    s = dict(arch.tensors)
    assert s["Conv2d_4a_3x3.conv.weight"] == (192, 80, 3, 3)
    assert s["Mixed_5b.branch5x5_2.conv.weight"] == (64, 48, 5, 5)
    assert s["Mixed_5b.branch_pool.conv.weight"] == (32, 192, 1, 1)
    assert s["Mixed_5c.branch_pool.conv.weight"] == (64, 256, 1, 1)
    assert s["Mixed_6a.branch3x3.conv.weight"] == (384, 288, 3, 3)
    assert s["Mixed_6b.branch7x7_2.conv.weight"] == (128, 128, 1, 7)
    assert s["Mixed_6b.branch7x7_3.conv.weight"] == (192, 128, 7, 1)
    assert s["Mixed_6e.branch7x7dbl_2.conv.weight"] == (192, 192, 7, 1)
    assert s["AuxLogits.conv1.conv.weight"] == (768, 128, 5, 5)
    assert s["AuxLogits.fc.weight"] == (1000, 768)
    assert s["Mixed_7a.branch3x3_2.conv.weight"] == (320, 192, 3, 3)
    assert s["Mixed_7b.branch1x1.conv.weight"] == (320, 1280, 1, 1)
    assert s["Mixed_7c.branch3x3dbl_3b.conv.weight"] == (384, 384, 3, 1)
    assert s["Mixed_7c.branch_pool.conv.weight"] == (192, 2048, 1, 1)
    assert s["fc.weight"] == (1000, 2048)
    aux_params = sum(math.prod(s[x]) for x in n if x.startswith("AuxLogits."))
    assert PUBLISHED["inception-v3"] - aux_params == 23_834_568  # inception_v3(aux_logits=False)


def test_inception_v3_flops():
    arch = architecture("inception-v3")
    by_name = {layer.name: layer.flops for layer in arch.layers}
    assert by_name["Conv2d_1a_3x3.conv"] == 2 * 3 * 9 * 32 * 149 * 149
    assert by_name["Mixed_6b.branch7x7_2.conv"] == 2 * 128 * 7 * 128 * 17 * 17  # 1x7 at 17 x 17
    assert by_name["Mixed_7a.branch3x3_2.conv"] == 2 * 192 * 9 * 320 * 8 * 8  # stride 2: 17 -> 8
    # The auxiliary branch (counted: it runs in training) on its 5 x 5 pooled input.
    assert by_name["AuxLogits.conv0.conv"] == 2 * 768 * 128 * 5 * 5
    assert by_name["AuxLogits.conv1.conv"] == 2 * 128 * 25 * 768 * 1 * 1
    assert by_name["AuxLogits.fc"] == 2 * 768 * 1000
    with pytest.raises(ValueError, match="too small"):
        architecture("inception-v3", image_size=298)
    assert architecture("inception-v3", image_size=320).flops > arch.flops


# ---------------------------------------------------------------------- MobileNet-v2
def test_mobilenet_v2_names_and_shapes():
    arch = architecture("mobilenet-v2")
    n = names(arch)
    assert n[:9] == [
        "features.0.0.weight", "features.0.1.weight", "features.0.1.bias",
        # block 1 (expansion 1): depthwise, BN, projection, BN
        "features.1.conv.0.0.weight", "features.1.conv.0.1.weight", "features.1.conv.0.1.bias",
        "features.1.conv.1.weight", "features.1.conv.2.weight", "features.1.conv.2.bias",
    ]
    assert n[9:18] == [
        "features.2.conv.0.0.weight", "features.2.conv.0.1.weight", "features.2.conv.0.1.bias",
        "features.2.conv.1.0.weight", "features.2.conv.1.1.weight", "features.2.conv.1.1.bias",
        "features.2.conv.2.weight", "features.2.conv.3.weight", "features.2.conv.3.bias",
    ]
    assert n[-5:] == [
        "features.18.0.weight", "features.18.1.weight", "features.18.1.bias",
        "classifier.1.weight", "classifier.1.bias",
    ]
    s = dict(arch.tensors)
    assert s["features.1.conv.0.0.weight"] == (32, 1, 3, 3)  # depthwise: groups = 32
    assert s["features.2.conv.0.0.weight"] == (96, 16, 1, 1)
    assert s["features.2.conv.1.0.weight"] == (96, 1, 3, 3)
    assert s["features.2.conv.2.weight"] == (24, 96, 1, 1)
    assert s["features.17.conv.1.0.weight"] == (960, 1, 3, 3)
    assert s["features.17.conv.2.weight"] == (320, 960, 1, 1)
    assert s["features.18.0.weight"] == (1280, 320, 1, 1)
    assert s["classifier.1.weight"] == (1000, 1280)
    assert "features.19.0.weight" not in s


def test_mobilenet_v2_depthwise_flops():
    by_name = {layer.name: layer.flops for layer in architecture("mobilenet-v2").layers}
    assert by_name["features.0.0"] == 2 * 3 * 9 * 32 * 112 * 112
    assert by_name["features.1.conv.0.0"] == 2 * 9 * 32 * 112 * 112  # depthwise, 112 x 112
    assert by_name["features.2.conv.1.0"] == 2 * 9 * 96 * 56 * 56  # stride 2
    assert by_name["features.18.0"] == 2 * 320 * 1280 * 7 * 7


# ---------------------------------------------------------------------- ViT-B/16
def test_vit_b16_names_and_shapes():
    arch = architecture("vit-b16")
    n = names(arch)
    # Forward order: torchvision registers class_token first but prepends it to conv_proj's
    # output, so the patch embedding comes first (as profile_model measures it).
    assert n[:4] == ["conv_proj.weight", "conv_proj.bias", "class_token", "encoder.pos_embedding"]
    p = "encoder.layers.encoder_layer_0"
    assert n[4:16] == [
        f"{p}.ln_1.weight", f"{p}.ln_1.bias",
        f"{p}.self_attention.in_proj_weight", f"{p}.self_attention.in_proj_bias",
        f"{p}.self_attention.out_proj.weight", f"{p}.self_attention.out_proj.bias",
        f"{p}.ln_2.weight", f"{p}.ln_2.bias",
        f"{p}.mlp.0.weight", f"{p}.mlp.0.bias", f"{p}.mlp.3.weight", f"{p}.mlp.3.bias",
    ]
    assert n[-6:] == [
        "encoder.layers.encoder_layer_11.mlp.3.weight", "encoder.layers.encoder_layer_11.mlp.3.bias",
        "encoder.ln.weight", "encoder.ln.bias", "heads.head.weight", "heads.head.bias",
    ]
    s = dict(arch.tensors)
    assert s["class_token"] == (1, 1, 768)
    assert s["conv_proj.weight"] == (768, 3, 16, 16)
    assert s["encoder.pos_embedding"] == (1, 197, 768)
    assert s["encoder.layers.encoder_layer_5.self_attention.in_proj_weight"] == (2304, 768)
    assert s["encoder.layers.encoder_layer_5.self_attention.in_proj_bias"] == (2304,)
    assert s["encoder.layers.encoder_layer_5.mlp.0.weight"] == (3072, 768)
    assert s["encoder.layers.encoder_layer_5.mlp.3.weight"] == (768, 3072)
    assert s["heads.head.weight"] == (1000, 768)


def test_vit_b16_layers_group_their_module_tensors():
    for layer in architecture("vit-b16").layers:
        for tname, _ in layer.tensors:
            assert tname == layer.name or tname.startswith(layer.name + ".")
        first = layer.tensors[0][0]
        assert first == layer.name or first.endswith("weight")


def test_vit_b16_flops_formula():
    arch = architecture("vit-b16")
    t, h, ff = 197, 768, 3072
    per_layer = 2 * t * (4 * h * h + 2 * h * ff) + 2 * 2 * t * t * h + 2 * 4 * h * t
    conv_proj = 2 * 3 * 16 * 16 * h * 196
    assert arch.flops == 12 * per_layer + conv_proj + 4 * h * t + 2 * h * 1000
    by_name = {layer.name: layer.flops for layer in arch.layers}
    # The attention matmuls go on the layer owning in_proj_weight.
    assert by_name["encoder.layers.encoder_layer_0.self_attention"] == 2 * t * h * 3 * h + 2 * 2 * t * t * h
    assert by_name["class_token"] == 0 and by_name["encoder.pos_embedding"] == 0


def test_vit_b16_image_size():
    big = architecture("vit-b16", image_size=384)
    assert dict(big.tensors)["encoder.pos_embedding"] == (1, 24 * 24 + 1, 768)
    assert big.parameters == PUBLISHED["vit-b16"] - 197 * 768 + 577 * 768
    assert big.input_description.startswith("one 3 x 384 x 384 image (577 tokens)")
    for bad in (200, 0, 15):
        with pytest.raises(ValueError, match="image_size"):
            architecture("vit-b16", image_size=bad)


# ---------------------------------------------------------------------- GPT-2 medium
def test_gpt2_medium_names_shapes_and_flops():
    arch = architecture("gpt2-medium", seq_len=256)
    n = names(arch)
    small = names(architecture("gpt2"))
    assert n[:14] == small[:14]  # the same layout, only wider and deeper
    assert n[-4:] == ["h.23.mlp.c_proj.weight", "h.23.mlp.c_proj.bias", "ln_f.weight", "ln_f.bias"]
    s = dict(arch.tensors)
    assert s["wte.weight"] == (50257, 1024)
    assert s["wpe.weight"] == (1024, 1024)
    assert s["h.23.attn.c_attn.weight"] == (1024, 3072)
    assert s["h.23.attn.c_proj.weight"] == (1024, 1024)
    assert s["h.0.mlp.c_fc.weight"] == (1024, 4096)
    assert s["h.0.mlp.c_proj.weight"] == (4096, 1024)
    assert "h.24.ln_1.weight" not in s
    seq, h = 256, 1024
    per_layer = 2 * seq * (12 * h * h) + 2 * 2 * seq * seq * h + 2 * 4 * h * seq
    assert arch.flops == 24 * per_layer + 4 * h * seq
    assert "24 layers, hidden 1024, 16 heads" in arch.description
    for bad in (0, 1025, 2.0):
        with pytest.raises(ValueError, match="seq_len"):
            architecture("gpt2-medium", seq_len=bad)


def test_gpt2_small_unchanged_by_the_shared_builder():
    arch = architecture("gpt2")
    assert arch.description == (
        "GPT-2 small (124M), 12 layers, hidden 768, 12 heads, tied LM head counted once (HuggingFace GPT2Model)"
    )
    assert dict(arch.tensors)["h.11.mlp.c_fc.weight"] == (768, 3072)


# ---------------------------------------------------------------------- LSTM LM
LSTM_TENSORS = [
    ("encoder.weight", (10000, 1500)),
    ("rnn.weight_ih_l0", (6000, 1500)),
    ("rnn.weight_hh_l0", (6000, 1500)),
    ("rnn.bias_ih_l0", (6000,)),
    ("rnn.bias_hh_l0", (6000,)),
    ("rnn.weight_ih_l1", (6000, 1500)),
    ("rnn.weight_hh_l1", (6000, 1500)),
    ("rnn.bias_ih_l1", (6000,)),
    ("rnn.bias_hh_l1", (6000,)),
    ("decoder.weight", (10000, 1500)),
    ("decoder.bias", (10000,)),
]


def test_lstm_lm_tensors_and_layers():
    arch = architecture("lstm-lm")
    assert arch.tensors == LSTM_TENSORS
    assert [layer.name for layer in arch.layers] == ["encoder", "rnn.l0", "rnn.l1", "decoder"]
    for k in (0, 1):
        assert all(t.endswith(f"_l{k}") for t, _ in arch.layers[1 + k].tensors)
    assert arch.input_description == "one sequence of 35 tokens"


@pytest.mark.parametrize("seq", [1, 35, 70])
def test_lstm_lm_flops_formula(seq):
    arch = architecture("lstm-lm", seq_len=seq)
    per_token = 2 * (2 * 4 * 1500 * (1500 + 1500)) + 2 * 1500 * 10000
    assert arch.flops == seq * per_token
    assert arch.layers[0].flops == 0  # the embedding lookup
    assert arch.parameters == PUBLISHED["lstm-lm"]


@pytest.mark.parametrize("bad", [0, -35, 35.0, "35", None])
def test_lstm_lm_bad_seq_len(bad):
    with pytest.raises(ValueError, match="seq_len") as err:
        architecture("lstm-lm", seq_len=bad)
    assert repr(bad) in str(err.value)


def test_lstm_profile_puts_each_layers_time_on_its_last_tensor():
    p = profile("lstm-lm", device="v100", batch=20, order="cpu", compute="roofline")
    assert p.names == tuple(n for n, _ in LSTM_TENSORS)
    nonzero = [n for n, f in zip(p.names, p.forward) if f > 0]
    assert nonzero == ["rnn.bias_hh_l0", "rnn.bias_hh_l1", "decoder.bias"]
    assert p.forward[4] == pytest.approx(p.forward[8], rel=1e-15)  # both layers 1500 -> 1500
    # On CUDA cuDNN runs both layers as one node: their time lands on its last tensor.
    gpu = profile("lstm-lm", device="v100", batch=20, compute="roofline")
    assert [n for n, f in zip(gpu.names, gpu.forward) if f > 0] == ["rnn.bias_hh_l1", "decoder.bias"]
    assert gpu.forward[8] == pytest.approx(p.forward[4] + p.forward[8], rel=1e-15)


def test_vit_profile_gives_bare_parameters_no_time():
    p = profile("vit-b16", device="h100", batch=8, compute="roofline")
    assert p.forward[p.index("class_token")] == 0
    assert p.forward[p.index("encoder.pos_embedding")] == 0
    assert p.forward[p.index("conv_proj.bias")] > 0
    assert p.forward[p.index("encoder.layers.encoder_layer_0.self_attention.in_proj_bias")] > 0


# ---------------------------------------------------------------------- against torch.nn
def test_lstm_lm_matches_torch_named_parameters():
    nn = pytest.importorskip("torch.nn")
    meta = {"device": "meta"}  # shapes only, no memory

    class RNNModel(nn.Module):  # examples/word_language_model/model.py, LSTM, untied
        def __init__(self, ntoken, ninp, nhid, nlayers):
            super().__init__()
            self.drop = nn.Dropout(0.65)
            self.encoder = nn.Embedding(ntoken, ninp, **meta)
            self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.65, **meta)
            self.decoder = nn.Linear(nhid, ntoken, **meta)

    model = RNNModel(10000, 1500, 1500, 2)
    expected = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert architecture("lstm-lm").tensors == expected


def test_vit_encoder_block_matches_torch_named_parameters():
    nn = pytest.importorskip("torch.nn")
    meta = {"device": "meta"}

    class EncoderBlock(nn.Module):  # torchvision.models.vision_transformer.EncoderBlock
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(768, eps=1e-6, **meta)
            self.self_attention = nn.MultiheadAttention(768, 12, batch_first=True, **meta)
            self.dropout = nn.Dropout(0.0)
            self.ln_2 = nn.LayerNorm(768, eps=1e-6, **meta)
            # torchvision's MLPBlock is an MLP: Linear, GELU, Dropout, Linear, Dropout.
            self.mlp = nn.Sequential(nn.Linear(768, 3072, **meta), nn.GELU(), nn.Dropout(0.0),
                                     nn.Linear(3072, 768, **meta), nn.Dropout(0.0))

    block = EncoderBlock()
    prefix = "encoder.layers.encoder_layer_7."
    expected = [(prefix + n, tuple(p.shape)) for n, p in block.named_parameters()]
    tensors = architecture("vit-b16").tensors
    start = [n for n, _ in tensors].index(prefix + "ln_1.weight")
    assert tensors[start:start + len(expected)] == expected
