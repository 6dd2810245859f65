"""Runs side by side: TensorBoard's HParams dashboard lists every run with its settings, its training metrics
and the eval results logged to it, read back through TensorBoard's own HParams backend."""

from __future__ import annotations

import dataclasses
import os

from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups
from test_training import tiny

from augself_tf.training.hparams import log_eval_records, metric_tag
from augself_tf.training.loop import train


def dashboard_rows(logdir: str) -> dict[str, tuple[dict, dict]]:
    """What the HParams dashboard shows for ``tensorboard --logdir LOGDIR``: {session: (hparams, metrics)}."""
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    provider = data_provider.MultiplexerDataProvider(mux, logdir)
    tb = base_plugin.TBContext(logdir=logdir, multiplexer=mux, data_provider=provider)
    request = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=100, allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS])
    groups = list_session_groups.Handler(
        context.RequestContext(), backend_context.Context(tb), "", request).run().session_groups
    rows = {}
    for g in groups:
        hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in g.hparams.items()}
        metrics = {(m.name.group, m.name.tag): m.value for m in g.metric_values}
        rows[g.name] = (hparams, metrics)
    return rows


def test_sweep_runs_appear_as_one_hparams_table_with_eval_results(tmp_path):
    root = str(tmp_path / "sweep")
    for name, weight, augself in (("lam0.5", 0.5, ("crop", "color")), ("base", 1.0, ())):
        cfg = dataclasses.replace(tiny(os.path.join(root, name)), augself_weight=weight, augself=augself,
                                  max_steps=1, log_every=1, export=False)
        train(cfg)
    record = {"protocol": "linear", "dataset": "shapes:color", "metric": "top1", "value": 0.625}
    log_eval_records(os.path.join(root, "lam0.5"), [record])

    rows = dashboard_rows(root)
    assert set(rows) == {"lam0.5", "base"}
    hp_a, metrics_a = rows["lam0.5"]
    hp_b, metrics_b = rows["base"]
    assert hp_a["augself_weight"] == 0.5 and hp_a["augself"] == "crop,color" and hp_a["method"] == "moco"
    assert hp_b["augself"] == "none" and hp_a["width"] == hp_b["width"] == 0.0625
    assert hp_a["image_size"] == 16 and "model_dir" not in hp_a
    assert metrics_a[("eval", metric_tag(record))] == 0.625 and metric_tag(record) == "eval/linear/shapes_color/top1"
    assert ("", "loss/total") in metrics_a and ("", "loss/total") in metrics_b
    assert not any(group == "eval" for group, _ in metrics_b)
