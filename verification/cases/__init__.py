"""The limiting cases of MATH.md §7 as registered checks, one module per case.

Each module registers checks with :func:`verification.registry.register`; importing it is enough.
"""
