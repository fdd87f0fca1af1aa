r"""``symattn demo``: a one-minute tour (Hermite expansion, theory vs Monte Carlo, a figure)."""

from __future__ import annotations

from .common import EXIT_OK, add_command, finish_command, output_folder, print_json, with_provenance

HELP = "short tour: Hermite expansion, theory vs Monte Carlo table, a figure"
DESCRIPTION = """
    A one-minute tour of symattn: the Hermite expansion of tanh (a_k, a1, nu, d), the
    linear-regression error E_LR(gamma) from the deterministic equivalent next to a small
    exact Monte Carlo (n = 500) with standard errors for c in {0.5, 1}, the same for
    attention E_A (with the finite-p diagonal d_n), and a figure DIR/demo_linear.png of theory
    curves vs Monte Carlo points. DIR is created (and checked to be writable) before any work.
    The --json summary carries a "provenance" object (seed, parameters, versions, timestamp)."""
EXAMPLES = ["symattn demo", "symattn demo --out /tmp/demo --json"]


def add_parser(subparsers):
    p = add_command(subparsers, "demo", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("--out", default="symattn-out", metavar="DIR",
                   help="directory for the figure (default symattn-out)")
    return finish_command(p, run)


def run(args) -> int:
    from ..figures import demo

    output_folder(args.out, "out")  # an existing file, /proc/x, ...: refused before a minute of work
    summary = demo.run(out=args.out, echo=None if args.json else print)
    if args.json:
        params = {"command": "demo", "out": args.out,
                  **{k: summary[k] for k in ("activation", "geometry", "n", "draws") if k in summary}}
        print_json(with_provenance(summary, params, seed=summary.get("seed"), backend="numpy", dtype="float64"))
    return EXIT_OK
