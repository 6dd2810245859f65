"""PyTorch's default initialisation, which the paper's reference code trains from.

The reference builds torchvision ResNets, then resets every Conv2d and Linear to PyTorch's defaults
(``reset_parameters``: kaiming_uniform with a = √5, i.e. U(±1/√fan_in), and for Linear biases the same
bound); BN keeps γ = 1, β = 0 (γ = 0 on each block's last BN, ``zero_init_residual=True``). Keras' own
defaults differ (glorot_uniform kernels, zero biases), hence these.
"""

from __future__ import annotations

import math

import keras


def torch_default_kernel() -> keras.initializers.Initializer:
    """U(±1/√fan_in) for conv (fan_in = k·k·C_in) and dense kernels: PyTorch's kaiming_uniform(a=√5)."""
    # VarianceScaling's uniform bound is √(3·scale/fan_in); scale 1/3 gives 1/√fan_in.
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


@keras.saving.register_keras_serializable(package="augself_tf")
class Linear(keras.layers.Dense):
    """``keras.layers.Dense`` initialised as ``torch.nn.Linear``: kernel and bias U(±1/√fan_in)."""

    def __init__(self, units: int, **kwargs) -> None:
        kwargs.setdefault("kernel_initializer", torch_default_kernel())
        super().__init__(units, **kwargs)

    def build(self, input_shape) -> None:
        # The bias bound needs fan_in, known only here.
        bound = 1.0 / math.sqrt(max(1, int(input_shape[-1])))
        self.bias_initializer = keras.initializers.RandomUniform(-bound, bound)
        super().build(input_shape)
