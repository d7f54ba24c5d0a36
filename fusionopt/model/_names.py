"""Which module and which block own a tensor, read from its qualified name.

A profile's tensors carry the parameter names PyTorch gives them (``named_parameters``:
``"h.3.mlp.c_fc.weight"``). The frameworks wrap and bucket by module, and transformer
blocks are the elements of a ``ModuleList`` or ``Sequential``: the rules here are the ones
every sharded method and the FSDP2 recorder use.
"""

from __future__ import annotations

import re

# An element of a ``Sequential`` built from named children, ``<stem>_<index>`` under a
# collection (torchvision's ViT: ``encoder.layers.encoder_layer_3``).
_NAMED_ELEMENT = re.compile(r"^[A-Za-z][A-Za-z_]*_\d+$")


def module_of(name: str) -> str:
    """The module that owns the tensor called ``name``: the name without its last part
    (``"h.0.attn.c_attn"`` for ``"h.0.attn.c_attn.weight"``; ``""`` for a top-level one).

    >>> module_of("h.0.attn.c_attn.weight"), module_of("wte.weight"), module_of("scale")
    ('h.0.attn.c_attn', 'wte', '')
    """
    return name.rpartition(".")[0]


def block_of(name: str) -> str | None:
    """The block that holds the tensor called ``name``: its name up to the first part that is
    a whole number, the index of a ``ModuleList`` or ``Sequential`` element (``"h.3"``,
    ``"encoder.layer.3"``, ``"layer2.1"``), or a named element ``<stem>_<index>`` of a
    collection whose name ends in ``s`` (torchvision's ViT builds ``encoder.layers`` as a
    ``Sequential`` of ``encoder_layer_0 ...``); None for a tensor outside every such block
    (an embedding, a final norm, a head), which FSDP's root owns.

    >>> block_of("h.3.mlp.c_fc.weight"), block_of("encoder.layer.11.output.dense.bias"), block_of("ln_f.weight")
    ('h.3', 'encoder.layer.11', None)
    >>> block_of("encoder.layers.encoder_layer_10.mlp.0.weight"), block_of("h.2.ln_1.weight")
    ('encoder.layers.encoder_layer_10', 'h.2')
    """
    parts = name.split(".")
    for k, part in enumerate(parts[:-1]):
        if part.isdigit() or (k > 0 and parts[k - 1].endswith("s") and _NAMED_ELEMENT.match(part)):
            return ".".join(parts[:k + 1])
    return None


__all__ = ["module_of", "block_of"]
