"""Decisions over runs and slices: gc, maintenance, preflight, the planner, plots, comparisons."""
