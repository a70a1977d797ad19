"""The RL trainer: what a run fixes once (`setup`), the loop and its checkpointed state (`loop`,
`loop_state`, `checkpoint`, `run_record`), one step's collection and update (`update`: requests,
results, dynamic sampling; `batch`: results to the padded train batch and its advantages), the
jitted update itself (`train_step`), metrics, pre-flight checks and preemption handling."""
