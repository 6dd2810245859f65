"""``colorinfo``: colour information in frozen features, the InfoNCE bound I_NCE(C; z) (paper Figure 1a).

The paper (Section 3, Figure 1a) measures how much colour information a representation z = f(x) keeps
by the InfoNCE lower bound on the mutual information between z and the RGB colour histogram C(x)
(van den Oord et al., 2018):

    I(C; z) >= I_NCE = log N - L_NCE,
    L_NCE = -1/N Σ_i log( exp(s(c_i, z_i)) / Σ_j exp(s(c_i, z_j)) ),

over batches of N pairs, with a learned critic s(c, z) = cos(g(c), h(z)) / τ: g and h are small MLPs
(in -> hidden -> ReLU -> dim) and τ = 0.1 bounds the scores, which keeps a critic that overfits the
train pairs from producing wildly negative test estimates. The critic is trained with Adam on the
*train* split's pairs for a fixed number of steps (batches of N drawn at random), then the bound is
estimated on the *test* split's pairs: random batches of N, log N - L_NCE per batch. Everything is
repeated over several critic seeds; the reported value is the mean over (seed, batch) estimates with a
95% normal interval (1.96·sd/√count). Since L_NCE >= 0 the estimate can never exceed log N (the bound
saturates at log N: compare models at the same N). On small data a critic overfits its train pairs and
the test estimate of features without colour information goes below 0 (I(C; z) itself is >= 0): compare
models under the same options, as the paper compares colour strengths.

C(x): the joint RGB histogram of the centre-cropped eval image the model sees (``bins`` per channel,
bins³ cells, normalised to sum 1). The paper does not give the bin count or the critic's sizes; ours
(4×4×4 bins, 2-layer MLPs of 128 hidden units, 64-d embedding, N = 128, 300 steps, lr 1e-3) are choices
of this implementation. The critic reads √C (Hellinger embedding of the histogram) and z, each centred
with the train split's mean and scaled by one train-split standard deviation for all dimensions.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import tensorflow as tf

from augself_tf.evaluation.context import EvalContext
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.estimators.infonce import CriticOptions, infonce_bound
from augself_tf.evaluation.loading import LoadedModel
from augself_tf.evaluation.protocols.protocol import Protocol, Records
from augself_tf.evaluation.report import make_record
from augself_tf.flag_fields import option


@dataclasses.dataclass
class ColorInfoOptions:
    """Knobs of the colour-information estimate (the flagged ones are eval_main's ``--colorinfo_*``).

    Attributes:
      bins: histogram bins per RGB channel (bins³ cells).
      batch, steps, hidden, dim, lr, temperature, seeds, eval_batches: the critic's
        (:class:`~augself_tf.evaluation.estimators.infonce.CriticOptions`).
    """

    bins: int = option(4, "Colour histogram bins per RGB channel (bins^3 cells).")
    batch: int = option(128, "N of the InfoNCE bound (the bound is at most log N).")
    steps: int = option(300, "Adam steps of the InfoNCE critic.")
    hidden: int = 128
    dim: int = 64
    lr: float = 1e-3
    temperature: float = 0.1
    seeds: int = option(3, "Independent critic trainings.")
    eval_batches: int = option(10, "Random test batches per critic.")

    def critic(self) -> CriticOptions:
        """The critic's part of these options."""
        return CriticOptions(
            batch=self.batch, steps=self.steps, hidden=self.hidden, dim=self.dim, lr=self.lr,
            temperature=self.temperature, seeds=self.seeds, eval_batches=self.eval_batches,
        )


def color_histograms(images: tf.Tensor | np.ndarray, bins: int = 4) -> np.ndarray:
    """Joint RGB histograms, float32 [N, bins³], each summing to 1, of images [N, H, W, 3] in [0, 1]."""
    return color_histogram_tf(tf.convert_to_tensor(images, tf.float32), bins).numpy()


def color_histogram_tf(images: tf.Tensor, bins: int = 4) -> tf.Tensor:
    """TF version of :func:`color_histograms`; works on one image [H, W, 3] or a batch [N, H, W, 3]."""
    if bins < 1:
        raise EvalError(f"colour histogram needs at least 1 bin per channel, got {bins}")
    images = tf.convert_to_tensor(images, tf.float32)
    single = images.shape.rank == 3
    x = images[None] if single else images
    q = tf.clip_by_value(tf.cast(tf.floor(tf.clip_by_value(x, 0.0, 1.0) * bins), tf.int32), 0, bins - 1)
    cell = q[..., 0] * bins * bins + q[..., 1] * bins + q[..., 2]  # [N, H, W]
    n = tf.shape(cell)[0]
    flat = tf.reshape(cell, [n, -1])
    counts = tf.math.bincount(flat, minlength=bins**3, maxlength=bins**3, dtype=tf.float32, axis=-1)
    hist = counts / tf.cast(tf.shape(flat)[1], tf.float32)
    return hist[0] if single else hist


def run(context: EvalContext, model: LoadedModel, dataset: str, options: ColorInfoOptions) -> Records:
    """Histograms and features of train (critic) and test (estimate) splits; one record."""
    s, o = context.settings, options
    plan = context.splits(dataset)
    start = time.perf_counter()
    sets = {}
    for split in (plan.train, plan.test):
        ds = context.extractor.examples(dataset, split)
        ds = ds.map(lambda ex: {**ex, "color_hist": color_histogram_tf(ex["image"], o.bins)})
        sets[split] = context.extractor.run(model, ds, description=f"{dataset}/{split}+hist")
    tr, te = sets[plan.train], sets[plan.test]
    res = infonce_bound(
        tr.fields["color_hist"], tr.features, te.fields["color_hist"], te.features, o.critic(), seed=s.seed
    )
    context.log(f"  I_NCE(C; z) = {res.mean:.3f} ± {res.ci95:.3f} nats (log N = {res.log_n:.3f}, "
                f"train {res.train_bound:.3f})")
    return [make_record(
        model=model.name, protocol="colorinfo", dataset=dataset, metric="I_NCE_nats", value=res.mean,
        ci95=res.ci95, n_train=len(tr), n_test=len(te), seconds=time.perf_counter() - start,
        settings={
            **context.base_settings(), **dataclasses.asdict(o), "batch_used": res.batch, "log_N": res.log_n,
            "train_bound": res.train_bound, "estimates": len(res.estimates),
            "colour": f"joint RGB histogram, {o.bins}^3 bins, of the centre-cropped eval image",
            "critic": "cosine of two 2-layer MLP embeddings / temperature; Adam on train pairs, bound on test batches",
        },
    )]


PROTOCOL = Protocol(ColorInfoOptions, run, in_all=False, summary="InfoNCE colour information of features (Fig. 1a)")
