"""TODO package docstring prorl_jax/parallel"""
