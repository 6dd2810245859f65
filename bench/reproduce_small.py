"""CPU-scale reproduction of the paper's effect on real images, from pretraining to one side-by-side table.

    python bench/reproduce_small.py                 # everything (about an hour on 2 CPU cores)
    python bench/reproduce_small.py --quick         # a 2-minute smoke version of the same pipeline

Pretrains, with identical seeds and budgets, SimSiam and MoCo v2 with and without AugSelf{crop, color} on
tiny-imagenet-mini (64 px, the 70% train part of its fixed split), then evaluates each with eval_main.py:
linear on cifar10-mini, rotation and colour-permutation probes, localization on the held-out tiny-imagenet
boxes, 5-way 1/5-shot episodes on the held-out tiny-imagenet images, invariance; plus MoCo ± AugSelf on the
embedded `shapes` data with its colour, shape and box probes. Writes docs/results.md. Re-running resumes:
finished pretraining runs are skipped (train_main resumes from checkpoints) and evaluations are redone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.abspath(os.path.join(ROOT, "..", "shared", "data"))
TINY = f"folder:{DATA}/tiny-imagenet-mini"
CIFAR = f"folder:{DATA}/cifar10-mini"

PAIRS = [("simsiam", "none"), ("simsiam", "crop,color"), ("moco", "none"), ("moco", "crop,color")]


def run_name(method: str, augself: str, data: str) -> str:
    return f"{data}_{method}" + ("" if augself == "none" else "_augself")


def sh(cmd: list[str], log: str) -> float:
    """Runs a command, teeing its output into `log`; stops the reproduction if it fails."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    with open(log, "a") as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if proc.returncode:
        sys.exit(f"command failed (exit {proc.returncode}); see {log}")
    return time.time() - t0


def pretrain(args, out: str, log: str) -> dict[str, float]:
    times = {}
    common = ["--seed=0", "--log_every=20"]
    tiny = ["--dataset=" + TINY, "--split=train", "--backbone=resnet18", f"--width={args.width}",
            "--image_size=64", f"--batch_size={args.batch_size}", f"--epochs={args.epochs}"]
    shapes = ["--dataset=shapes", f"--epochs={args.shapes_epochs}"]
    jobs = [(m, a, "tiny", tiny) for m, a in PAIRS] + [(m, a, "shapes", shapes) for m, a in PAIRS if m == "moco"]
    for method, augself, data, extra in jobs:
        name = run_name(method, augself, data)
        cmd = [sys.executable, "train_main.py", f"--method={method}", f"--augself={augself}",
               f"--model_dir={out}/{name}", *common, *extra]
        if method == "moco":
            # The paper's 65536-key queue is 0.62x STL10's 105k images; a queue larger than these few thousand
            # images would be filled with stale keys of the very images it contrasts against.
            cmd.append(f"--queue_size={args.queue_size}")
        if args.max_steps:
            cmd.append(f"--max_steps={args.max_steps}")
        times[name] = sh(cmd, log)
    return times


def evaluate(args, out: str, log: str) -> tuple[list[str], float]:
    tiny_models = ",".join(f"{out}/{run_name(m, a, 'tiny')}/saved_model" for m, a in PAIRS)
    shapes_models = ",".join(f"{out}/{run_name('moco', a, 'shapes')}/saved_model" for a in ("none", "crop,color"))
    cap = [f"--max_examples={args.max_examples}"] if args.max_examples else []
    episodes = f"--fewshot_episodes={args.episodes}"
    evals = [
        [f"--saved_model={tiny_models}", "--protocol=linear", f"--dataset={CIFAR}", "--image_size=64", *cap],
        [f"--saved_model={tiny_models}", "--protocol=colorperm,rotation,localization,invariance",
         f"--dataset={TINY}", "--image_size=64", *cap],
        [f"--saved_model={tiny_models}", "--protocol=fewshot", f"--dataset={TINY}", "--image_size=64",
         "--fewshot_queries=5", episodes],
        [f"--saved_model={shapes_models}", "--protocol=linear,localization,colorperm", "--dataset=shapes",
         "--image_size=32", *cap],
        [f"--saved_model={shapes_models}", "--protocol=linear", "--dataset=shapes", "--label_key=color",
         "--image_size=32", *cap],
    ]
    t = 0.0
    outputs = []
    for i, flags in enumerate(evals):
        # One file per call: eval_main merges records by (model, protocol, dataset), which would fold the
        # `label` and `color` probes of shapes into one.
        outputs.append(f"{out}/results_{i}.json")
        if os.path.exists(outputs[-1]):
            os.remove(outputs[-1])
        t += sh([sys.executable, "eval_main.py", *flags, f"--output={outputs[-1]}", "--quiet"], log)
    return outputs, t


def table(results: list[str]) -> str:
    records = []
    for path in results:
        with open(path) as f:
            records.extend(json.load(f))
    models: list[str] = []
    rows: dict[tuple, dict] = {}
    for r in records:
        if r["model"] not in models:
            models.append(r["model"])
        label = r.get("settings", {}).get("label_key", "label")
        key = (r["dataset"].replace(DATA + "/", ""), r["protocol"] + ("" if label == "label" else f" ({label})"),
               r["metric"])
        ci = f" ± {r['ci95']:.2g}" if r.get("ci95") is not None else ""
        rows.setdefault(key, {})[r["model"]] = f"{r['value']:.4g}{ci}"
    lines = ["| dataset | protocol | metric | " + " | ".join(models) + " |",
             "|---|---|---|" + "---|" * len(models)]
    for (ds, proto, metric), vals in rows.items():
        lines.append(f"| {ds} | {proto} | {metric} | " + " | ".join(vals.get(m, "") for m in models) + " |")
    return "\n".join(lines)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import tensorflow as tf

    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, TensorFlow {tf.__version__}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "reproduce_small"))
    p.add_argument("--epochs", type=int, default=30, help="pretraining epochs on tiny-imagenet-mini")
    p.add_argument("--shapes_epochs", type=int, default=10)
    p.add_argument("--width", type=float, default=0.25)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--episodes", type=int, default=2000)
    p.add_argument("--queue_size", type=int, default=2048, help="MoCo queue (keys); ~0.6x the dataset")
    p.add_argument("--max_steps", type=int, default=None)
    p.add_argument("--max_examples", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="smoke version: 3 steps per run, tiny evaluations")
    p.add_argument("--write_docs", default=os.path.join(ROOT, "docs", "results.md"))
    args = p.parse_args()
    if args.quick:
        args.max_steps, args.max_examples, args.episodes, args.width = 3, 300, 50, 0.0625
        args.out = args.out + "_quick"
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "log.txt")
    t0 = time.time()
    train_times = pretrain(args, args.out, log)
    results, eval_time = evaluate(args, args.out, log)
    total = time.time() - t0
    md = table(results)
    print(md)
    cmd = "python bench/reproduce_small.py " + " ".join(sys.argv[1:])
    doc = [
        "## Small-scale reproduction (generated)",
        "",
        f"Command: `{cmd.strip()}`  ",
        f"Machine: {machine()}  ",
        f"Wall time: {total / 60:.1f} min (pretraining "
        + ", ".join(f"{k} {v / 60:.1f}" for k, v in train_times.items())
        + f" min; evaluation {eval_time / 60:.1f} min)  ",
        f"Settings: ResNet-18 width {args.width} at 64 px, batch {args.batch_size}, {args.epochs} epochs on "
        f"tiny-imagenet-mini (train split); shapes runs use train_main's defaults for {args.shapes_epochs} epochs; "
        f"MoCo queue {args.queue_size}.",
        "",
        md,
        "",
    ]
    if not args.quick:
        write_block(args.write_docs, "\n".join(doc))
        print(f"wrote {args.write_docs}")


BEGIN, END = "<!-- reproduce_small:begin -->", "<!-- reproduce_small:end -->"


def write_block(path: str, block: str) -> None:
    """Replaces the generated block of `path` (between the markers), keeping the hand-written rest."""
    text = open(path).read() if os.path.exists(path) else f"{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text = f"{BEGIN}\n{END}\n" + text
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1] if END in rest else ""
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{block}\n{END}{tail}")


if __name__ == "__main__":
    main()
