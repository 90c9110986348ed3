"""Real distributed jobs that misbehave on purpose: `rankscope demo` and the test suite use them."""
