"""Every protocol end to end on real data-layer sources (shapes, a folder tree), and eval_main as a program."""

from __future__ import annotations

import json
import os
import subprocess

import eval_fakes as testing
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from program_runs import run_program

from augself_tf.evaluation.context import EvalContext, EvalSettings, ProbeOptions
from augself_tf.evaluation.datasets import DataAccess
from augself_tf.evaluation.estimators.errors import EvalError
from augself_tf.evaluation.loading import load_model
from augself_tf.evaluation.protocols import all_protocols, run_protocol
from augself_tf.evaluation.protocols.fewshot import FewshotOptions
from augself_tf.evaluation.protocols.omega_probe import OmegaProbeOptions
from augself_tf.evaluation.protocols.retrieval import RetrievalOptions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "rand": testing.save_random_conv_model(str(root / "rand" / "saved_model"), channels=8),
        "color": testing.save_oracle_color_model(str(root / "color" / "saved_model")),
        "box": testing.save_oracle_box_model(str(root / "box" / "saved_model")),
    }


class Evaluator:
    """The quick settings of these tests: one context, protocol options, ``run(model, protocol, dataset)``."""

    def __init__(self, tmp_path, access=None, fewshot_ways: int = 5, fewshot_shots=(1, 5), **settings):
        base = dict(image_size=32, batch_size=64, max_examples=120, output_dir=str(tmp_path),
                    probe=ProbeOptions(regs=4, max_iter=300))
        base.update(settings)
        self.context = EvalContext(EvalSettings(**base), access or DataAccess(), log=None)
        self.options = {
            "fewshot": FewshotOptions(ways=fewshot_ways, shots=fewshot_shots, queries=4, episodes=40),
            "retrieval": RetrievalOptions(queries=4),
            "omega_probe": OmegaProbeOptions(augmentations=("crop", "color", "rotation")),
        }

    def run(self, model, protocol: str, dataset: str) -> list[dict]:
        return run_protocol(self.context, model, protocol, dataset, self.options.get(protocol))


@pytest.mark.slow
def test_all_protocols_on_shapes(models, tmp_path):
    ev = Evaluator(tmp_path)
    model = load_model(models["rand"])
    records = []
    for protocol in all_protocols():
        records += ev.run(model, protocol, "shapes")
    by = {r["protocol"]: r for r in records}
    assert set(by) == {
        "linear", "fewshot_5way_1shot", "fewshot_5way_5shot", "localization", "rotation", "colorperm",
        "retrieval", "invariance", "omega_probe_crop", "omega_probe_color", "omega_probe_rotation",
    }
    for r in records:
        assert set(r) == {"model", "protocol", "dataset", "metric", "value", "ci95", "n_train", "n_test",
                          "settings", "seconds"}
        assert r["model"] == "rand" and r["dataset"] == "shapes" and np.isfinite(r["value"])
        json.dumps(r)  # JSON-ready
    assert 20.0 <= by["linear"]["value"] <= 100.0  # 5 shapes: chance is 20%
    assert by["linear"]["n_test"] == 120 and by["linear"]["settings"]["validation"].startswith("0.1 of train")
    assert by["fewshot_5way_1shot"]["ci95"] > 0
    assert 0.0 <= by["localization"]["value"] < 0.2
    assert os.path.exists(by["localization"]["settings"]["figure"])
    assert os.path.exists(by["retrieval"]["settings"]["figure"])
    assert by["rotation"]["value"] > 25.0 and by["colorperm"]["n_test"] == 6 * 120
    assert 0.0 < by["invariance"]["value"] <= 1.0 and by["invariance"]["ci95"] > 0
    assert os.path.exists(by["omega_probe_color"]["settings"]["figure"])


def test_color_label_and_oracle_on_shapes(models, tmp_path):
    ev = Evaluator(tmp_path, label_key="color")
    rec = ev.run(load_model(models["color"]), "linear", "shapes")[0]
    assert rec["settings"]["label_key"] == "color"
    assert rec["value"] > 60.0  # 6 hues, the colour oracle sees them (chance 17%)


def _write_folder(root: str, per_class: int = 12) -> str:
    """Three colour classes of rectangle images (32 px PNG) with boxes.csv."""
    data = testing.rectangle_images(3 * per_class * 2, size=32, seed=1)
    names = ["red", "green", "blue"]
    counts = [0, 0, 0]
    rows = ["filename,label,xmin,ymin,xmax,ymax"]
    for i in range(len(data["image"])):
        c = int(data["color"][i])
        if counts[c] >= per_class:
            continue
        counts[c] += 1
        rel = f"{names[c]}/img{i:03d}.png"
        os.makedirs(os.path.join(root, names[c]), exist_ok=True)
        Image.fromarray(data["image"][i]).save(os.path.join(root, rel))
        y0, x0, y1, x1 = (data["bbox"][i] * 32).round().astype(int)
        rows.append(f"{rel},{names[c]},{x0},{y0},{x1 - 1},{y1 - 1}")
    with open(os.path.join(root, "boxes.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return root


def test_protocols_on_a_folder(models, tmp_path):
    folder = _write_folder(str(tmp_path / "rects"))
    spec = f"folder:{folder}"
    ev = Evaluator(tmp_path, fewshot_ways=3, fewshot_shots=(1,))
    loc = ev.run(load_model(models["box"]), "localization", spec)[0]
    assert loc["value"] < 1e-3 and loc["settings"]["mean_iou"] > 0.9  # the box oracle
    color = load_model(models["color"])
    lin = ev.run(color, "linear", spec)[0]
    assert lin["settings"]["validation"] == "split 'val'" and lin["value"] > 90.0
    few = ev.run(color, "fewshot", spec)[0]
    assert few["protocol"] == "fewshot_3way_1shot" and few["settings"]["pool_split"] == "all"
    assert few["value"] > 50.0  # chance: 33%
    rand = load_model(models["rand"])
    for protocol in ("retrieval", "colorperm"):
        (rec,) = ev.run(rand, protocol, spec)
        assert np.isfinite(rec["value"])


def test_bad_inputs_raise_one_clear_error(models, tmp_path):
    data = testing.rectangle_images(40, size=16, seed=2)
    no_box = {k: v for k, v in data.items() if k != "bbox"}
    access = testing.MemorySources({"nobox": {"train": no_box, "test": no_box}})
    ev = Evaluator(tmp_path, access, image_size=16, fewshot_ways=5)
    model = load_model(models["rand"])
    with pytest.raises(EvalError, match="localization needs boxes"):
        ev.run(model, "localization", "nobox")
    with pytest.raises(EvalError, match="5-way 1-shot episodes need 5 classes"):
        ev.run(model, "fewshot", "nobox")  # 4 quadrant classes only
    with pytest.raises(EvalError, match="no 'missing' label"):
        Evaluator(tmp_path, access, image_size=16, label_key="missing").run(
            model, "linear", "nobox"
        )

    class Fixed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 24, 24, 3], tf.float32)])
        def serve(self, x):
            return {"features": tf.reduce_mean(x, [1, 2])}

    fixed = Fixed()
    tf.saved_model.save(fixed, str(tmp_path / "fixed"), signatures={"serving_default": fixed.serve})
    with pytest.raises(EvalError, match="pass --image_size 24"):
        ev.run(load_model(str(tmp_path / "fixed")), "linear", "nobox")

    class Picky(tf.Module):  # accepts any size statically, fails at run time on anything but 24 px
        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32)])
        def serve(self, x):
            return {"features": tf.reshape(x, [-1, 24 * 24 * 3])[:, :4]}

    picky = Picky()
    tf.saved_model.save(picky, str(tmp_path / "picky"), signatures={"serving_default": picky.serve})
    with pytest.raises(EvalError, match="rejected a batch of 16x16 images"):
        ev.run(load_model(str(tmp_path / "picky")), "linear", "nobox")


@pytest.fixture(scope="module")
def eval_main_runs(models, tmp_path_factory):
    """eval_main.py's command lines of the tests below, one process each, forked after one import of the
    program (tests/program_runs.py): {name: (CompletedProcess, what the test needs)}."""
    tmp = tmp_path_factory.mktemp("eval_main")
    folder = _write_folder(str(tmp / "rects"), per_class=8)
    out = str(tmp / "res" / "results.json")

    class NoSig(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def f(self, x):
            return x

    m = NoSig()
    tf.saved_model.save(m, str(tmp / "nosig"), signatures={"other": m.f})
    cases = {
        "end_to_end": [f"--saved_model={models['rand']},{models['color']}", "--protocol=linear,fewshot",
                       f"--dataset=folder:{folder}", "--image_size=32", "--linear_regs=3", "--linear_max_iter=200",
                       "--fewshot_ways=3", "--fewshot_episodes=20", "--fewshot_shots=1", "--fewshot_queries=4",
                       f"--output={out}", "--quiet"],
        "missing": ["--saved_model=/nonexistent/model", "--protocol=linear"],
        "bogus": [f"--saved_model={models['rand']}", "--protocol=bogus"],
        "log_to": [f"--saved_model={models['rand']},{models['rand']}", f"--log_to={tmp}"],
        "nosig": [f"--saved_model={tmp / 'nosig'}", "--dataset=shapes"],
    }
    procs = run_program(os.path.join(REPO, "eval_main.py"), list(cases.values()), cwd=REPO,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    runs = dict(zip(cases, procs, strict=True))
    runs["output"] = out
    return runs


@pytest.mark.slow
def test_eval_main_end_to_end(eval_main_runs):
    proc, out = eval_main_runs["end_to_end"], eval_main_runs["output"]
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = json.load(open(out))
    assert {(r["model"], r["protocol"]) for r in records} == {
        ("rand", "linear"), ("color", "linear"), ("rand", "fewshot_3way_1shot"), ("color", "fewshot_3way_1shot"),
    }
    assert "| protocol | dataset | metric | rand | color | paper |" in proc.stdout
    assert os.path.exists(out.replace(".json", ".md"))


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("eval_main: error:")]


@pytest.mark.slow
def test_eval_main_bad_inputs_exit_2_with_one_line(eval_main_runs):
    missing, bogus, log_to, nosig = (eval_main_runs[k] for k in ("missing", "bogus", "log_to", "nosig"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == ["eval_main: error: SavedModel not found: /nonexistent/model"]
    assert bogus.returncode == 2 and len(bogus.stderr.strip().splitlines()) == 1 and "bogus" in bogus.stderr
    assert log_to.returncode == 2 and len(log_to.stderr.strip().splitlines()) == 1
    assert "--log_to=auto" in log_to.stderr
    assert nosig.returncode == 2 and "Traceback" not in nosig.stderr
    lines = _error_lines(nosig)
    assert len(lines) == 1 and "no 'serving_default' signature" in lines[0]
