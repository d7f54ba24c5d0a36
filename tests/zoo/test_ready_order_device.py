"""The zoo's ready order is for a named device: cuDNN's LSTM on CUDA, autograd's on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from fusionopt import zoo
from fusionopt.zoo import CUDNN_READY


def _ready_names(profile):
    return [profile.names[i] for i in profile.ready_order]


def test_the_cuda_order_of_lstm_lm_is_the_order_an_h100_measured():
    measured = zoo.measured_profile("lstm-lm", hardware="h100", batch=32)
    estimate = zoo.profile("lstm-lm", device="h100", batch=32)
    assert estimate.metadata["ready_order_for"] == "cuda"
    assert _ready_names(estimate) == measured.metadata["ready_order"] == _ready_names(measured)
    # One backward node: the eight LSTM gradients are ready at one time, as measured.
    rnn = [i for i, name in enumerate(estimate.names) if name.startswith("rnn.")]
    assert len(rnn) == 8
    assert np.unique(estimate.ready_times[rnn]).size == 1 == np.unique(measured.ready_times[rnn]).size


def test_the_cpu_order_keeps_the_layers_apart_and_only_the_order_differs():
    cpu, cuda = zoo.profile("lstm-lm", order="cpu"), zoo.profile("lstm-lm", order="cuda")
    assert cpu.metadata["ready_order_for"] == "cpu"
    assert cpu.names == cuda.names and cpu.sizes.tolist() == cuda.sizes.tolist()
    assert cpu.B == pytest.approx(cuda.B, rel=1e-12) and cpu.F == pytest.approx(cuda.F, rel=1e-12)
    # On the CPU layer 1's four gradients are ready before layer 0's (torch's native LSTM).
    assert _ready_names(cpu)[2:10] == ["rnn.weight_ih_l1", "rnn.weight_hh_l1", "rnn.bias_hh_l1", "rnn.bias_ih_l1",
                                       "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_hh_l0", "rnn.bias_ih_l0"]
    l0 = cpu.names.index("rnn.weight_ih_l0")
    l1 = cpu.names.index("rnn.weight_ih_l1")
    assert cpu.ready_times[l1] < cpu.ready_times[l0]
    assert sorted(CUDNN_READY) == list(range(8))


@pytest.mark.parametrize("name", ["resnet50", "bert-base", "vgg16"])
def test_models_without_a_device_dependent_layer_have_one_order(name):
    assert list(zoo.profile(name, order="cpu").ready_order) == list(zoo.profile(name, order="cuda").ready_order)


def test_an_unknown_order_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"unknown order 'tpu': choose one of cpu, cuda"):
        zoo.profile("lstm-lm", order="tpu")
