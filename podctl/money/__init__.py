"""Money: prices, what a slice and a run cost, budgets."""
