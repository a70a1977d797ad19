"""Rollouts across processes: the exchange a trainer and its workers share (`store`, `entries`,
`weights`, `queue`, `results`, `exchange`), the worker process (`worker`) and its engines
(`engines/`), where workers run (`layout`, `local`) and the log-prob probe that checks a worker's
engine against the trainer (`probe`). Nothing here imports JAX at module level: workers also run
in vLLM's environment."""
