"""Training and evaluation data: prompt sources in the verl row schema and their blends
(`prompts`), what a config trains and validates on (`sources`), the dataset readers (`hub`), the
training mix and the evaluation suite that `prorl-prepare` builds from the public datasets (`mix`,
`suite`, `solution_answers`), and the verifier audit of a prepared directory (`audit`)."""
