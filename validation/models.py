"""The zoo's models built by the libraries they come from, for the validations that run
them: the LSTM language model from ``torch.nn`` alone, the CNNs and ViT from torchvision,
BERT and GPT-2 from transformers configurations (no download)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

# zoo name -> torchvision builder name (weights not needed: shapes and times only)
TORCHVISION = {
    "resnet18": "resnet18", "resnet50": "resnet50", "resnet101": "resnet101", "resnet152": "resnet152",
    "vgg16": "vgg16", "vgg19": "vgg19", "alexnet": "alexnet", "densenet121": "densenet121",
    "densenet201": "densenet201", "mobilenet-v2": "mobilenet_v2", "vit-b16": "vit_b_16",
    "inception-v3": "inception_v3", "googlenet": "googlenet",
}
# The zoo's GoogLeNet has no aux heads; Inception-v3 keeps its aux head, as the zoo does.
OPTIONS = {"googlenet": {"aux_logits": False, "init_weights": False}, "inception-v3": {"init_weights": False}}
# zoo name -> (transformers model class, config class, config, tokens per sequence) of the
# zoo's layout, built from the config (no download; the default configs are BERT-base and
# GPT-2 small); sequences as long as the zoo's default ``seq_len``, so the estimates compare.
HUGGINGFACE = {
    "bert-base": ("BertModel", "BertConfig", {}, 128),
    "bert-large": ("BertModel", "BertConfig",
                   {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "intermediate_size": 4096}, 128),
    "gpt2": ("GPT2Model", "GPT2Config", {}, 1024),
    "gpt2-medium": ("GPT2Model", "GPT2Config", {"n_embd": 1024, "n_layer": 24, "n_head": 16}, 1024),
}
DEFAULT_MODELS = "resnet50,vgg16,densenet121,mobilenet-v2,vit-b16,lstm-lm"


def zoo_names(text: str) -> list[str]:
    """The comma-separated zoo models of ``--models``; a ``ValueError`` naming any not in the zoo."""
    from fusionopt import zoo

    names = text.split(",")
    unknown = [m for m in names if m not in zoo.models()]
    if unknown:
        raise ValueError(f"--models: not in the zoo: {', '.join(unknown)} (see fusionopt zoo)")
    return names


def lstm_language_model(torch: Any) -> Any:
    """PyTorch's word-language-model ``RNNModel('LSTM', 10000, 1500, 1500, 2)``, zoo names."""
    from fusionopt import zoo
    shapes = dict(tensor for layer in zoo.architecture("lstm-lm").layers for tensor in layer.tensors)
    ntoken, ninp = shapes["encoder.weight"]
    nhid = shapes["rnn.weight_hh_l0"][1]
    nlayers = sum(name.startswith("rnn.weight_ih_l") for name in shapes)

    class RNNModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.Embedding(ntoken, ninp)
            self.rnn = torch.nn.LSTM(ninp, nhid, nlayers)
            self.decoder = torch.nn.Linear(nhid, ntoken)

        def forward(self, tokens: Any) -> Any:
            output, _ = self.rnn(self.encoder(tokens))
            return self.decoder(output)

    return RNNModel()


def builder(name: str, torch: Any) -> tuple[Callable[[], Any], Callable[[int, Any], Any]] | None:
    """(model factory, input factory for a batch on a device), or None where it cannot be built."""
    if name == "lstm-lm":
        return (lambda: lstm_language_model(torch),
                lambda batch, device: torch.randint(0, 10000, (35, batch), device=device))
    if name in TORCHVISION:
        try:
            import torchvision
        except (ImportError, RuntimeError):      # missing, or built for another torch
            return None
        factory = getattr(torchvision.models, TORCHVISION[name])
        side = 299 if name == "inception-v3" else 224
        options = OPTIONS.get(name, {})
        return (lambda: factory(weights=None, **options),
                lambda batch, device: torch.randn(batch, 3, side, side, device=device))
    if name in HUGGINGFACE:
        try:
            import transformers
        except ImportError:
            return None
        model_class, config_class, config, seq_len = HUGGINGFACE[name]
        made = getattr(transformers, config_class)(**config)
        return (lambda: getattr(transformers, model_class)(made),
                lambda batch, device: {"input_ids": torch.randint(0, made.vocab_size, (batch, seq_len),
                                                                  device=device)})
    return None


def loss_of(output: Any) -> Any:
    """Sum of the logits (Inception-v3 in training mode returns its aux logits as well)."""
    if hasattr(output, "last_hidden_state"):      # transformers: every hidden state, pooled too
        total = output.last_hidden_state.sum()
        pooled = getattr(output, "pooler_output", None)
        return total if pooled is None else total + pooled.sum()
    if hasattr(output, "logits"):
        total = output.logits.sum()
        aux = getattr(output, "aux_logits", None)
        return total if aux is None else total + aux.sum()
    return output.sum()


def buildable(names: list[str], torch: Any, progress: Any, skipped: list[str]) -> Iterator[tuple[str, Callable, Callable]]:
    """``(name, build, inputs)`` for each model of ``names`` that builds here, the torch seed set
    to 0 before each; a model whose library is missing is added to ``skipped``, with a progress
    step saying so."""
    for name in names:
        made = builder(name, torch)
        if made is None:
            skipped.append(name)
            progress.step(f"{name}: cannot be built here (needs torchvision or transformers), skipped")
            continue
        torch.manual_seed(0)
        yield name, made[0], made[1]
