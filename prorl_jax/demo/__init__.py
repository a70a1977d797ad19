"""The CPU demo: its procedural task and verifier (`chain_sum`), the tiny Qwen2 and tokenizer it
starts from (`tiny_base`), and the short supervised warm start that makes it learnable
(`warm_start`). `make demo` runs the real RL loop on them."""
