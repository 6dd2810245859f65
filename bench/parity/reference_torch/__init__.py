"""The paper's training step in PyTorch, written from the semantics of its reference code (hankook/AugSelf).

What each piece transcribes (file:line of hankook/AugSelf at its last commit):
  - ``ResNet``: torchvision's ``resnet18(zero_init_residual=True)`` with ``fc = Identity`` (``models.py:22-31``):
    conv1 7×7/2 pad 3, BN, ReLU, max-pool 3/2 pad 1, four stages of two BasicBlocks (stride 2 on the first
    conv of stages 2-4 and on the 1×1 downsample), global average pooling. ``stem="cifar"`` is the reference's
    ``cifar_`` variant: conv1 3×3/1 pad 1, no max-pool. ``width`` scales every stage's channels as our
    ``build_backbone`` does (64·width at the stem), so that a CPU can run it.
  - ``load_mlp``: ``models.py:34-47`` (Linear without bias before every BN; a bias on the last Linear only
    when no BN follows it).
  - ``augself_loss``: ``SSObjective.__call__`` (``trainers.py:26-49``) with both orders stacked and
    ``F.mse_loss(tanh(p), d)`` for crop and colour.
  - ``augself_targets``: ``extract_diff`` (``transforms.py:137-147``) and ``_extract_w`` for colour
    (``transforms.py:111-119``), recomputed in NumPy from our ω after converting it to the reference's ω.
  - ``SimSiam``, ``MoCo``, ``BYOL``: ``trainers.simsiam / moco / byol`` and their optimizers in
    ``pretrain.py`` (SimSiam's predictor in a second, unscheduled SGD: a constant lr). Two deliberate
    departures, both DESIGN.md §4 defects the project does not copy: MoCo enqueues the momentum KEYS (the
    reference enqueues the online queries ``z1``), and BYOL's τ follows our per-step cosine schedule (the
    reference's is per epoch), which the caller passes in.

The numerics are PyTorch's own: ``nn.BatchNorm{1,2}d`` in training mode (batch statistics, running variance
updated with the UNBIASED batch variance, momentum 0.1, eps 1e-5), ``torch.optim.SGD(momentum=0.9,
weight_decay=wd)`` (coupled L2; the momentum buffer in gradient units: b ← μ·b + g + wd·w, w ← w − lr·b).

``BUGS`` lists deliberate one-line bugs, each guarded by ``if self.bug(...)`` at the one place it changes,
so that the harness can show it catches each (``parity.py --inject``).

The package: ``bugs.py`` (the bug list), ``layers.py`` (BN, ResNet, ``load_mlp``), ``kinks.py`` (near-kink
ReLU units), ``augself.py`` (targets and loss), ``optimizer.py`` (SGD and the schedules), ``methods.py``
(SimSiam, MoCo, BYOL). The harness reads it through the names below.
"""

from bench.parity.reference_torch.augself import augself_loss, augself_targets, extract_diff, reference_omega
from bench.parity.reference_torch.bugs import BUGS, Bugs
from bench.parity.reference_torch.kinks import KinkReLU, Kinks, name_relus
from bench.parity.reference_torch.layers import BasicBlock, ResNet, load_mlp, set_bugs
from bench.parity.reference_torch.methods import BYOL, STL10_MEAN, STL10_STD, MoCo, ReferenceMethod, SimSiam, normalise
from bench.parity.reference_torch.optimizer import SGD, cosine_lr, cosine_tau

__all__ = [
    "BUGS", "BYOL", "SGD", "STL10_MEAN", "STL10_STD", "BasicBlock", "Bugs", "KinkReLU", "Kinks", "MoCo",
    "ReferenceMethod", "ResNet", "SimSiam", "augself_loss", "augself_targets", "cosine_lr", "cosine_tau",
    "extract_diff", "load_mlp", "name_relus", "normalise", "reference_omega", "set_bugs",
]
