"""`rankscope why`: one verdict from every signal of a job (docs/why.md)."""
