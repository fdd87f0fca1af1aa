r"""The token-law flags of ``symattn solve`` and ``symattn simulate``: --ar1, --autocorr, --markov (docs/theory.md §15)."""

from __future__ import annotations

import argparse

from .common import number


def add_tokens_args(parser: argparse.ArgumentParser) -> None:
    """--ar1 RHO | --autocorr FILE (mutually exclusive) and --markov Q.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> add_tokens_args(p)
    >>> vars(p.parse_args(["--ar1", "0.5", "--markov", "0.9"]))
    {'ar1': 0.5, 'autocorr': None, 'markov': 0.9}
    """
    g = parser.add_argument_group("time-correlated tokens (docs/theory.md §15)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--ar1", type=number, default=None, metavar="RHO",
                   help="AR(1) tokens: E[z_t z_s^T] = RHO^|t-s| I, 0 <= RHO < 1")
    x.add_argument("--autocorr", default=None, metavar="FILE",
                   help="tokens with the autocorrelation r_1..r_L stored as a 1-d .npy file (positive definite: "
                        "1 + 2 sum_k r_k cos k w > 0)")
    g.add_argument("--markov", type=number, default=None, metavar="Q",
                   help="Markov labels: a stationary +-1 chain with persistence P(y_t+1 = y_t) = Q, 0 < Q < 1 "
                        "(default: iid balanced labels)")


def tokens_from_args(args):
    """The :class:`symattn.tokens.TokenLaw` of the flags, or None for the paper's iid law.

    Examples
    --------
    >>> ns = argparse.Namespace(ar1=0.5, autocorr=None, markov=None)
    >>> tokens_from_args(ns)
    TokenLaw(ar1=0.5)
    >>> tokens_from_args(argparse.Namespace(ar1=None, autocorr=None, markov=None)) is None
    True
    """
    from ..tokens import TokenLaw

    if args.ar1 is None and args.autocorr is None and args.markov is None:
        return None
    return TokenLaw(ar1=args.ar1, autocorr=args.autocorr, markov=args.markov)


def tokens_parameters(law) -> dict:
    """The provenance entry of the law: ``{"tokens": law.as_dict()}``, or nothing for the paper's law.

    Examples
    --------
    >>> tokens_parameters(None), tokens_parameters(tokens_from_args(argparse.Namespace(ar1=0.5, autocorr=None,
    ...                                                                                  markov=None)))["tokens"]["ar1"]
    ({}, 0.5)
    """
    return {} if law is None else {"tokens": law.as_dict()}
