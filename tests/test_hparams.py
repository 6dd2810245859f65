"""Runs side by side: TensorBoard's HParams dashboard lists every run with its settings, its training metrics
and the eval results logged to it, read back through TensorBoard's own HParams backend."""

from __future__ import annotations

import os

import pytest
from helpers import hparams_dashboard_rows, replace_config, tiny_run

from augself_tf.runtime.tensorboard import log_eval_records, metric_tag
from augself_tf.training.loop import train


@pytest.mark.slow
def test_sweep_runs_appear_as_one_hparams_table_with_eval_results(tmp_path):
    root = str(tmp_path / "sweep")
    for name, weight, augself in (("lam0.5", 0.5, ("crop", "color")), ("base", 1.0, ())):
        cfg = replace_config(tiny_run(os.path.join(root, name)), augself_weight=weight, augself=augself,
                                  max_steps=1, log_every=1, export=False)
        train(cfg)
    record = {"protocol": "linear", "dataset": "shapes:color", "metric": "top1", "value": 0.625}
    log_eval_records(os.path.join(root, "lam0.5"), [record])

    rows = hparams_dashboard_rows(root)
    assert set(rows) == {"lam0.5", "base"}
    hp_a, metrics_a = rows["lam0.5"]
    hp_b, metrics_b = rows["base"]
    assert hp_a["augself_weight"] == 0.5 and hp_a["augself"] == "crop,color" and hp_a["method"] == "moco"
    assert hp_b["augself"] == "none" and hp_a["width"] == hp_b["width"] == 0.0625
    assert hp_a["image_size"] == 16 and "model_dir" not in hp_a
    assert metrics_a[("eval", metric_tag(record))] == 0.625 and metric_tag(record) == "eval/linear/shapes_color/top1"
    assert ("", "loss/total") in metrics_a and ("", "loss/total") in metrics_b
    assert not any(group == "eval" for group, _ in metrics_b)


def test_read_scalars_reads_tf2_and_tf1_scalars_and_skips_other_summaries(tmp_path):
    import time

    import numpy as np
    import tensorflow as tf

    from augself_tf.runtime.tensorboard import last_per_step, read_scalars

    log_dir = str(tmp_path / "tb")
    with tf.summary.create_file_writer(log_dir).as_default():
        for step, value in ((0, 1.5), (5, 2.5)):
            tf.summary.scalar("loss/total", value, step=step)
        tf.summary.image("views", np.zeros((1, 4, 4, 3), np.float32), step=0)  # not a scalar
        tf.summary.text("note", "hello", step=0)
    time.sleep(1.1)  # a second file, as a resumed run writes: step 5 again
    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        tf.summary.scalar("loss/total", 3.0, step=5)
        tf.summary.scalar("monitor/knn", 0.75, step=5)
    writer.flush()
    v1 = tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(tag="old/simple", simple_value=4.0)])
    with tf.io.TFRecordWriter(os.path.join(log_dir, "events.out.tfevents.9999999999.v1")) as f:  # TF1's way
        f.write(tf.compat.v1.Event(step=7, wall_time=1.0, summary=v1).SerializeToString())

    events = read_scalars(log_dir)
    assert set(events) == {"loss/total", "monitor/knn", "old/simple"}
    assert [(e.step, e.value) for e in events["loss/total"]] == [(0, 1.5), (5, 2.5), (5, 3.0)]
    assert last_per_step(events["loss/total"]) == [(0, 1.5), (5, 3.0)]
    assert [(e.step, e.value) for e in events["old/simple"]] == [(7, 4.0)]
    assert events["monitor/knn"][0].wall_time > 1e9
    assert set(read_scalars(log_dir, ["monitor/knn"])) == {"monitor/knn"}
    assert set(read_scalars(log_dir, lambda tag: tag.startswith("loss/"))) == {"loss/total"}

