"""``python -m symattn.cli.mc_grid``: the theory-vs-Monte-Carlo grid of Theorem 1 (an entry point).

The grid itself -- configurations, cells, the markdown report and the resumable CSV -- is
:mod:`symattn.verification.mc_grid`; this module only parses the command line and runs it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path

from ..errors import SymattnError, UsageError
from ..model import N_MAX
from ..verification import mc_grid as grid
from .common import SEED_MAX, Parser, integer, number


def main(argv=None) -> int:
    ap = Parser(prog="python -m symattn.cli.mc_grid", description=grid.__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=integer("n", 2, N_MAX), default=None, help="tokens n (default 2000; 500 with --quick)")
    ap.add_argument("--draws", type=integer("draws", 2, 10**6), default=None,
                    help="draws per configuration (default 6)")
    ap.add_argument("--quick", action="store_true",
                    help="small subset: n=500, 12 draws, tanh/relu, mu/aligned/rank2, c in {0.5, 2}, "
                         "tolerance max(3.5 se, 3%%)")
    ap.add_argument("--reduced", action="store_true",
                    help="only the (activation, geometry) pairs of REDUCED (12 pairs x c): every activation and "
                         "every geometry, for slow machines")
    ap.add_argument("--activations", nargs="+", default=None, help=f"default: {' '.join(grid.ACTIVATIONS)}")
    ap.add_argument("--geometries", nargs="+", default=None, choices=tuple(grid.geometries()),
                    help=f"default: all ({' '.join(grid.GEOMETRY_NAMES)})")
    ap.add_argument("--c", nargs="+", type=number, default=None, help="default: 0.5 1 2")
    ap.add_argument("--seed", type=integer("seed", 0, SEED_MAX), default=0, help="base seed (default 0)")
    ap.add_argument("--tol-se", type=number, default=None, help="k_se (default 3; 3.5 with --quick)")
    ap.add_argument("--tol-rel", type=number, default=None, help="k_rel (default 0.02; 0.03 with --quick)")
    ap.add_argument("--out", required=True, help="markdown report (its generated section is replaced)")
    ap.add_argument("--csv", default=None, help="CSV of every cell (default: OUT with suffix .csv)")
    ap.add_argument("--resume", action="store_true", help="reuse configurations already in the CSV")
    ap.add_argument("--confirm-draws", type=integer("confirm-draws", 0, 10**6), default=0,
                    help="re-measure a configuration with a failing cell with this many draws from the same seed "
                         "(the first draws are the original ones) and judge it on all of them (default 0: off)")
    ap.add_argument("--report-only", action="store_true",
                    help="with --resume: write the report from the configurations already in the CSV, simulate nothing")
    ap.add_argument("--backend", default="numpy", choices=("numpy", "torch"))
    ap.add_argument("--device", default=None)
    try:
        args = ap.parse_args(argv)
    except UsageError as exc:  # one line, no usage dump
        print(f"error: {exc}", file=sys.stderr)
        return 2

    q = grid.QUICK if args.quick else {}
    n = args.n or q.get("n", 2000)
    draws = args.draws or q.get("draws", 6)
    acts = tuple(args.activations or q.get("activations", grid.ACTIVATIONS))
    gnames = tuple(args.geometries or q.get("geometries", grid.GEOMETRY_NAMES))
    cs = tuple(args.c or q.get("cs", grid.CS))
    tol_se = args.tol_se if args.tol_se is not None else q.get("tol_se", 3.0)
    tol_rel = args.tol_rel if args.tol_rel is not None else q.get("tol_rel", 0.02)
    csv_path = Path(args.csv) if args.csv else Path(args.out).with_suffix(".csv")

    t0 = time.perf_counter()
    try:
        cells = grid.run_grid(acts, gnames, cs, n=n, draws=draws, seed=args.seed, tol_se=tol_se, tol_rel=tol_rel,
                         csv_path=csv_path, resume=args.resume or args.report_only, log=sys.stderr, backend=args.backend,
                         device=args.device, plan=grid.REDUCED if args.reduced else None,
                         simulate=not args.report_only, confirm_draws=args.confirm_draws)
    except SymattnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    secs = time.perf_counter() - t0
    meta = {"date": _dt.date.today().isoformat(), "seconds": secs, "seed": args.seed,
            "command": "python -m symattn.cli.mc_grid " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}, backend {args.backend}"}
    grid.write_report(args.out, grid.markdown(cells, meta=meta))
    s = grid.summary(cells)
    print(f"{s['passed']}/{s['cells']} cells pass ({s['regular_passed']}/{s['regular_cells']} outside the known "
          f"exceptions); report {args.out}, CSV {csv_path}", file=sys.stderr)
    return 0 if s["regular_passed"] == s["regular_cells"] else 1


if __name__ == "__main__":
    sys.exit(main())
