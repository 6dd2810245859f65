"""Sweeps of the paper's ablations: pretrain one model per flagfile, evaluate each, one table and one plot.

    # λ ∈ {0.5, 1, 2} (AugSelf{color}) — the paper's Table 8-style ablation
    python -m reproduce.sweep --out_dir runs/sweep_lambda \\
        flags/stl10_simsiam_color_lambda0.5.cfg flags/stl10_simsiam_color_lambda1.cfg \\
        flags/stl10_simsiam_color_lambda2.cfg flags/stl10_simsiam.cfg
    # colour strength s ∈ {0.5, 1, 1.5, 2}, with and without AugSelf — Figure 1
    python -m reproduce.sweep --out_dir runs/sweep_color --eval_dataset oxford_flowers102 \\
        flags/stl10_color0.5_simsiam.cfg flags/stl10_color0.5_simsiam_augself.cfg \\
        flags/stl10_simsiam.cfg flags/stl10_simsiam_augself.cfg ...
    # toy scale (seconds per run): shapes data, a tiny ResNet, 2 steps
    python -m reproduce.sweep --quick --out_dir /tmp/sweep flags/stl10_color0.5_simsiam.cfg ...

For each flagfile: ``train_main.py --flagfile=F --model_dir=OUT/runs/NAME [--train_arg ...]`` (NAME = the
flagfile's name; later flags override the flagfile's, so ``--train_arg=--max_steps=100`` shortens a run;
re-running resumes from train_main's checkpoints; ``--jobs N`` runs N at once; logs in
``OUT/runs/NAME.log``), then one ``eval_main.py`` call on every
export with ``--eval_protocols`` (default ``linear,colorinfo``). Writes ``OUT/sweep.md`` (one row per run:
method, AugSelf set, λ, s, one column per eval record) and ``OUT/sweep.png`` (each metric against the swept
parameter — λ or s, whichever varies; ``--x`` forces one — one line with AugSelf, one without; runs without
AugSelf have no λ and are drawn as a horizontal line when λ is swept), and ``OUT/sweep.json`` (the rows).
Every run's settings and its eval results also reach TensorBoard (``eval_main --log_to=auto``):
``tensorboard --logdir OUT/runs`` shows the sweep as one table in the HParams tab.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from reproduce import ledger

# Toy scale: the embedded shapes data, a 1/16-width CIFAR ResNet-18, two steps.
QUICK_TRAIN = [
    "--dataset=shapes", "--split=train", "--backbone=resnet18_cifar", "--width=0.0625", "--image_size=32",
    "--batch_size=16", "--epochs=1", "--max_steps=2", "--projector_dim=64", "--predictor_hidden=32",
    "--log_every=1",
]
QUICK_EVAL = [
    "--dataset=shapes", "--image_size=32", "--max_examples=200", "--linear_regs=3", "--linear_max_iter=200",
    "--colorinfo_steps=40", "--colorinfo_seeds=1", "--colorinfo_eval_batches=2", "--colorinfo_batch=32",
]


def run_params(flagfile: str, train_args: list[str]) -> dict:
    """Method, AugSelf set, λ and s of one run: the TrainConfig train_main builds from the flagfile and the
    overrides (parsed by the library, so the defaults are TrainConfig's)."""
    from absl import flags

    from augself_tf.training.train_config import config_from_flags, define_train_flags

    values = flags.FlagValues()
    define_train_flags(values, "sweep")
    values(["sweep", f"--flagfile={flagfile}", *train_args])
    cfg = config_from_flags(values)
    return {
        "name": os.path.splitext(os.path.basename(flagfile))[0],
        "flagfile": flagfile,
        "method": cfg.model.method,
        "augself": ",".join(cfg.model.augself_names) or "none",
        "lambda": cfg.model.augself_weight if cfg.model.augself else None,
        "color_strength": cfg.augment.color_strength,
    }


def sh(cmds: list[list[str]], log_paths: list[str], jobs: int = 1) -> None:
    """Run commands, at most ``jobs`` at a time, each appending its output to its log; raise with the
    log's tail if one fails."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    pending = list(zip(cmds, log_paths, strict=True))
    running: list[tuple[subprocess.Popen, list[str], str, object]] = []
    while pending or running:
        while pending and len(running) < max(1, jobs):
            cmd, log_path = pending.pop(0)
            print("$ " + " ".join(cmd), flush=True)
            f = open(log_path, "a")  # noqa: SIM115 - closed when the process ends
            running.append((subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ledger.ROOT, env=env), cmd,
                            log_path, f))
        proc, cmd, log_path, f = running.pop(0)
        code = proc.wait()
        f.close()
        if code != 0:
            for other, *_rest, g in running:
                other.wait()
                g.close()
            with open(log_path) as fh:
                tail = fh.read()[-3000:]
            raise SystemExit(f"sweep: command failed ({code}): {' '.join(cmd)}\n{tail}")


def column(record: dict) -> str:
    """Table column of an eval record: protocol[/metric]."""
    return f"{record['protocol']} ({record['metric']})"


def sweep_axis(rows: list[dict], requested: str = "auto") -> str:
    """``color_strength`` if it varies over the runs (or is requested), else ``lambda``."""
    if requested != "auto":
        return requested
    return "color_strength" if len({r["color_strength"] for r in rows}) > 1 else "lambda"


def markdown(rows: list[dict], columns: list[str]) -> str:
    """One row per run, one column per eval metric (value ± ci95 when there is one)."""
    head = ["run", "method", "AugSelf", "λ", "s", *columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["name"], r["method"], r["augself"], "—" if r["lambda"] is None else f"{r['lambda']:g}",
                 f"{r['color_strength']:g}"]
        for c in columns:
            v = r["metrics"].get(c)
            if v is None:
                cells.append("—")
            else:
                cells.append(f"{v[0]:.3f}" + (f" ± {v[1]:.3f}" if v[1] else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], columns: list[str], axis: str, path: str) -> str:
    """Each metric against ``axis``, with and without AugSelf (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(columns))
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    label = {"lambda": "λ (AugSelf weight)", "color_strength": "colour-jitter strength s"}[axis]
    for ax, c in zip(axes[0], columns, strict=False):
        for with_aug, style in ((False, "o--"), (True, "s-")):
            pts = [(r[axis], *r["metrics"][c]) for r in rows
                   if c in r["metrics"] and (r["augself"] != "none") == with_aug]
            name = "with AugSelf" if with_aug else "without AugSelf"
            xs = [p for p in pts if p[0] is not None]
            if xs:
                xs.sort()
                ax.errorbar([p[0] for p in xs], [p[1] for p in xs], yerr=[p[2] or 0 for p in xs], fmt=style,
                            capsize=3, label=name)
            elif pts:  # no value on this axis (baseline in a λ sweep): a horizontal line
                y = sum(p[1] for p in pts) / len(pts)
                ax.axhline(y, linestyle=":", color="gray", label=name)
        ax.set_xlabel(label)
        ax.set_title(c, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("flagfiles", nargs="+", help="train_main flagfiles, one run each")
    p.add_argument("--out_dir", required=True, help="where runs, eval results, table and plot go")
    p.add_argument("--train_arg", action="append", default=[], help="extra train_main flag (repeatable)")
    p.add_argument("--eval_arg", action="append", default=[], help="extra eval_main flag (repeatable)")
    p.add_argument("--eval_dataset", default=None, help="eval_main --dataset (default shapes)")
    p.add_argument("--eval_protocols", default="linear,colorinfo", help="eval_main --protocol")
    p.add_argument("--x", choices=["auto", "lambda", "color_strength"], default="auto", help="plot axis")
    p.add_argument("--quick", action="store_true", help="toy scale: shapes, tiny ResNet, 2 steps")
    p.add_argument("--jobs", type=int, default=1, help="pretraining runs in parallel")
    a = p.parse_args(argv)
    error = ledger.checkout_error("sweep", "run `python -m reproduce.sweep` from its root",
                                  ("train_main.py", "eval_main.py"))
    if error:
        raise SystemExit(error)
    for f in a.flagfiles:
        if not os.path.isfile(f):
            raise SystemExit(f"sweep: flagfile not found: {f}")
    out = os.path.abspath(a.out_dir)
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    train_args = (QUICK_TRAIN if a.quick else []) + a.train_arg
    eval_args = (QUICK_EVAL if a.quick else []) + a.eval_arg
    if a.eval_dataset:
        eval_args.append(f"--dataset={a.eval_dataset}")
    log = os.path.join(out, "sweep.log")
    rows = [run_params(os.path.abspath(f), train_args) for f in a.flagfiles]
    if len({r["name"] for r in rows}) != len(rows):
        raise SystemExit("sweep: two flagfiles have the same name")
    start = time.time()
    for r in rows:
        r["model_dir"] = os.path.join(out, "runs", r["name"])
    sh([[sys.executable, "train_main.py", f"--flagfile={r['flagfile']}", f"--model_dir={r['model_dir']}",
         *train_args] for r in rows], [os.path.join(out, "runs", f"{r['name']}.log") for r in rows], a.jobs)
    results = os.path.join(out, "eval.json")
    if os.path.exists(results):
        os.remove(results)  # records of earlier sweeps would mix in
    models = ",".join(os.path.join(r["model_dir"], "saved_model") for r in rows)
    sh([[sys.executable, "eval_main.py", f"--saved_model={models}", f"--protocol={a.eval_protocols}",
         f"--output={results}", "--log_to=auto", *eval_args]], [log])
    with open(results) as f:
        records = json.load(f)
    records = records["records"] if isinstance(records, dict) else records
    columns: list[str] = []
    for r in rows:
        r["metrics"] = {}
        for rec in records:
            if rec["model"] == r["name"]:
                c = column(rec)
                r["metrics"][c] = (rec["value"], rec.get("ci95"))
                if c not in columns:
                    columns.append(c)
    axis = sweep_axis(rows, a.x)
    table = markdown(rows, columns)
    with open(os.path.join(out, "sweep.md"), "w") as f:
        f.write(f"# Sweep over {axis}\n\n{table}\n\nflagfiles: {' '.join(a.flagfiles)}\n"
                f"train overrides: {' '.join(train_args) or 'none'}\neval: {a.eval_protocols} "
                f"{' '.join(eval_args)}\n")
    plot(rows, columns, axis, os.path.join(out, "sweep.png"))
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump({"axis": axis, "rows": rows, "seconds": time.time() - start}, f, indent=1, default=str)
    print(table)
    print(f"sweep: wrote {out}/sweep.md, sweep.png, sweep.json ({time.time() - start:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
