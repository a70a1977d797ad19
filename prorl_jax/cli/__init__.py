"""TODO package docstring prorl_jax/cli"""
