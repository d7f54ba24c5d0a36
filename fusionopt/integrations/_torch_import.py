"""PyTorch, imported on demand: every integration that needs it asks here."""

from __future__ import annotations

from typing import Any

TORCH_EXTRA = "pip install 'fusionopt[torch]'"
TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
"""The dtype names of the model's encodings, as torch's dtypes."""


def require_torch() -> Any:
    """Import and return ``torch`` (2.1 or later), or raise ``ImportError`` naming the extra."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"measuring a PyTorch model needs PyTorch: {TORCH_EXTRA}") from None
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        raise ImportError(f"measuring a PyTorch model needs torch >= 2.1, found {torch.__version__}: {TORCH_EXTRA}")
    return torch
