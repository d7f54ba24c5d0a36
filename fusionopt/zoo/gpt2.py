"""GPT-2 small (124M) in the layout of HuggingFace ``transformers.GPT2Model``.

``named_parameters()`` order: ``wte`` (token embeddings, 50257 x 768) and ``wpe``
(position embeddings, 1024 x 768); then for each of the 12 blocks ``h.{i}.ln_1``,
``attn.c_attn`` (fused query/key/value), ``attn.c_proj``, ``ln_2``, ``mlp.c_fc``,
``mlp.c_proj`` (12 tensors per block); then the final ``ln_f``. GPT-2's projections are
HuggingFace ``Conv1D`` modules, whose weight is stored **(in, out)**, the transpose of a
``Linear`` weight. The language-model head of ``GPT2LMHeadModel`` is tied to ``wte``
and so adds no parameters: the 124,439,808 parameters count the tied matrix once.

FLOPs (convention in :mod:`fusionopt.zoo.layers`) are for one sequence of ``seq_len``
tokens through ``GPT2Model``; the tied LM-head projection is **not** counted. The
attention matmuls ``Q K^T`` and ``softmax(.) V`` cost ``2 * seq_len^2 * hidden`` each
(the causal mask is not exploited, as dense kernels compute the full product) and are
attributed to ``attn.c_attn``, the projection that produces Q, K and V.
"""

from __future__ import annotations

from fusionopt.zoo.layers import Architecture, Layer, Shape, check_positive_int, embedding, layernorm

VOCAB_SIZE = 50257
MAX_POSITIONS = 1024
HIDDEN = 768
INTERMEDIATE = 4 * HIDDEN
NUM_LAYERS = 12
NUM_HEADS = 12  # does not change shapes or FLOPs; recorded for the description


def _conv1d(name: str, fan_in: int, fan_out: int, tokens: int, extra_flops: float = 0.0) -> Layer:
    """A HuggingFace ``Conv1D`` (a token-wise linear map with an (in, out) weight)."""
    tensors: tuple[tuple[str, Shape], ...] = ((f"{name}.weight", (fan_in, fan_out)), (f"{name}.bias", (fan_out,)))
    return Layer(name, tensors, 2.0 * fan_in * fan_out * tokens + extra_flops)


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
    seq_len = check_positive_int("seq_len", seq_len)
    if seq_len > MAX_POSITIONS:
        raise ValueError(
            f"seq_len must be at most {MAX_POSITIONS} (GPT-2's position embeddings), got {seq_len}"
        )
    layers = [embedding("wte", VOCAB_SIZE, HIDDEN), embedding("wpe", MAX_POSITIONS, HIDDEN)]
    attention_core = 2 * (2.0 * seq_len * seq_len * HIDDEN)  # Q K^T and softmax(.) V
    for i in range(NUM_LAYERS):
        p = f"h.{i}"
        layers += [
            layernorm(f"{p}.ln_1", HIDDEN, tokens=seq_len),
            _conv1d(f"{p}.attn.c_attn", HIDDEN, 3 * HIDDEN, seq_len, attention_core),
            _conv1d(f"{p}.attn.c_proj", HIDDEN, HIDDEN, seq_len),
            layernorm(f"{p}.ln_2", HIDDEN, tokens=seq_len),
            _conv1d(f"{p}.mlp.c_fc", HIDDEN, INTERMEDIATE, seq_len),
            _conv1d(f"{p}.mlp.c_proj", INTERMEDIATE, HIDDEN, seq_len),
        ]
    layers.append(layernorm("ln_f", HIDDEN, tokens=seq_len))
    return Architecture(
        name="gpt2",
        layers=tuple(layers),
        description=(
            f"GPT-2 small (124M), {NUM_LAYERS} layers, hidden {HIDDEN}, {NUM_HEADS} heads, "
            "tied LM head counted once (HuggingFace GPT2Model)"
        ),
        input_description=f"one sequence of {seq_len} tokens",
    )
