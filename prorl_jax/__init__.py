"""prorl_jax: ProRL v2 (prolonged RL for reasoning LLMs) in JAX."""

__version__ = "0.1.0"
