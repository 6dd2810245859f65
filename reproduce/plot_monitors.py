"""Plot the online monitors (TensorBoard ``monitor/*`` scalars) of several runs against the training step.

    python -m reproduce.plot_monitors --out docs/img/monitors_default.png \\
        runs/moco_augself_crop_color runs/moco

Each argument is a model_dir (or its tensorboard/ directory); the legend uses the directory's name, or
``NAME=DIR`` to choose it. One panel per monitor; ``monitor/seconds`` (the monitors' own cost) is left out.
Prints the values as a markdown table too (first and last point of each run), for closing notes and docs.
"""

from __future__ import annotations

import argparse
import os
import sys

from augself_tf.startup import import_tensorflow_quietly


def read_monitors(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the ``monitor/*`` scalars in a run's event files, sorted by step."""
    import_tensorflow_quietly()
    from augself_tf.runtime.tensorboard import last_per_step, read_scalars, tensorboard_dir

    events = read_scalars(tensorboard_dir(run_dir), lambda tag: tag.startswith("monitor/") and tag != "monitor/seconds")
    return {tag: last_per_step(points) for tag, points in events.items()}  # a resumed run rewrites a step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="model_dir or NAME=model_dir, one line each")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--title", default="Online monitors during pretraining")
    args = parser.parse_args(argv)

    runs = {}
    for spec in args.runs:
        name, _, path = spec.rpartition("=") if "=" in spec else (os.path.basename(os.path.normpath(spec)), "", spec)
        runs[name] = read_monitors(path)
        if not runs[name]:
            print(f"plot_monitors: error: no monitor/* scalars under {path}", file=sys.stderr)
            return 2
    tags = sorted({tag for series in runs.values() for tag in series})

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tags), figsize=(4.2 * len(tags), 3.4), squeeze=False)
    for ax, tag in zip(axes[0], tags, strict=True):
        for name, series in runs.items():
            if tag in series:
                steps, values = zip(*series[tag], strict=True)
                ax.plot(steps, values, marker="o", markersize=3, label=name)
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)

    print("| run | monitor | first (step) | last (step) |\n|---|---|---|---|")
    for name, series in runs.items():
        for tag in tags:
            if tag in series:
                (s0, v0), (s1, v1) = series[tag][0], series[tag][-1]
                print(f"| {name} | {tag} | {v0:.3f} ({s0}) | {v1:.3f} ({s1}) |")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
