"""Scoring a model: pass@1 over k samples and unbiased pass@k through the exchange and its
workers (`scoring`, also the trainer's in-loop validation), the paper's evaluation suite with its
cache and report (`runner`), and an Orbax checkpoint step as a Hugging Face directory (`export`).
Nothing here reads a training config's trainer keys; the command line is `cli/eval.py`."""
