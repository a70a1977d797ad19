"""The RL trainer: what a run fixes once (`setup`), its start, loop and end (`start`, `loop`),
its checkpointed state and record (`loop_state`, `checkpoint`, `run_record`), one step's
collection (`collect`: requests, results, dynamic sampling) and update (`update`; `batch`: results
to the padded train batch and its advantages; the jitted `train_step`), pass@k scoring and
in-loop validation (`scoring`, `versions`), metrics, pre-flight checks and preemption handling."""
