"""What a resume and a class subset cost the input before the first step (docs/benchmarks.md §7).

1. ``--first_batch``: seconds from building the pair stream to its first batch, fresh and resumed mid-epoch, on a
   folder tree (default: tiny-imagenet-mini, 5,000 JPEGs of 64 px, batch 64 at 64 px: 78 steps an epoch). The
   stream of this checkout; point PYTHONPATH at another checkout to time its stream the same way.
2. ``--decode_ratio``: images decoded per image used for ImageNet-100 of tfds imagenet2012, on
   ``tfds.testing.mock_data`` (random labels, so about 10% are kept): the earlier composition (decode every
   example, then ``filter_classes``) against ``load_source("imagenet100")`` and the pair stream's records.

    python -m bench.bench_resume_input --first_batch [--folder=PATH] [--repeats=3]
    python -m bench.bench_resume_input --decode_ratio [--mock_examples=2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import tensorflow as tf


def first_batch_seconds(path: str, step: int, batch: int, size: int, repeats: int) -> tuple[float, float, float]:
    """(median, min, max) seconds from `make_pair_dataset` to its first batch, resuming at ``step``."""
    from augself_tf.augment import AugmentConfig
    from augself_tf.data import folder
    from augself_tf.data.pretrain import make_pair_dataset

    records = folder.records(path, "all")
    steps_per_epoch = len(records[0]["label"]) // batch
    epoch, in_epoch = divmod(step, steps_per_epoch)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ds = make_pair_dataset(records, AugmentConfig(image_size=size), seed=0, batch_size=batch, start_epoch=epoch,
                               batches_per_epoch=steps_per_epoch, skip_batches=in_epoch)
        next(iter(ds))["view1"].numpy()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def decode_ratio(num_examples: int) -> dict[str, tuple[int, int]]:
    """{path: (images decoded, images used)} for ImageNet-100 of mocked tfds imagenet2012."""
    import tensorflow_datasets as tfds

    from augself_tf.augment import AugmentConfig
    from augself_tf.data import tfds_source
    from augself_tf.data.classes import class_ids_from_names, filter_classes
    from augself_tf.data.imagenet100 import wnids
    from augself_tf.data.pretrain import make_pair_dataset
    from augself_tf.data.sources import load_source, pair_records

    decoded: list[int] = []
    real = tfds.features.Image.decode_example

    def counting(self, example):  # every tfds image decode, wherever it runs
        tick = tf.py_function(lambda: decoded.append(1) or 0, [], tf.int32)
        with tf.control_dependencies([tick]):
            return real(self, tf.identity(example))

    tfds.features.Image.decode_example = counting
    out = {}
    try:
        with tfds.testing.mock_data(num_examples=num_examples):
            ids = class_ids_from_names(tfds_source.info("imagenet2012", "train"), wnids())
            builder = tfds.builder("imagenet2012")
            # Decoders (even none: {}) make the mock encode its images and decode them, as tfds decodes real
            # records (decoders=None hands out raw arrays); {} decodes every image, as the earlier code did.
            whole = builder.as_dataset(split="train", decoders={})
            whole = whole.map(lambda ex: {"image": ex["image"], "label": ex["label"]})
            for name, ds in (("decode, then filter_classes (before)", filter_classes(whole, ids)),
                             ("load_source('imagenet100') (after)", load_source("imagenet100", "train"))):
                decoded.clear()
                used = sum(1 for _ in ds.as_numpy_iterator())
                out[name] = (len(decoded), used)
            decoded.clear()
            pairs = make_pair_dataset(pair_records("imagenet100", "train"), AugmentConfig(image_size=16), seed=0,
                                      batch_size=1, num_epochs=1)
            used = sum(1 for _ in pairs.as_numpy_iterator())
            out["pair stream records (after)"] = (len(decoded), used)
    finally:
        tfds.features.Image.decode_example = real
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first_batch", action="store_true")
    parser.add_argument("--decode_ratio", action="store_true")
    parser.add_argument("--folder", default="/work/shared/data/tiny-imagenet-mini")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mock_examples", type=int, default=2000)
    args = parser.parse_args()
    if args.first_batch:
        for step in (0, 39, 77):
            med, lo, hi = first_batch_seconds(args.folder, step, args.batch, args.size, args.repeats)
            print(f"resume at step {step:3d}: first batch after {med:6.2f} s (min {lo:.2f}, max {hi:.2f})", flush=True)
    if args.decode_ratio:
        for name, (dec, used) in decode_ratio(args.mock_examples).items():
            print(f"{name}: {dec} decoded, {used} used: {dec / max(used, 1):.2f} decoded per image used")


if __name__ == "__main__":
    main()
