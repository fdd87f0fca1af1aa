r"""``symattn demo``: a one-minute tour (Hermite expansion, theory vs Monte Carlo, a figure)."""

from __future__ import annotations

from .common import EXIT_OK, add_command, finish_command, print_json

HELP = "short tour: Hermite expansion, theory vs Monte Carlo table, a figure"
DESCRIPTION = """
    A one-minute tour of symattn: the Hermite expansion of tanh (a_k, a1, nu, d), the
    linear-regression error E_LR(gamma) from the deterministic equivalent next to a small
    exact Monte Carlo (n = 500) with standard errors for c in {0.5, 1}, the same for
    attention E_A (with the finite-p diagonal d_n), and a figure DIR/demo_linear.png of theory
    curves vs Monte Carlo points."""
EXAMPLES = ["symattn demo", "symattn demo --out /tmp/demo --json"]


def add_parser(subparsers):
    p = add_command(subparsers, "demo", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--out", default="symattn-out", metavar="DIR",
                   help="directory for the figure (default symattn-out)")
    return finish_command(p, run)


def run(args) -> int:
    from ..figures import demo

    summary = demo.run(out=args.out, echo=None if args.json else print)
    if args.json:
        print_json(summary)
    return EXIT_OK
