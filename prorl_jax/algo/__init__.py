"""The recipe's math as pure array functions, no model and no config: advantage estimators
(`advantages`), the losses and their aggregation (`losses`), score shaping and the
dynamic-sampling filter (`shaping`). docs/algorithm.md gives each equation with its config key."""
