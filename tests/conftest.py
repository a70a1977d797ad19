"""Test setup: CPU only, float32 matmuls at full precision, no hub access; one warm-started base
model for all pytest-xdist workers of a run (`make test` runs two)."""

import fcntl
import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# 8 fake CPU devices for the sharding tests; must be set before jax is imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
  ).strip()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One persistent XLA compilation cache for the workers and every trainer process they start: a
# config's steps compile once and later processes load them (the kill -9 resume tests start five
# trainers). A size limit turns on JAX's file locks between concurrent writers.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(
    tempfile.gettempdir(), f"prorl_jax-test-xla-cache-{os.getuid()}"
  )
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(4 << 30))

import jax  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Property tests draw the same examples on every run (a regression is caught every time, not one
# run in ten), after the `@example`s each test keeps; HYPOTHESIS_PROFILE=explore draws new ones.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

jax.config.update("jax_default_matmul_precision", "highest")
# The persistent cache is for the trainer and worker processes the tests start (they load what
# an earlier one compiled). The test processes compile for themselves: an executable with
# tensor-parallel collectives loaded back from the cache aborts jaxlib 0.10.2's CPU client now
# and then (tests/packing_test.py's (2, 2, 2) mesh: 1 run in 4 with a warm cache, never cold).
jax.config.update("jax_enable_compilation_cache", False)


@pytest.fixture(scope="session")
def base(tmp_path_factory):
  """The demo's tiny base model with a short (60-step) warm start, shared by the loop tests (and
  built once for all xdist workers of a run: the first builds it, the others wait on the lock)."""
  from prorl_jax.demo import warm_start

  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    root = root.parent  # the run's directory, above each worker's own
  with open(root / "base.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    return warm_start.build(str(root / "base"), steps=60)
