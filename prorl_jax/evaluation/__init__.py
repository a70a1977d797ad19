"""TODO package docstring prorl_jax/evaluation"""
