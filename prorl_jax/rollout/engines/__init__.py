"""TODO package docstring prorl_jax/rollout/engines"""
