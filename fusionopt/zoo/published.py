"""Published training throughput of the A100, V100 and K80, which scales the H100 rule to them.

A device's calibrated profile is the H100 fp32 profile (:mod:`fusionopt.zoo.calibrated`) with
every time multiplied by one factor: the device's published time per step for the nearest
workload over the H100 rule's fp32 step of the same model at the same batch. The workload is
``cnn`` for the convolutional models (the figure is ResNet-50's) and ``transformer`` for
BERT, ViT, GPT-2 and the LSTM (the figure is BERT-large's, seq_len 128; all are matrix
products). The figures, one GPU each:

* **V100** (SXM2), fp32. ResNet-50 v1.5: 367 images/s at batch 112 (NVIDIA
  DeepLearningExamples, ``PyTorch/Classification/ConvNets/resnet50v1.5/README.md``, "Training
  performance: NVIDIA DGX-1 16GB (8x V100 16GB)", FP32, pytorch-21.03 container; the batch
  from ``configs.yml``, DGX1V FP32). A second source agrees: torchvision's ResNet-50 takes
  342.37 ms per 128 images in FP32 (374 images/s; sandeepkumar-skb/pytorch_experiments,
  ``torchvision_exp/README.md``). BERT-large: 40 sequences/s, 8 per step (65,536 per
  optimiser step in 8,192 accumulation steps; DeepLearningExamples,
  ``PyTorch/LanguageModeling/BERT/README.md``, July 2020 tables, "Pre-training NVIDIA DGX-1
  With 16G", FP32, phase 1, pytorch:20.06 container).
* **A100**, fp32. ResNet-50 v1.5: 938 images/s at batch 256 (the ResNet-50 README above,
  "Training performance: NVIDIA DGX A100 (8x A100 80GB)", TF32; torch's fp32 default also
  runs cuDNN convolutions in TF32). BERT-large: **derived**, 40 x 19.5 / 15.7 = 49.7
  sequences/s at 8 per step: the V100 figure times the ratio of the datasheets' FP32
  (non-tensor) peaks, A100 19.5 and V100 SXM2 15.7 TFLOP/s, since the published A100 figure
  (234 sequences/s) runs its matrix products in TF32 and torch's fp32 default does not.
* **A100**, bf16 (the published runs are fp16 autocast; the A100's fp16 and bf16 tensor-core
  rates are equal). ResNet-50 v1.5: 2,470 images/s at batch 256 (the ResNet-50 README, DGX
  A100 80GB, mixed precision, channels-last). BERT-large: 415 sequences/s, 64 per step (the
  BERT README, "Pre-training NVIDIA DGX A100 (8x A100 40GB)", mixed precision, phase 1).
* **K80** (one of the board's two GK210 GPUs), fp32. ResNet-50: 51.9 images/s at batch 64
  (TensorFlow's benchmarks, tensorflow/docs ``site/en/r1/guide/performance/benchmarks.md``,
  "Details for Google Compute Engine (NVIDIA Tesla K80)", synthetic data, 1 GPU,
  tf_cnn_benchmarks, May 2017). BERT-large: **derived**, 40 x 4.37 / 15.7 = 11.1
  sequences/s at 8 per step (the V100 figure times the FP32 peaks' ratio, 4.37 TFLOP/s for
  one GK210 at boost).

The V100 and K80 have no bfloat16: they have no bf16 figure. The published runs differ from
the H100's in framework version, data pipeline (real or synthetic data) and, for BERT, the
pre-training heads and the LAMB optimiser: the factor carries those differences too.

Examples
--------
>>> figure("v100", "resnet101", "fp32").throughput
367.0
>>> figure("v100", "bert-base", "bf16")
Traceback (most recent call last):
...
ValueError: no bf16 on 'v100': it has no bfloat16 tensor cores, so the zoo has no bf16 figure for it; ask for precision='fp32'
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from fusionopt.zoo.calibrated import FAMILY, step_time

__all__ = ["A100_FP32_PEAK", "FIGURES", "Figure", "K80_FP32_PEAK", "NO_BF16", "V100_FP32_PEAK", "WORKLOAD",
    "device_factor", "figure"]

# Workload of each model family: the published figure it takes.
WORKLOAD = {"cnn": "cnn", "encoder": "transformer", "decoder": "transformer", "rnn": "transformer"}

# FP32 (non-tensor) datasheet peaks that derive a figure not published as such, FLOP/s.
V100_FP32_PEAK = 15.7e12
A100_FP32_PEAK = 19.5e12
K80_FP32_PEAK = 4.37e12   # one GK210 at boost


@dataclass(frozen=True)
class Figure:
    """One published training throughput: ``model`` (the zoo's nearest model) at ``batch``
    samples per GPU and step, ``throughput`` samples per second on one GPU.

    ``source`` names the document and its table; ``derived`` says how a figure that was not
    published as such was derived ("" for a published one).
    """

    device: str
    workload: str
    precision: str
    model: str
    batch: int
    throughput: float
    source: str
    derived: str = ""

    @property
    def step(self) -> float:
        """Seconds per step: ``batch / throughput``."""
        return self.batch / self.throughput


_RESNET_README = "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md"
_BERT_README = "NVIDIA DeepLearningExamples, PyTorch/LanguageModeling/BERT/README.md (July 2020 tables)"
_V100_BERT = 40.0

FIGURES: dict[tuple[str, str, str], Figure] = {
    (fig.device, fig.workload, fig.precision): fig for fig in (
        Figure("v100", "cnn", "fp32", "resnet50", 112, 367.0,
               f"{_RESNET_README}: 'Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)', 1 GPU, FP32 "
               "(batch 112, configs.yml DGX1V FP32)"),
        Figure("v100", "transformer", "fp32", "bert-large", 8, _V100_BERT,
               f"{_BERT_README}: 'Pre-training NVIDIA DGX-1 With 16G', 1 GPU, FP32, sequence length 128 "
               "(65536 sequences in 8192 accumulation steps)"),
        Figure("a100", "cnn", "fp32", "resnet50", 256, 938.0,
               f"{_RESNET_README}: 'Training performance: NVIDIA DGX A100 (8x A100 80GB)', 1 GPU, TF32"),
        Figure("a100", "cnn", "bf16", "resnet50", 256, 2470.0,
               f"{_RESNET_README}: 'Training performance: NVIDIA DGX A100 (8x A100 80GB)', 1 GPU, "
               "mixed precision (fp16)"),
        Figure("a100", "transformer", "bf16", "bert-large", 64, 415.0,
               f"{_BERT_README}: 'Pre-training NVIDIA DGX A100 (8x A100 40GB)', 1 GPU, mixed precision "
               "(fp16), sequence length 128 (65536 sequences in 1024 accumulation steps)"),
        Figure("a100", "transformer", "fp32", "bert-large", 8, _V100_BERT * A100_FP32_PEAK / V100_FP32_PEAK,
               f"{_BERT_README}: the V100 FP32 figure",
               derived="the V100's 40 sequences/s x 19.5/15.7, the FP32 (non-tensor) datasheet peaks of the "
                       "A100 and the V100 SXM2; the published A100 figure runs its matrix products in TF32"),
        Figure("k80", "cnn", "fp32", "resnet50", 64, 51.9,
               "tensorflow/docs, site/en/r1/guide/performance/benchmarks.md: 'Details for Google Compute "
               "Engine (NVIDIA Tesla K80)', training synthetic data, 1 GPU, batch 64"),
        Figure("k80", "transformer", "fp32", "bert-large", 8, _V100_BERT * K80_FP32_PEAK / V100_FP32_PEAK,
               f"{_BERT_README}: the V100 FP32 figure",
               derived="the V100's 40 sequences/s x 4.37/15.7, the FP32 datasheet peaks of one GK210 of a "
                       "K80 at boost and of the V100 SXM2"),
    )
}

NO_BF16 = {"v100", "k80"}


def figure(device: str, model: str, precision: str) -> Figure:
    """The published figure that scales ``model``'s H100 profile to ``device`` (not
    ``"h100"``) in ``precision``.

    Raises
    ------
    ValueError
        For bf16 on a device without bfloat16, or a combination without a figure.
    """
    if precision == "bf16" and device in NO_BF16:
        raise ValueError(f"no bf16 on {device!r}: it has no bfloat16 tensor cores, so the zoo has no bf16 figure "
                         "for it; ask for precision='fp32'")
    workload = WORKLOAD[FAMILY[model]]
    key = (device, workload, precision)
    if key not in FIGURES:
        raise ValueError(f"no published {precision} {workload} throughput for {device!r}")
    return FIGURES[key]


def device_factor(device: str, model: str, precision: str) -> tuple[float, Figure]:
    """The factor that turns ``model``'s H100 fp32 profile into ``device``'s in
    ``precision``, and the figure it comes from: the figure's step over the H100 rule's
    fp32 step of the figure's model at its batch.

    >>> factor, fig = device_factor("v100", "resnet50", "fp32")
    >>> fig.step == 112 / 367.0, round(factor, 2)
    (True, 4.73)
    """
    fig = figure(device, model, precision)
    return fig.step / _h100_step(fig.model, fig.batch), fig


@lru_cache(maxsize=None)
def _h100_step(model: str, batch: int) -> float:
    return step_time(model, batch, "fp32")
