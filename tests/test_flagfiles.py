"""Every flagfile in flags/ parses with augself-train's absl flags into the paper's settings, is listed in
docs/experiments.md, and trains for a step at toy size; plus the `imagenet100` data source they use.

Training runs in-process (one TF import) and eagerly (no step tracing). Flagfiles whose configs differ only
in values that cannot change what runs — λ, the colour-jitter strength and model_dir — share one run: the
others are checked to parse into exactly the representative's config apart from those values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from absl import flags as absl_flags
from helpers import DATA

from augself_tf.augment import AugmentConfig
from augself_tf.data import tfds_source
from augself_tf.data.sources import imagenet100_wnids, load_source, source_info
from augself_tf.flag_fields import flag_fields, help_text
from augself_tf.methods import METHODS, method_options
from augself_tf.methods.model_config import ModelConfig
from augself_tf.models.backbones import is_vit
from augself_tf.objectives import objective_options
from augself_tf.training.hparams import run_hparams
from augself_tf.training.loop import TrainConfig, train
from augself_tf.training.train_config import config_from_flags, define_train_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGFILES = sorted(glob.glob(os.path.join(ROOT, "flags", "*.cfg")))
NAMES = [os.path.basename(p)[: -len(".cfg")] for p in FLAGFILES]
pytestmark = pytest.mark.filterwarnings("ignore:Even though the.*run_functions_eagerly:UserWarning")
TOY = ["--dataset=shapes", "--split=train", "--image_size=16", "--batch_size=16", "--max_steps=1",
       "--monitor=none"]  # one eager step: the online monitors (tests/test_monitors.py) would triple its time


def train_flags() -> absl_flags.FlagValues:
    """augself-train's flags, defined by the library on a FlagValues of their own."""
    values = absl_flags.FlagValues()
    define_train_flags(values, "augself-train")
    return values


def parse_argv(argv: list[str]) -> TrainConfig:
    """augself-train's config for the command line ``argv`` (without the program name), run from the repository
    root as the documented commands are: the flagfiles' includes are paths from there."""
    values = train_flags()
    with contextlib.chdir(ROOT):
        values(["augself-train", *argv])
    return config_from_flags(values)


def parse(name: str, *extra: str) -> TrainConfig:
    """augself-train's config for `--flagfile=flags/NAME.cfg EXTRA...` (later flags override the file)."""
    return parse_argv([f"--flagfile={os.path.join(ROOT, 'flags', name + '.cfg')}", *extra])


def toy(name: str) -> list[str]:
    """`TOY`, and a ResNet at width 1/16 (a ViT's width is its size's: it refuses --width)."""
    return [*TOY, *([] if is_vit(parse(name).model.backbone) else ["--width=0.0625"])]


def _signature(cfg: TrainConfig) -> TrainConfig:
    """The config with the values that cannot change what runs blanked out."""
    augment = dataclasses.replace(cfg.augment, color_strength=0.0,
                                  probabilities={**cfg.augment.probabilities, "gray_prob": 0.0})
    return dataclasses.replace(cfg, model_dir="", model=dataclasses.replace(cfg.model, augself_weight=0.0),
                               augment=augment)


def _groups() -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    by_signature: dict[str, str] = {}
    for name in sorted(NAMES, key=len):  # the shortest name (the main experiment) represents its group
        key = repr(_signature(parse(name, *toy(name))))
        first = by_signature.setdefault(key, name)
        groups.setdefault(first, []).append(name)
    return groups


GROUPS = _groups()


def test_there_is_a_flagfile_per_experiment():
    assert len(NAMES) == 63
    for m in ("simsiam", "moco", "byol", "simclr", "swav"):
        assert {f"stl10_{m}", f"stl10_{m}_augself"} <= set(NAMES)
    for m in ("simsiam", "moco", "supervised"):
        assert {f"imagenet100_{m}", f"imagenet100_{m}_augself"} <= set(NAMES)
    # CASSLE (conditioned projectors) beside AugSelf: its paper's ImageNet100 MoCo v2 run, STL10 SimSiam and MoCo.
    assert {"imagenet100_moco_cassle", "stl10_simsiam_cassle", "stl10_moco_cassle"} <= set(NAMES)
    # LooC's rows of table:looc_comparison (docs/experiments.md, "LooC").
    assert {"imagenet100_looc_color", "imagenet100_looc_rotation", "imagenet100_looc_color_rotation"} <= set(NAMES)
    # EquiMod's CIFAR10 rows (docs/experiments.md, "EquiMod").
    assert {"cifar10_equimod_simclr", "cifar10_equimod_byol"} <= set(NAMES)
    # STL (docs/experiments.md, "STL"): its own loss (SimCLR's invariance) and SimSiam's in its place.
    assert {"stl10_simclr_stl", "stl10_simsiam_stl"} <= set(NAMES)
    # E-SSL's ImageNet SimCLR and SimSiam rows, baseline and E-SSL (docs/experiments.md, "E-SSL").
    assert {f"imagenet_{m}{e}" for m in ("simclr", "simsiam") for e in ("", "_essl")} <= set(NAMES)
    # ViTs (docs/experiments.md, "Vision Transformers"): MoCo v3's ViT-S/16, CASSLE's MoCo v3 ViT + AugSelf, and the
    # CPU-scale ViT on the ledger's data.
    assert {"imagenet_mocov3_vit_small", "imagenet100_mocov3_vit_small_augself",
            "tiny_mocov3_vit_pico_augself"} <= set(NAMES)
    # DINO (docs/experiments.md, "DINO"): its README's ViT-S/16 and ResNet-50 runs, and the CPU-scale ViT ± AugSelf.
    assert {"imagenet_dino_vit_small", "imagenet_dino_resnet50", "tiny_dino_vit_pico",
            "tiny_dino_vit_pico_augself"} <= set(NAMES)


def _expected_augself(name: str) -> tuple[str, ...]:
    if name.endswith("_augself") or name.endswith("_cj"):
        return ("crop", "color")
    if m := re.search(r"_cj([rs])$", name):
        return ("crop", "color", {"r": "rotation", "s": "solarize"}[m.group(1)])
    if m := re.match(r"stl10_single_(\w+)$", name):
        return (m.group(1),)
    if m := re.match(r"stl10_simsiam_(crop|color|crop_color)_lambda", name):
        return tuple(m.group(1).split("_"))
    return ()


@pytest.mark.parametrize("name", NAMES)
def test_flagfile_parses_into_the_paper_settings(name):
    cfg = parse(name)
    model = cfg.model
    assert cfg.model_dir == f"runs/{name}"
    assert model.augself_names == _expected_augself(name)
    # CASSLE's reference run (mprzewie/AugSelf README): --aug-cond crop color color_diff blur grayscale,
    # --aug-nn-depth 6 --aug-nn-width 64.
    cassle = name.endswith("_cassle")
    assert model.condition == (("crop", "color", "color_diff", "blur", "grayscale") if cassle else ())
    assert (model.condition_width, model.condition_depth) == (64, 6)
    opts = {k: v for k, v in {**model.method_options, **model.objective_options}.items() if v is not None}
    if name.startswith("cifar10_equimod_"):
        _check_equimod(cfg, name[len("cifar10_equimod_"):], opts)
        return
    if model.method == "mocov3":
        _check_mocov3(cfg, name, opts)
        return
    if model.method == "dino":
        _check_dino(cfg, name, opts)
        return
    if name.startswith("stl10_"):
        assert (cfg.dataset, cfg.split, model.backbone, model.width) == ("stl10", "train+unlabelled", "resnet18", 1.0)
        assert (cfg.augment.image_size, cfg.batch_size, cfg.epochs) == (96, 256, 200)
        assert (cfg.lr, cfg.weight_decay) == (0.03, 5e-4)
        lam = re.search(r"_lambda([\d.]+)$", name)
        assert model.augself_weight == (float(lam.group(1)) if lam else 1.0)
        assert cfg.augment.blur_kernel_size == 9
    elif name.startswith("imagenet_"):  # E-SSL's ImageNet-1k rows, at its SimSiam row's SGD recipe
        assert (cfg.dataset, cfg.split, model.backbone, model.width) == ("imagenet2012", "train", "resnet50", 1.0)
        assert (cfg.augment.image_size, cfg.batch_size, cfg.epochs, cfg.lr, cfg.weight_decay) == \
            (224, 512, 100, 0.05, 1e-4)
        assert cfg.augment.blur_kernel_size == 23
        essl = name.endswith("_essl")
        assert opts.get("essl_weight") == ({"simclr": 0.4, "simsiam": 0.08}[name.split("_")[1]] if essl else None)
        if essl:
            assert (opts["essl_crop_size"], opts["essl_crop_scale"], opts["essl_hidden"]) == (96, "0.05,0.14", 2048)
            assert opts["essl_bottleneck"] == {"simclr": 128, "simsiam": 256}[name.split("_")[1]]
    else:
        assert name.startswith("imagenet100_")
        assert (cfg.dataset, cfg.split, model.backbone, model.width) == ("imagenet100", "train", "resnet50", 1.0)
        assert cfg.augment.image_size == 224 and cfg.weight_decay == 1e-4
        assert cfg.augment.blur_kernel_size == 23
        if model.augself:
            assert model.augself_weight == 0.5
    method = name.split("_")[2 if name.startswith(("stl10_rotation", "stl10_solarize", "stl10_color")) else 1]
    method = {"single": "none"}.get(method, method)
    assert model.method == method
    s = re.match(r"stl10_color([\d.]+)_", name)
    strength = float(s.group(1)) if s else 1.0
    np.testing.assert_allclose(cfg.augment.jitter_strength, (0.4 * strength, 0.4 * strength, 0.4 * strength,
                                                              0.1 * strength))
    # As the reference code, which produced the paper's colour-strength figure: grayscale p = 0.2·s.
    assert cfg.augment.probability("gray_prob") == pytest.approx(0.2 * strength)
    strong = {aug: cfg.augment.probability(f"{aug}_prob") for aug in ("rotation", "solarize")}
    for aug, prob in strong.items():
        wanted = aug in name
        assert prob == (0.5 if wanted else 0.0), (aug, prob)
    # Method settings from the appendix.
    if name.startswith("imagenet100_simsiam"):
        assert (cfg.lr, cfg.batch_size, cfg.epochs, opts["projector_layers"]) == (0.05, 256, 500, 3)
    if name.startswith("imagenet100_moco"):
        assert (cfg.lr, cfg.batch_size, cfg.epochs, opts["projector_hidden"]) == (0.03, 256, 500, 2048)
    if model.method == "looc":  # LooC in the paper's ImageNet100 MoCo v2 setup, one head of MoCo's shape per space
        assert (cfg.lr, cfg.batch_size, cfg.epochs, opts["projector_hidden"], opts["projector_dim"]) == \
            (0.03, 256, 500, 2048, 128)
        assert (opts["temperature"], opts["key_momentum"], opts["queue_size"]) == (0.2, 0.999, 65536)
        assert opts["looc_augmentations"] == name[len("imagenet100_looc_"):].replace("_", ",")
    if name.startswith("imagenet100_supervised"):
        assert (cfg.batch_size, cfg.epochs) == (128, 100)
    if model.method == "simsiam" and name.startswith("stl10_"):
        assert opts["projector_layers"] == 2 and opts["projector_dim"] == 2048 and opts["predictor_hidden"] == 512
    if name.startswith("stl10_moco"):
        assert (opts["projector_hidden"], opts["projector_dim"], opts["queue_size"]) == (512, 128, 65536)
        assert (opts["temperature"], opts["key_momentum"]) == (0.2, 0.999)
    if model.method == "byol":
        assert (opts["projector_hidden"], opts["projector_dim"], opts["predictor_hidden"]) == (4096, 256, 4096)
        assert opts["target_momentum"] == 0.996
    if model.method == "simclr":  # the AugSelf paper's; E-SSL's ImageNet row has a 2048-wide hidden layer
        wide = name.startswith("imagenet_")
        assert (opts["projector_hidden"], opts["projector_dim"], opts["temperature"]) == \
            (2048 if wide else 512, 128, 0.2)
    if name.endswith("_stl"):  # STL's main.py / README: --equi 1 --trans 0.1 --temperature 0.2, 128-128, 512-128
        assert (opts["stl_weight"], opts["stl_trans_weight"], opts["stl_temperature"]) == (1.0, 0.1, 0.2)
        assert (opts["stl_trans_dim"], opts["stl_projector_hidden"], opts["stl_projector_dim"]) == (128, 512, 128)
        assert (opts["stl_equi_dim"], opts["stl_aligned"]) == (0, "crop,color,grayscale")
    else:
        assert "stl_weight" not in opts
    if model.method == "swav":
        assert (opts["projector_hidden"], opts["projector_dim"], opts["num_prototypes"]) == (2048, 128, 100)
        assert (opts["sinkhorn_epsilon"], opts["sinkhorn_iterations"], opts["temperature"]) == (0.05, 3, 0.1)
        assert opts["freeze_prototypes_steps"] == -1


def _check_mocov3(cfg: TrainConfig, name: str, opts: dict) -> None:
    """MoCo v3's ViT recipe (facebookresearch/moco-v3 CONFIG.md, vits.py, builder.py), CASSLE's MoCo v3 ViT with
    AugSelf (mprzewie/AugSelf pretrain_cond.py mocov3()), and the CPU-scale ViT."""
    model = cfg.model
    assert (cfg.optimizer, cfg.weight_decay, cfg.weight_decay_exclude, cfg.weight_decay_end) == ("adamw", 0.1, "none",
                                                                                               None)
    assert (model.pos_embed, model.stop_grad_conv1, model.drop_path) == ("sincos", True, 0.0)
    assert (opts["temperature"], opts["projector_dim"]) == (0.2, 256)
    cpu = name.startswith("tiny_")
    hidden = 1024 if cpu else 4096
    assert (opts["projector_hidden"], opts["predictor_hidden"]) == (hidden, hidden)
    cassle = name.startswith("imagenet100_")
    assert (opts["moco_momentum"], opts["momentum_cosine"], opts["asymmetric_views"]) == \
        ((0.999, False, False) if cassle else (0.99, True, True))
    assert cfg.augment.crop_scale == ((0.2, 1.0) if cassle else (0.08, 1.0))
    assert cfg.lr == 1.5e-4
    if cpu:
        assert (model.backbone, model.patch_size, cfg.augment.image_size) == ("vit_pico", 8, 64)
        assert (cfg.batch_size, cfg.epochs, cfg.warmup_epochs) == (128, 120, 16)
        assert cfg.dataset.endswith("tiny-imagenet-mini") and model.augself_weight == 1.0
        return
    assert (model.backbone, model.patch_size, cfg.augment.image_size) == ("vit_small", 16, 224)
    assert cfg.warmup_epochs == 40
    if cassle:
        assert (cfg.dataset, cfg.batch_size, cfg.epochs, model.augself_weight) == ("imagenet100", 256, 500, 0.5)
    else:
        assert (cfg.dataset, cfg.batch_size, cfg.epochs) == ("imagenet2012", 1024, 300)


def _check_dino(cfg: TrainConfig, name: str, opts: dict) -> None:
    """DINO's README runs (facebookresearch/dino main_dino.py's defaults and its README's commands) and the CPU-scale
    ViT."""
    model, augment = cfg.model, cfg.augment
    cpu, resnet = name.startswith("tiny_"), name.endswith("_resnet50")
    assert (opts["dino_out_dim"], opts["dino_hidden"], opts["dino_bottleneck"]) == \
        ((4096, 512, 256) if cpu else (65536, 2048, 256))
    assert (opts["norm_last_layer"], opts["student_temperature"], opts["teacher_temperature"]) == (True, 0.1, 0.04)
    assert (opts["warmup_teacher_temperature"], opts["teacher_temperature_epochs"]) == (0.04, 0)
    assert (opts["center_momentum"], opts["teacher_momentum"], opts["freeze_last_layer_epochs"]) == (0.9, 0.996, 1)
    assert (opts["global_crops"], opts["local_crops"], opts["local_crop_size"]) == (2, 8, 32 if cpu else 96)
    assert (opts["global_crop_scale"], opts["local_crop_scale"]) == \
        (("0.14,1", "0.05,0.14") if resnet else ("0.4,1", "0.05,0.4"))
    assert opts["asymmetric_views"] and (augment.probability("blur_prob"), augment.probability("solarize_prob")) == \
        (0.5, 0.0)
    assert cfg.weight_decay_exclude == "1d"
    if resnet:
        assert (model.backbone, model.width, cfg.optimizer, cfg.lr, cfg.weight_decay) == \
            ("resnet50", 1.0, "sgd", 0.03, 1e-4)
        assert (cfg.weight_decay_end, cfg.clip_grad) == (None, 3.0)  # DINO clips under SGD too
    else:
        assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.weight_decay_end, cfg.clip_grad) == \
            ("adamw", 0.0005, 0.04, 0.4, 3.0)
        assert (model.pos_embed, model.drop_path, model.stop_grad_conv1) == ("learned", 0.1, False)
    if cpu:
        assert (model.backbone, model.patch_size, augment.image_size) == ("vit_pico", 8, 64)
        assert (cfg.batch_size, cfg.epochs, cfg.warmup_epochs) == (128, 120, 12)
        assert cfg.dataset.endswith("tiny-imagenet-mini") and model.augself_weight == 1.0
        return
    assert (cfg.dataset, cfg.batch_size, cfg.epochs, cfg.warmup_epochs, augment.image_size) == \
        ("imagenet2012", 512, 100, 10, 224)
    if not resnet:
        assert (model.backbone, model.patch_size) == ("vit_small", 16)


def _check_equimod(cfg: TrainConfig, method: str, opts: dict) -> None:
    """EquiMod's CIFAR10 rows (ADevillers/EquiMod, run_equimod_*_cifar10.slurm, src/dataset.py), SGD for LARS."""
    model = cfg.model
    assert (cfg.dataset, cfg.split, model.backbone, model.width) == ("cifar10", "train", "resnet18_cifar", 1.0)
    assert (cfg.augment.image_size, cfg.batch_size, cfg.epochs, cfg.lr, cfg.weight_decay) == (32, 512, 800, 0.03, 5e-4)
    assert (model.method, model.augself) == (method, ())
    assert cfg.augment.crop_scale == (0.2, 1.0) and cfg.augment.blur_kernel_size == 3
    assert (opts["equimod_weight"], opts["equimod_hidden"], opts["equimod_dim"], opts["equimod_temperature"]) == \
        (1.0, 2048, 128, 0.2)
    probabilities = {k: cfg.augment.probability(f"{k}_prob") for k in ("blur", "solarize", "rotation")}
    if method == "simclr":
        assert (opts["projector_hidden"], opts["projector_dim"], opts["temperature"]) == (2048, 128, 0.5)
        assert probabilities == {"blur": 0.0, "solarize": 0.0, "rotation": 0.0}
    else:  # the mean of the reference's two views' rates
        assert (opts["projector_hidden"], opts["projector_dim"], opts["predictor_hidden"]) == (4096, 256, 4096)
        assert opts["target_momentum"] == 0.996
        assert probabilities == {"blur": 0.55, "solarize": 0.1, "rotation": 0.0}


def test_every_flagfile_is_in_the_experiments_table_and_back():
    with open(os.path.join(ROOT, "docs", "experiments.md")) as f:
        doc = f.read()
    listed = set(re.findall(r"flags/([\w.\-]+)\.cfg", doc))
    assert listed == set(NAMES), (sorted(listed - set(NAMES)), sorted(set(NAMES) - listed))


@pytest.fixture
def eager():
    tf.config.run_functions_eagerly(True)  # one step: running eagerly is cheaper than tracing the step
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(GROUPS))
def test_flagfiles_train_a_step_at_toy_size(name, tmp_path, eager):
    cfg = parse(name, *toy(name), f"--model_dir={tmp_path}")
    for other in GROUPS[name][1:]:  # same run apart from λ / colour strength / model_dir
        assert _signature(parse(other, *toy(other))) == _signature(cfg), other
    cfg = dataclasses.replace(cfg, export=False, verbose=0, shuffle_buffer=64)
    result = train(cfg)
    assert result.steps == 1
    assert all(math.isfinite(v) for v in result.last_logs.values()), result.last_logs
    assert os.path.exists(os.path.join(str(tmp_path), "checkpoints", "ckpt-1.index"))


# ----------------------------------------------------------------------------- the imagenet100 source
def test_imagenet100_class_list_is_packaged():
    wnids = imagenet100_wnids()
    assert len(wnids) == len(set(wnids)) == 100 and all(re.fullmatch(r"n\d{8}", w) for w in wnids)
    shared = os.path.join(ROOT, "..", "shared", "data", "splits", "imagenet100.txt")
    if os.path.exists(shared):
        with open(shared) as f:
            assert wnids == [line.strip() for line in f if line.strip()]


def test_imagenet100_over_a_folder_keeps_the_100_classes_in_list_order(tmp_path):
    wnids = imagenet100_wnids()
    rng = np.random.default_rng(0)
    extra = ["n00000001", "n99999999"]  # ImageNet classes outside the subset
    for i, wnid in enumerate([*wnids, *extra]):
        d = tmp_path / "train" / wnid
        d.mkdir(parents=True)
        img = tf.io.encode_png(rng.integers(0, 255, [4, 4, 3], dtype=np.uint8)).numpy()
        (d / f"{i}.png").write_bytes(img)
    spec = f"imagenet100:folder:{tmp_path}"
    info = source_info(spec, "train")
    assert (info.num_examples, info.num_classes, info.class_names) == (100, 100, wnids)
    labels = [int(ex["label"]) for ex in load_source(spec, "train")]
    assert sorted(labels) == list(range(100))
    # label i is the image written for wnids[i]
    seen = {int(ex["label"]): int(ex["image"][0, 0, 0]) for ex in load_source(spec, "train")}
    rng = np.random.default_rng(0)
    firsts = [int(rng.integers(0, 255, [4, 4, 3], dtype=np.uint8)[0, 0, 0]) for _ in range(100)]
    assert [seen[i] for i in range(100)] == firsts


def test_imagenet100_without_prepared_imagenet2012_says_how_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="downloads/manual"):
        source_info("imagenet100", "train", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="imagenet100"):
        source_info("imagenet100:imagenet100", "train")


@pytest.mark.parametrize("name", NAMES)
def test_flagfile_dataset_and_split_exist_offline(name, tmp_path):
    """The flagfile's split is one its builder declares, checked with no data and no network (an empty data_dir)."""
    cfg = parse(name)
    if cfg.dataset.startswith("folder:"):  # a path on the user's machine: one line when it is not there
        with pytest.raises(ValueError, match="does not exist or is not a directory"):
            source_info(cfg.dataset, cfg.split)
        folder = os.path.join(DATA, cfg.dataset.rsplit("/", 1)[-1])
        if os.path.isdir(folder):  # the ledger's copy, where this machine has it: the split is there
            assert source_info(f"folder:{folder}", cfg.split).num_examples
        return
    if cfg.dataset == "imagenet100":  # valid split, then the one error for unprepared ImageNet
        with pytest.raises(FileNotFoundError, match="not prepared"):
            source_info(cfg.dataset, cfg.split, data_dir=str(tmp_path))
    else:  # valid split, then the not-prepared error; the offline description lists the split
        with pytest.raises(FileNotFoundError, match="not prepared"):
            source_info(cfg.dataset, cfg.split, data_dir=str(tmp_path))
        info = tfds_source.info(cfg.dataset, cfg.split, data_dir=str(tmp_path), require_prepared=False)
        assert info.num_examples is None and set(cfg.split.split("+")) <= set(info.splits)


def test_no_flags_give_trainconfigs_defaults_and_every_setting_is_a_flag():
    """Defaults are written once, in TrainConfig and AugmentConfig: no flags build exactly TrainConfig()."""
    values = train_flags()
    values(["augself-train"])
    cfg = config_from_flags(values)
    default = TrainConfig()
    for cls, instance in ((TrainConfig, default), (ModelConfig, default.model), (AugmentConfig, default.augment)):
        for field in flag_fields(cls):
            assert field.name in values, f"the setting {field.name} has no flag"
            flag_default = getattr(instance, field.name)
            if field.metadata["text"] is not None:  # a value written as one string flag (--augself=crop,color)
                flag_default = field.metadata["text"](flag_default)
            assert values[field.name].default == flag_default, field.name
            assert values[field.name].help.endswith(help_text(field)), field.name  # enums prefix <choices>
    assert cfg == dataclasses.replace(default, model=dataclasses.replace(
        default.model, method_options={name: None for name in method_options()},
        objective_options={name: None for name in objective_options()}))
    assert (cfg.model.backbone, cfg.model.width, cfg.epochs, cfg.augment.image_size) == ("resnet18_cifar", 0.125, 10,
                                                                                           32)
    assert cfg.augment.probabilities == AugmentConfig().probabilities  # the registry's declared defaults


def test_the_program_defines_the_librarys_flags():
    from augself_tf import train as train_program

    library = set(train_flags())
    program = {f.name for f in train_program.FLAGS.get_key_flags_for_module(train_program.PROGRAM)}
    assert library == program


def test_flag_values_are_validated_where_the_fields_declare_it():
    for argv, message in [
        (["--batch_size=0"], "--batch_size must be positive, got 0"),
        (["--epochs=-1"], "--epochs must be positive, got -1"),
        (["--image_size=0"], "image_size must be a positive int, got 0"),
        (["--crop_min_scale=0"], "0 < crop_min_scale <= crop_max_scale <= 1"),
        (["--color_strength=-1"], "color_strength must be a finite number >= 0"),
        (["--flip_prob=1.5"], "flip_prob must be a probability in [0, 1], got 1.5"),
        (["--augself=crop,hue"], "unknown AugSelf augmentation 'hue'"),
        (["--condition=hue"], "unknown descriptor 'hue' for --condition"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_argv(argv)
    with pytest.raises(absl_flags.IllegalFlagValueError):
        parse_argv(["--temperature=warm"])  # a method option's flag takes its declared kind


#: Settings added after the snapshot was written: a flagfile of the snapshot leaves each at its default, which is
#: what the code before it did, so it is left out of the comparison when (and only when) it holds that default.
NEWER_SETTINGS = ("warmup_epochs", "weight_decay_exclude", "optimizer", "weight_decay_end", "clip_grad",
                  "patch_size", "pos_embed", "drop_path", "stop_grad_conv1")


#: Method options added after it (MoCo v3's), left out when unset.
NEWER_METHOD_OPTIONS = ("moco_momentum", "momentum_cosine", "asymmetric_views")


def _drop_newer_defaults(record: dict) -> None:
    defaults = {f.name: f.default for f in [*flag_fields(TrainConfig), *flag_fields(ModelConfig)]}
    for name in NEWER_SETTINGS:
        if name in record and record[name] == defaults[name]:
            del record[name]
    options = record.get("method_options", {})
    for name in NEWER_METHOD_OPTIONS:
        if name in options and options[name] is None:
            del options[name]


def _as_before(cfg: TrainConfig) -> dict:
    """What tests/snapshots/flagfile_configs.json recorded for a config, in the recording's terms: the config
    with AugmentConfig's former fields (jitter_strength, crop_scale, one field per probability), the objectives'
    options among the method's, the method's effective options, the HParams columns and the blur kernel."""
    record = dataclasses.asdict(dataclasses.replace(cfg, augment=None, on_step=None))
    del record["on_step"]
    record.update(record.pop("model"), augself=list(cfg.model.augself_names))  # the model's fields were TrainConfig's
    record["method_options"].update(record.pop("objective_options"))  # the objectives' were recorded among them
    a = cfg.augment
    record["augment"] = {
        "image_size": a.image_size, "crop_scale": a.crop_scale, "crop_ratio": a.crop_ratio,
        "jitter_strength": a.jitter_strength, "blur_sigma": a.blur_sigma, "probabilities": [],
        **{k: a.probability(k) for k in ("flip_prob", "jitter_prob", "gray_prob", "blur_prob", "rotation_prob",
                                         "solarize_prob")},
    }
    effective = {f.name: f.default for f in flag_fields(METHODS[cfg.model.method].Options)}
    effective.update({k: v for k, v in cfg.model.method_options.items() if v is not None and k in effective})
    hparams = run_hparams(cfg)
    _drop_newer_defaults(record)
    _drop_newer_defaults(hparams)
    return json.loads(json.dumps({"config": record, "method_kwargs": effective, "hparams": hparams,
                                  "blur_kernel_size": a.blur_kernel_size}))


def test_every_flagfile_parses_to_the_config_it_did_before_settings_were_declared_once():
    """The snapshot was written by the code before the settings rework (hand-written flags, jitter_strength and
    crop_scale fields, a field per probability): every value a run reads must be the same, bit for bit."""
    with open(os.path.join(ROOT, "tests", "snapshots", "flagfile_configs.json")) as f:
        snapshot = json.load(f)
    # Flagfiles of settings the old code did not have cannot be in its snapshot: each is named here instead.
    newer = {"stl10_simclr_stl", "stl10_simsiam_stl",  # STL (--stl_weight)
             "cifar10_equimod_simclr", "cifar10_equimod_byol",  # EquiMod (--equimod_weight)
             *(f"imagenet_{m}{e}" for m in ("simclr", "simsiam") for e in ("", "_essl")),  # E-SSL's rows
             "imagenet_mocov3_vit_small", "imagenet100_mocov3_vit_small_augself", "tiny_mocov3_vit_pico_augself",
             "imagenet_dino_vit_small", "imagenet_dino_resnet50", "tiny_dino_vit_pico", "tiny_dino_vit_pico_augself"}
    assert set(snapshot) == {"(no flags)", *(n + ".cfg" for n in NAMES if n not in newer)}
    defaults = _as_before(parse_argv([]))
    for name, before in snapshot.items():
        now = _as_before(parse_argv([]) if name == "(no flags)" else parse(name[: -len(".cfg")]))
        # A setting added since the recording (--warmup_epochs, say) is not in it: every run recorded reads it at
        # its default, the value that leaves the run as it was; it is then compared no further.
        for part in ("config", "hparams"):
            for key in set(now[part]) - set(before[part]):
                assert now[part].pop(key) == defaults[part][key], (name, key)
        options, options_before = now["config"]["method_options"], before["config"]["method_options"]
        for key in set(options) - set(options_before):  # an option flag added since (--equimod_control): unset
            assert options.pop(key) == defaults["config"]["method_options"][key], (name, key)
        # The old HParams column rebuilt s as jitter_strength[0] / 0.4 (1.5000000000000002 for s = 1.5); the
        # column is now the flag's value itself.
        assert now["hparams"].pop("color_strength") == pytest.approx(before["hparams"].pop("color_strength"),
                                                                     rel=1e-15, abs=0), name
        assert now == before, name


@pytest.mark.parametrize("name", NAMES)
def test_flagfiles_normalise_with_the_reference_codes_statistics(name):
    """STL10 runs: (0.43, 0.42, 0.39)/(0.27, 0.26, 0.27); ImageNet100 runs: ImageNet's (the reference's Normalize);
    EquiMod's CIFAR10 runs: its code's (0.4914, 0.4822, 0.4465)/(0.247, 0.243, 0.261)."""
    from augself_tf.data.source_base import IMAGENET_MEAN, IMAGENET_STD, STL10_MEAN, STL10_STD

    expected = (STL10_MEAN, STL10_STD) if name.startswith("stl10") else (IMAGENET_MEAN, IMAGENET_STD)
    if name.startswith("cifar10_"):
        expected = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
    assert parse(name).model.input_statistics((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)) == expected
