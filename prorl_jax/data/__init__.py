"""TODO package docstring prorl_jax/data"""
