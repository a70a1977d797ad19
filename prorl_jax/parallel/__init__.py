"""Meshes and logical-axis sharding rules (`sharding`), and the multi-host helpers that
initialise JAX's distributed runtime and move host data onto the global mesh (`dist`)."""
