"""The command lines, one module per command (`eval`, `prepare`, `export`, `plot`, `config`,
`audit`, `worker`, `layout`), their flags (`flags`: absl, one `FlagValues` per command that takes
no config) and their one error path (`errors`). Nothing in the package imports them; the trainer's
command is `prorl_jax/main.py` (`python -m prorl_jax.main`)."""
