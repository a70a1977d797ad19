"""The command lines, one module per command (`eval`, `prepare`, `export`, `plot`, `config`) and
their one error path (`errors`). Nothing in the package imports them; the trainer's command is
`prorl_jax/main.py` (`python -m prorl_jax.main`)."""
