"""The recipe's math as pure array functions, no model and no config: advantage estimators
(`advantages`), the losses and their aggregation (`losses`), score shaping and the
dynamic-sampling filter (`shaping`). docs/algorithm.md gives each equation with its config key.

The choices of the algorithm's keys live here, once: the functions dispatch on them and the config
validates against them (this module imports nothing, so the config does not load JAX)."""

ESTIMATORS = ("reinforce_pp_baseline", "reinforce_pp", "grpo", "rloo", "dr_grpo")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL_KINDS = ("k1", "k2", "k3")
IS_MODES = ("none", "tis", "icepop")
