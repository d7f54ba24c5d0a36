"""ViT-B/16 in the layout of ``torchvision.models.vit_b_16`` (12 layers, hidden 768,
12 heads, MLP 3072, 16 x 16 patches, a class token, no pre-logits layer).

Tensor order is forward order (MODEL.md section 1), which is ``named_parameters()`` order
but for one tensor: the model's own ``class_token`` (1 x 1 x 768) is registered first, yet
the forward runs ``conv_proj`` (the 16 x 16 stride-16 patch embedding, with bias) before it
prepends the class token to the patches, so ``conv_proj`` comes first, then ``class_token``,
then the encoder's own ``encoder.pos_embedding`` (1 x (patches + 1) x 768); then for each encoder layer
``encoder.layers.encoder_layer_{i}``: ``ln_1``, ``self_attention.in_proj_weight`` and
``in_proj_bias`` (the fused query/key/value projection of ``nn.MultiheadAttention``,
(3 x 768) x 768), ``self_attention.out_proj``, ``ln_2``, ``mlp.0`` (768 -> 3072) and
``mlp.3`` (3072 -> 768) (12 tensors per layer); then ``encoder.ln`` and ``heads.head``.

FLOPs (convention in :mod:`fusionopt.zoo._layers`) are for one image, i.e. one sequence of
``patches + 1`` tokens (197 at 224 x 224). Token-wise Linear layers cost ``2 * in * out``
per token. The attention matmuls ``Q K^T`` and ``softmax(.) V`` cost
``2 * tokens^2 * hidden`` each and are attributed to ``self_attention`` (the layer that
owns ``in_proj_weight``, which produces Q, K and V), as for GPT-2's ``attn.c_attn``.
The class token and position embedding (a concatenation and an addition) cost 0, GELU
and softmax are not counted, and ``heads.head`` runs on the class token only.
"""

from __future__ import annotations

from fusionopt.zoo._layers import (
    Architecture,
    Layer,
    Shape,
    check_positive_int,
    conv2d,
    layernorm,
    linear,
    out_size,
)

PATCH = 16
HIDDEN = 768
MLP_DIM = 3072
NUM_LAYERS = 12
NUM_HEADS = 12  # does not change shapes or FLOPs; recorded for the description


def _parameter(name: str, shape: Shape) -> Layer:
    """A bare ``nn.Parameter`` (``class_token``, ``encoder.pos_embedding``): its own layer, 0 FLOPs."""
    return Layer(name, ((name, shape),), 0.0, kind="embedding")


def _encoder_block(prefix: str, tokens: int) -> list[Layer]:
    """One torchvision ``EncoderBlock``: pre-norm self-attention, pre-norm MLP."""
    attention = f"{prefix}.self_attention"
    in_proj: tuple[tuple[str, Shape], ...] = (
        (f"{attention}.in_proj_weight", (3 * HIDDEN, HIDDEN)),
        (f"{attention}.in_proj_bias", (3 * HIDDEN,)),
    )
    qkv_flops = 2.0 * HIDDEN * 3 * HIDDEN * tokens
    attention_core = 2 * (2.0 * tokens * tokens * HIDDEN)  # Q K^T and softmax(.) V
    return [
        layernorm(f"{prefix}.ln_1", HIDDEN, tokens=tokens),
        Layer(attention, in_proj, qkv_flops + attention_core, kind="linear"),
        linear(f"{attention}.out_proj", HIDDEN, HIDDEN, tokens=tokens),
        layernorm(f"{prefix}.ln_2", HIDDEN, tokens=tokens),
        linear(f"{prefix}.mlp.0", HIDDEN, MLP_DIM, tokens=tokens),
        linear(f"{prefix}.mlp.3", MLP_DIM, HIDDEN, tokens=tokens),
    ]


def vit_b16(image_size: int = 224, num_classes: int = 1000) -> Architecture:
    """ViT-B/16 (torchvision ``vit_b_16`` layout) for square RGB images.

    Parameters
    ----------
    image_size : int
        Side of the input image in pixels, a positive multiple of 16 (default 224).
        It sets the number of tokens, ``(image_size / 16)^2 + 1``, and so the shape of
        ``encoder.pos_embedding``, as in torchvision.
    num_classes : int
        Outputs of ``heads.head`` (default 1000).

    Returns
    -------
    Architecture
        152 tensors (``conv_proj`` x 2, ``class_token``, ``encoder.pos_embedding``, 12 per
        encoder layer, ``encoder.ln`` x 2, ``heads.head`` x 2) and 86,567,656 parameters
        at 224 x 224 with 1000 classes; about 35.2 GFLOPs per 224 x 224 image.

    Raises
    ------
    ValueError
        If ``image_size`` is not a positive multiple of 16, or ``num_classes`` is not a
        positive integer.

    Examples
    --------
    >>> net = vit_b16()
    >>> net.parameters, len(net.tensors)
    (86567656, 152)
    >>> net.tensors[:4]  # doctest: +NORMALIZE_WHITESPACE
    [('conv_proj.weight', (768, 3, 16, 16)), ('conv_proj.bias', (768,)),
     ('class_token', (1, 1, 768)), ('encoder.pos_embedding', (1, 197, 768))]
    >>> net.tensors[6]
    ('encoder.layers.encoder_layer_0.self_attention.in_proj_weight', (2304, 768))
    >>> vit_b16(image_size=200)
    Traceback (most recent call last):
    ...
    ValueError: image_size must be a multiple of the patch size 16, got 200
    """
    image_size = check_positive_int("image_size", image_size)
    num_classes = check_positive_int("num_classes", num_classes)
    if image_size % PATCH:
        raise ValueError(f"image_size must be a multiple of the patch size {PATCH}, got {image_size}")
    side = out_size(image_size, PATCH, PATCH)
    tokens = side * side + 1  # patches and the class token
    layers = [
        conv2d("conv_proj", 3, HIDDEN, PATCH, side, bias=True),  # the patch embedding
        _parameter("class_token", (1, 1, HIDDEN)),              # prepended to its output
        _parameter("encoder.pos_embedding", (1, tokens, HIDDEN)),
    ]
    for i in range(NUM_LAYERS):
        layers += _encoder_block(f"encoder.layers.encoder_layer_{i}", tokens)
    layers.append(layernorm("encoder.ln", HIDDEN, tokens=tokens))
    layers.append(linear("heads.head", HIDDEN, num_classes))  # the class token only
    return Architecture(
        name="vit-b16",
        layers=tuple(layers),
        description=(
            f"ViT-B/16, {NUM_LAYERS} layers, hidden {HIDDEN}, {NUM_HEADS} heads, "
            "class token (torchvision.models.vit_b_16)"
        ),
        input_description=f"one 3 x {image_size} x {image_size} image ({tokens} tokens), {num_classes} classes",
        registration=("class_token",) + tuple(t for layer in layers for t, _ in layer.tensors if t != "class_token"),
    )
