"""Step-by-step SymPy derivations of the systems symattn solves; ``python -m derivations.build``
writes docs/derivation.md (see :mod:`derivations.build`)."""
