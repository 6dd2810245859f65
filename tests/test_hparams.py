"""Runs side by side: TensorBoard's HParams dashboard lists every run with its settings, its training metrics
and the eval results logged to it, read back through TensorBoard's own HParams backend."""

from __future__ import annotations

import dataclasses
import os

from helpers import hparams_dashboard_rows, tiny_run

from augself_tf.runtime.tensorboard import log_eval_records, metric_tag
from augself_tf.training.loop import train


def test_sweep_runs_appear_as_one_hparams_table_with_eval_results(tmp_path):
    root = str(tmp_path / "sweep")
    for name, weight, augself in (("lam0.5", 0.5, ("crop", "color")), ("base", 1.0, ())):
        cfg = dataclasses.replace(tiny_run(os.path.join(root, name)), augself_weight=weight, augself=augself,
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
