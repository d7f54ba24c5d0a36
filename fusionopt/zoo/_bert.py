"""BERT-base and BERT-large uncased in the layout of HuggingFace
``transformers.BertModel`` (with pooler).

Tensor order is forward order (MODEL.md section 1): the three embedding tables as
``BertEmbeddings.forward`` uses them (word, then token type, then position: the position
table is registered before the token-type table but used after it) and the embedding
LayerNorm;
then for each of the 12 (base) or 24 (large) encoder layers ``attention.self.{query,key,value}``,
``attention.output.dense``, ``attention.output.LayerNorm``, ``intermediate.dense``,
``output.dense``, ``output.LayerNorm``; then ``pooler.dense``. Every Linear and LayerNorm
has a weight and a bias (16 tensors per encoder layer).

FLOPs (convention in :mod:`fusionopt.zoo._layers`) are for one sequence of ``seq_len``
tokens. Token-wise Linear layers cost ``2 * in * out`` per token. The attention matmuls
``Q K^T`` and ``softmax(.) V`` cost ``2 * seq_len^2 * hidden`` each (summed over the
heads) and are **attributed to the** ``attention.self.value`` **layer**: it is the last
parameter layer before them in forward order and the first after them in backward order,
so the attention core's backward time lands just before the value/key/query gradients
become ready. Softmax, scaling, masking and GELU are not counted. The embedding lookups
cost 0; the pooler runs on the first (``[CLS]``) token only.
"""

from __future__ import annotations

from fusionopt.zoo._layers import Architecture, Layer, check_positive_int, embedding, layernorm, linear

VOCAB_SIZE = 30522  # bert-base-uncased WordPiece vocabulary
MAX_POSITIONS = 512
TYPE_VOCAB_SIZE = 2
HIDDEN = 768  # BERT-base
INTERMEDIATE = 3072
NUM_LAYERS = 12
NUM_HEADS = 12  # does not change shapes or FLOPs; recorded for the description
LARGE_HIDDEN = 1024  # BERT-large
LARGE_INTERMEDIATE = 4096
LARGE_NUM_LAYERS = 24
LARGE_NUM_HEADS = 16


def _encoder_layer(prefix: str, seq_len: int, hidden: int = HIDDEN,
                   intermediate: int = INTERMEDIATE) -> list[Layer]:
    """One ``BertLayer``: self-attention, its output projection, the feed-forward block."""
    value = linear(f"{prefix}.attention.self.value", hidden, hidden, tokens=seq_len)
    attention_core = 2 * (2.0 * seq_len * seq_len * hidden)  # Q K^T and softmax(.) V
    value = Layer(value.name, value.tensors, value.flops + attention_core, kind="linear")
    return [
        linear(f"{prefix}.attention.self.query", hidden, hidden, tokens=seq_len),
        linear(f"{prefix}.attention.self.key", hidden, hidden, tokens=seq_len),
        value,
        linear(f"{prefix}.attention.output.dense", hidden, hidden, tokens=seq_len),
        layernorm(f"{prefix}.attention.output.LayerNorm", hidden, tokens=seq_len),
        linear(f"{prefix}.intermediate.dense", hidden, intermediate, tokens=seq_len),
        linear(f"{prefix}.output.dense", intermediate, hidden, tokens=seq_len),
        layernorm(f"{prefix}.output.LayerNorm", hidden, tokens=seq_len),
    ]


def bert_base(seq_len: int = 128) -> Architecture:
    """BERT-base uncased (HuggingFace ``BertModel`` with pooler).

    Parameters
    ----------
    seq_len : int
        Tokens per sequence, 1 to 512 (default 128). Shapes do not depend on it; FLOPs do.

    Returns
    -------
    Architecture
        199 tensors (5 embedding, 16 per encoder layer, 2 pooler) and 109,482,240
        parameters; about 22.4 GFLOPs per 128-token sequence.

    Examples
    --------
    >>> net = bert_base()
    >>> net.parameters, len(net.tensors)
    (109482240, 199)
    >>> net.tensors[5]
    ('encoder.layer.0.attention.self.query.weight', (768, 768))
    >>> bert_base(seq_len=513)
    Traceback (most recent call last):
    ...
    ValueError: seq_len must be at most 512 (BERT's position embeddings), got 513
    """
    return _bert("bert-base", "BERT-base", seq_len, HIDDEN, INTERMEDIATE, NUM_LAYERS, NUM_HEADS)


def bert_large(seq_len: int = 128) -> Architecture:
    """BERT-large uncased (HuggingFace ``BertModel`` with pooler): 24 layers, hidden 1024.

    Parameters
    ----------
    seq_len : int
        Tokens per sequence, 1 to 512 (default 128). Shapes do not depend on it; FLOPs do.

    Returns
    -------
    Architecture
        391 tensors (5 embedding, 16 per encoder layer, 2 pooler) and 335,141,888
        parameters (``BertModel`` with pooler, as ``from_pretrained("bert-large-uncased")``
        builds it; without the pooler 334,092,288); about 79 GFLOPs per 128-token sequence.

    Examples
    --------
    >>> net = bert_large()
    >>> net.parameters, len(net.tensors)
    (335141888, 391)
    >>> net.tensors[5]
    ('encoder.layer.0.attention.self.query.weight', (1024, 1024))
    """
    return _bert("bert-large", "BERT-large", seq_len, LARGE_HIDDEN, LARGE_INTERMEDIATE,
                 LARGE_NUM_LAYERS, LARGE_NUM_HEADS)


def _bert(name: str, label: str, seq_len: int, hidden: int, intermediate: int, num_layers: int,
          num_heads: int) -> Architecture:
    """A HuggingFace ``BertModel`` with pooler and the bert-uncased vocabulary."""
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len > MAX_POSITIONS:
        raise ValueError(
            f"seq_len must be at most {MAX_POSITIONS} (BERT's position embeddings), got {seq_len}"
        )
    layers = [
        embedding("embeddings.word_embeddings", VOCAB_SIZE, hidden),
        embedding("embeddings.token_type_embeddings", TYPE_VOCAB_SIZE, hidden),   # used before
        embedding("embeddings.position_embeddings", MAX_POSITIONS, hidden),       # the positions
        layernorm("embeddings.LayerNorm", hidden, tokens=seq_len),
    ]
    for i in range(num_layers):
        layers += _encoder_layer(f"encoder.layer.{i}", seq_len, hidden, intermediate)
    layers.append(linear("pooler.dense", hidden, hidden, tokens=1))  # [CLS] token only
    return Architecture(
        name=name,
        layers=tuple(layers),
        description=(
            f"{label} uncased, {num_layers} layers, hidden {hidden}, {num_heads} heads, "
            "with pooler (HuggingFace BertModel)"
        ),
        input_description=f"one sequence of {seq_len} tokens",
        registration=_registration(layers),
    )


def _registration(layers: list[Layer]) -> tuple[str, ...]:
    # BertEmbeddings registers the position table before the token-type table.
    names = [t for layer in layers for t, _ in layer.tensors]
    token_type = names.index("embeddings.token_type_embeddings.weight")
    position = names.index("embeddings.position_embeddings.weight")
    names[token_type], names[position] = names[position], names[token_type]
    return tuple(names)
