"""Core files: their notes, backtraces with gdb and pystack, and what a crash means (docs/core.md)."""
