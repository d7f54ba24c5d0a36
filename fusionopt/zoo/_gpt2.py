"""GPT-2 small (124M) and medium (355M) in the layout of HuggingFace
``transformers.GPT2Model`` (checkpoints ``"gpt2"`` and ``"gpt2-medium"``).

``named_parameters()`` order: ``wte`` (token embeddings, 50257 x hidden) and ``wpe``
(position embeddings, 1024 x hidden); then for each of the 12 (small) or 24 (medium)
blocks ``h.{i}.ln_1``, ``attn.c_attn`` (fused query/key/value), ``attn.c_proj``,
``ln_2``, ``mlp.c_fc``, ``mlp.c_proj`` (12 tensors per block); then the final ``ln_f``.
The hidden size is 768 (small) or 1024 (medium), the MLP 4 x hidden. GPT-2's projections
are HuggingFace ``Conv1D`` modules, whose weight is stored **(in, out)**, the transpose of
a ``Linear`` weight. The language-model head of ``GPT2LMHeadModel`` is tied to ``wte``
and so adds no parameters: the 124,439,808 (small) and 354,823,168 (medium) parameters
count the tied matrix once.

FLOPs (convention in :mod:`fusionopt.zoo._layers`) are for one sequence of ``seq_len``
tokens through ``GPT2Model``; the tied LM-head projection is **not** counted. The
attention matmuls ``Q K^T`` and ``softmax(.) V`` cost ``2 * seq_len^2 * hidden`` each
(the causal mask is not exploited, as dense kernels compute the full product) and are
attributed to ``attn.c_attn``, the projection that produces Q, K and V.
"""

from __future__ import annotations

from fusionopt.zoo._layers import Architecture, Layer, Shape, check_positive_int, embedding, layernorm

VOCAB_SIZE = 50257
MAX_POSITIONS = 1024
HIDDEN = 768  # GPT-2 small
NUM_LAYERS = 12
NUM_HEADS = 12  # does not change shapes or FLOPs; recorded for the description
MEDIUM_HIDDEN = 1024  # GPT-2 medium
MEDIUM_NUM_LAYERS = 24
MEDIUM_NUM_HEADS = 16


def _conv1d(name: str, fan_in: int, fan_out: int, tokens: int, extra_flops: float = 0.0) -> Layer:
    """A HuggingFace ``Conv1D`` (a token-wise linear map with an (in, out) weight)."""
    tensors: tuple[tuple[str, Shape], ...] = ((f"{name}.weight", (fan_in, fan_out)), (f"{name}.bias", (fan_out,)))
    return Layer(name, tensors, 2.0 * fan_in * fan_out * tokens + extra_flops, kind="linear")


def gpt2(seq_len: int = 1024) -> Architecture:
    """GPT-2 small, 124M (HuggingFace ``GPT2Model``; the LM head is tied to ``wte``).

    Parameters
    ----------
    seq_len : int
        Tokens per sequence, 1 to 1024 (default 1024, GPT-2's context). Shapes do not
        depend on it; FLOPs do.

    Returns
    -------
    Architecture
        148 tensors (2 embedding, 12 per block, 2 final LayerNorm) and 124,439,808
        parameters; about 213 GFLOPs per 1024-token sequence.

    Examples
    --------
    >>> net = gpt2()
    >>> net.parameters, len(net.tensors)
    (124439808, 148)
    >>> net.tensors[4]
    ('h.0.attn.c_attn.weight', (768, 2304))
    >>> gpt2(seq_len=1025)
    Traceback (most recent call last):
    ...
    ValueError: seq_len must be at most 1024 (GPT-2's position embeddings), got 1025
    """
    return _gpt2("gpt2", "GPT-2 small (124M)", seq_len, HIDDEN, NUM_LAYERS, NUM_HEADS)


def gpt2_medium(seq_len: int = 1024) -> Architecture:
    """GPT-2 medium, 355M (HuggingFace ``GPT2Model``; the LM head is tied to ``wte``).

    Parameters
    ----------
    seq_len : int
        Tokens per sequence, 1 to 1024 (default 1024, GPT-2's context). Shapes do not
        depend on it; FLOPs do.

    Returns
    -------
    Architecture
        292 tensors (2 embedding, 12 per block for 24 blocks, 2 final LayerNorm) and
        354,823,168 parameters; about 722 GFLOPs per 1024-token sequence.

    Examples
    --------
    >>> net = gpt2_medium()
    >>> net.parameters, len(net.tensors)
    (354823168, 292)
    >>> net.tensors[4], net.tensors[-3]
    (('h.0.attn.c_attn.weight', (1024, 3072)), ('h.23.mlp.c_proj.bias', (1024,)))
    >>> gpt2_medium(seq_len=0)
    Traceback (most recent call last):
    ...
    ValueError: seq_len must be a positive integer, got 0
    """
    return _gpt2("gpt2-medium", "GPT-2 medium (355M)", seq_len, MEDIUM_HIDDEN, MEDIUM_NUM_LAYERS,
                 MEDIUM_NUM_HEADS)


def _gpt2(name: str, label: str, seq_len: int, hidden: int, num_layers: int, num_heads: int) -> Architecture:
    """A HuggingFace ``GPT2Model`` with GPT-2's vocabulary and context, MLP 4 x ``hidden``."""
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len > MAX_POSITIONS:
        raise ValueError(
            f"seq_len must be at most {MAX_POSITIONS} (GPT-2's position embeddings), got {seq_len}"
        )
    layers = [embedding("wte", VOCAB_SIZE, hidden), embedding("wpe", MAX_POSITIONS, hidden)]
    attention_core = 2 * (2.0 * seq_len * seq_len * hidden)  # Q K^T and softmax(.) V
    for i in range(num_layers):
        p = f"h.{i}"
        layers += [
            layernorm(f"{p}.ln_1", hidden, tokens=seq_len),
            _conv1d(f"{p}.attn.c_attn", hidden, 3 * hidden, seq_len, attention_core),
            _conv1d(f"{p}.attn.c_proj", hidden, hidden, seq_len),
            layernorm(f"{p}.ln_2", hidden, tokens=seq_len),
            _conv1d(f"{p}.mlp.c_fc", hidden, 4 * hidden, seq_len),
            _conv1d(f"{p}.mlp.c_proj", 4 * hidden, hidden, seq_len),
        ]
    layers.append(layernorm("ln_f", hidden, tokens=seq_len))
    return Architecture(
        name=name,
        layers=tuple(layers),
        description=(
            f"{label}, {num_layers} layers, hidden {hidden}, {num_heads} heads, "
            "tied LM head counted once (HuggingFace GPT2Model)"
        ),
        input_description=f"one sequence of {seq_len} tokens",
    )
