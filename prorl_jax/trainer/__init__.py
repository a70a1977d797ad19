"""TODO package docstring prorl_jax/trainer"""
