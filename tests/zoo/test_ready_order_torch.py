"""The zoo's ready and registration orders against real autograd (torch on the CPU)."""

from __future__ import annotations

import pytest

from fusionopt.zoo import Architecture, batchnorm2d, conv2d, embedding, layernorm, linear, lstm_layer

torch = pytest.importorskip("torch")
nn = torch.nn


def hook_order(model, inputs) -> list[str]:
    """Parameter names in the order autograd accumulates their gradients."""
    names = {p: n for n, p in model.named_parameters()}
    order: list[str] = []
    handles = [p.register_post_accumulate_grad_hook(lambda p: order.append(names[p])) for p in model.parameters()]
    out = model(inputs)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    for h in handles:
        h.remove()
    return order


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=True)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.ln = nn.LayerNorm(5)

    def forward(self, x):
        return self.ln(self.fc(torch.relu(self.bn(self.conv(x))).flatten(1)))


class RecurrentNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Embedding(10, 8)
        self.rnn = nn.LSTM(8, 6, num_layers=2)
        self.decoder = nn.Linear(6, 10)

    def forward(self, tokens):
        return self.decoder(self.rnn(self.encoder(tokens))[0])


def test_convolution_norm_and_linear_layers_match_autograd():
    torch.manual_seed(0)
    model = ConvNet()
    arch = Architecture("convnet", (conv2d("conv", 3, 4, 3, 6, bias=True), batchnorm2d("bn", 4, 6),
                                    linear("fc", 144, 5), layernorm("ln", 5)), "", "")
    assert [n for n, _ in arch.tensors] == [n for n, _ in model.named_parameters()]
    assert hook_order(model, torch.randn(2, 3, 8, 8)) == arch.ready_order
    # Weight before bias for conv, batch norm and layer norm; bias first for linear.
    assert arch.ready_order == ["ln.weight", "ln.bias", "fc.bias", "fc.weight",
                                "bn.weight", "bn.bias", "conv.weight", "conv.bias"]


def test_lstm_layers_match_autograd():
    torch.manual_seed(0)
    model = RecurrentNet()
    arch = Architecture("rnn", (embedding("encoder", 10, 8), lstm_layer(0, 8, 6, 5), lstm_layer(1, 6, 6, 5),
                                linear("decoder", 6, 10)), "", "")
    assert [n for n, _ in arch.tensors] == [n for n, _ in model.named_parameters()]
    assert hook_order(model, torch.randint(0, 10, (5, 2))) == arch.ready_order
    assert arch.ready_order[2:6] == ["rnn.weight_ih_l1", "rnn.weight_hh_l1", "rnn.bias_hh_l1", "rnn.bias_ih_l1"]


def test_profile_model_keeps_the_hook_order_within_a_layer():
    from fusionopt.integrations import profile_model

    torch.manual_seed(0)
    profile = profile_model(ConvNet(), torch.randn(2, 3, 8, 8), steps=1, warmup=0)
    assert [profile.names[i] for i in profile.ready_order] == profile.metadata["ready_order"]
    assert profile.shapes[0] == (4, 3, 3, 3) and profile.dtypes[0] == "float32"
    assert [profile.names[i] for i in profile.registration_order] == [n for n, _ in ConvNet().named_parameters()]
