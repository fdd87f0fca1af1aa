"""The limiting cases of docs/theory.md §7 as registered checks, one module per case.

Each module registers checks with :func:`symattn.verification.registry.register`; importing it is enough.
"""
