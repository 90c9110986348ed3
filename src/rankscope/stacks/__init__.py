"""Stacks of every rank: collect (py-spy), group, explain, render."""
