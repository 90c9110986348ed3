"""`rankscope launch`: ready-to-run command lines for a script on N nodes x G GPUs (pure builders)."""
