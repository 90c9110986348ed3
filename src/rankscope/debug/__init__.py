"""Interactive debugging of one rank: ``rankscope.breakpoint()``, ``rankscope.ForkedPdb``, ``rankscope attach``.

- :mod:`.debugger`: the breakpoint and the pdb class (imported inside training processes).
- :mod:`.terminal`: which terminal a stopped rank may use.
- :mod:`.rendezvous`: where the other ranks wait, and how they are released.
- :mod:`.remote`: pdb on a socket with a token, for a rank without a terminal (rank 0 repeats its attach line).
- :mod:`.client`: the other end of that socket (``rankscope attach``), and ``--pid`` (PEP 768).

See docs/debug.md.
"""
