"""Evaluating what a run trained: the paper's evaluation suite with its cache and report
(`runner`, `suite_report`), and an Orbax checkpoint step as a Hugging Face directory (`export`;
the base model from the run record, `trainer.run_record`). Scoring is the trainer's
(`trainer.scoring`: pass@k through the exchange and its workers); the command is `cli/eval.py`."""
