"""Command-line verbs, one module per verb group. Each stays thin: parse, call, render."""
