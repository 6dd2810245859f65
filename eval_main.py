"""Evaluate exported AugSelf backbones (SavedModels) with the paper's transfer protocols.

Examples:

  python eval_main.py --saved_model runs/simsiam/saved_model,runs/augself/saved_model \\
      --protocol linear --dataset cifar10 --image_size 96
  python eval_main.py --saved_model runs/augself/saved_model --protocol all --dataset shapes --max_examples 500
  python eval_main.py --saved_model m --protocol fewshot --dataset fc100 --fewshot_shots 1,5
  python eval_main.py --saved_model m --protocol linear --dataset shapes --label_key color

Writes one JSON record per (model, protocol, dataset) to --output (merged with records already there),
pictures beside it, and prints a markdown table with one column per model and the paper's figures.
Bad input (missing model, unusable signature, dataset unfit for the protocol) ends with one error line
on stderr and exit status 2. Progress goes to stderr: one line per regularisation sweep (every swept value
with --verbose) and a bar for a long feature extraction or fine-tuning; --quiet prints none.

The protocols, their --<protocol>_<option> flags and the set run by --protocol all come from the registry
in augself_tf/evaluation/protocols (docs/architecture.md, "Evaluation protocols").
"""

# The program is augself_tf.evaluate (installed as `augself-eval`); this file runs it from a checkout.
from augself_tf.evaluate import cli

if __name__ == "__main__":
    cli()
