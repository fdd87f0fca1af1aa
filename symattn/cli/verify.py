r"""``symattn verify``: run the verification checks (or the convergence study) from the command line.

The checks are :mod:`symattn.verification` (registry, cases, convergence study); this module only
parses the options and prints their results. ``python -m symattn.verification`` runs :func:`main`.
Module-level imports stay light: the parser is built on every ``symattn`` call.
"""

from __future__ import annotations

import sys
import time

from .common import (EXIT_FAILURE, EXIT_OK, SEED_MAX, add_command, add_json_flag, finish_command, fmt, format_table,
                     integer, number, output_folder, print_json, with_provenance)

#: token counts of the checks and of the convergence study: from the smallest useful size to what fits
N_MIN, N_MAX = 50, 100_000
DRAWS_MAX = 10_000

DESCRIPTION = """\
Runs every verification check of the theory and prints a table: check, method, value,
reference, tolerance, pass. Exit code 0 only if every check passes (1 otherwise).

Each limiting case of docs/theory.md §7 (f(t)=t; a1=0; mu=0; gamma->oo; gamma->0; c->0 and c->oo) is
checked symbolically on the SymPy systems (limits, series, simplification), at high precision
(mpmath, dps >= 30) against independent references and the float64 backend, and against exact
Monte Carlo of the finite-n model (|MC - theory| <= k*se, k stated; theory with the finite-p
diagonal d_n). A check passes when |value - reference| <= tolerance (relation 'abs'), or
value >= reference - tolerance ('ge'), or value <= reference + tolerance ('le').

--quick runs all symbolic and high-precision checks and small Monte Carlo (n=400, 8 draws;
under 2 minutes on 2 cores); the full run uses n=1000, 16 draws and a few extra mpmath checks
(under 20 minutes). --convergence instead runs the convergence study (gap against n = 250..4000
on three settings), writing convergence.csv and convergence.png to --out."""


def add_parser(subparsers):
    p = add_command(
        subparsers, "verify", help="run the scientific checks (limiting cases, MC agreement)",
        description=DESCRIPTION,
        examples=["symattn verify --quick", "symattn verify --quick --json",
                  "symattn verify --only gamma-small,linear-f --method symbolic",
                  "symattn verify --list",
                  "symattn verify --convergence --out docs/figures",
                  "symattn verify --convergence --settings strong-tanh --out docs/figures",
                  "symattn verify --convergence --replot --out docs/figures"],
        notes="JSON: {\"checks\": [{\"name\", \"method\", \"value\", \"reference\", \"tolerance\", \"passed\", "
              "\"group\", \"relation\", \"detail\", \"seconds\"}, ...], \"passed\": bool, \"total\", \"failed\", "
              "\"seconds\", \"profile\", \"provenance\"}; non-finite numbers are null.")
    p.add_argument("--quick", action="store_true", help="symbolic + mpmath + small Monte Carlo (< 2 min)")
    add_json_flag(p)
    p.add_argument("--only", metavar="PATTERNS", default=None,
                   help="comma-separated substrings of check names (or group names) to run")
    p.add_argument("--method", default=None,
                   choices=("symbolic", "mpmath", "float64", "monte-carlo", "contour"),
                   help="run only the checks of this method")
    p.add_argument("--list", action="store_true", help="list the checks (name, method, quick) and exit")
    p.add_argument("--n", type=integer("n", N_MIN, N_MAX), default=None,
                   help=f"Monte Carlo tokens n, {N_MIN} <= n <= {N_MAX} (default 400 quick, 1000 full)")
    p.add_argument("--draws", type=integer("draws", 2, DRAWS_MAX), default=None,
                   help="Monte Carlo draws (default 8 quick, 16 full)")
    p.add_argument("--seed", type=integer("seed", 0, SEED_MAX), default=0, help="Monte Carlo seed (default 0)")
    p.add_argument("--k-se", dest="k_se", type=number, default=None,
                   help="Monte Carlo tolerance in standard errors, 0 < K <= 1000 (default 4)")
    p.add_argument("--atlas", action="store_true",
                   help="check the shipped accuracy atlas (symattn/data/atlas.csv) against the current theory: "
                        "every cell's theory value recomputed from its recorded call, within 1e-8")
    p.add_argument("--atlas-limit", dest="atlas_limit", type=integer("atlas-limit", 1, 10**6), default=None,
                   metavar="K", help="with --atlas: check at most K points (each with all its gamma)")
    g = p.add_argument_group("convergence study")
    g.add_argument("--convergence", action="store_true",
                   help="run the convergence study instead of the checks (writes convergence.csv/.png)")
    g.add_argument("--out", default="verify-out", help="output folder of --convergence (default verify-out)")
    g.add_argument("--settings", nargs="+", default=None, metavar="NAME",
                   help="convergence settings: bulk-tanh, signal-tanh, strong-tanh (default all)")
    g.add_argument("--ns", nargs="+", type=integer("ns", N_MIN, N_MAX), default=None, metavar="N",
                   help=f"token counts of the convergence study, {N_MIN} <= N <= {N_MAX} "
                        "(default 250 500 1000 2000 4000)")
    g.add_argument("--draws-scale", dest="draws_scale", type=number, default=1.0,
                   help="multiply the convergence draws by this factor, 0 < S <= 1000 (default 1)")
    g.add_argument("--replot", action="store_true",
                   help="with --convergence: redraw convergence.png from the CSV in --out (no simulation)")
    g.add_argument("--no-finite-p", dest="finite_p", action="store_false",
                   help="do not evaluate the finite-p corrected theory alongside (it can be slow)")
    return finish_command(p, run, json=False)


def _profile(args):
    from dataclasses import replace

    from ..model import check_int, check_positive

    from ..verification.registry import FULL, QUICK

    prof = QUICK if args.quick else FULL
    if args.n is not None:
        prof = replace(prof, n=check_int("n", args.n, 50))
    if args.draws is not None:
        prof = replace(prof, draws=check_int("draws", args.draws, 2))
    if args.k_se is not None:
        prof = replace(prof, k_se=float(check_positive("k-se", args.k_se, upper=1000)))
    return replace(prof, seed=check_int("seed", args.seed, 0))


def run(args) -> int:
    if args.convergence:
        return _run_convergence(args)
    if args.atlas:
        return _run_atlas(args)
    from ..verification.registry import all_checks, run_checks, select

    if args.list:
        checks = select(all_checks(), quick=args.quick, only=args.only, method=args.method)
        rows = [[c.name, c.method, "yes" if c.quick else "no", c.description[:90]] for c in checks]
        print(format_table(["check", "method", "quick", "what"], rows, align="llll"))
        return EXIT_OK
    prof = _profile(args)
    if not select(all_checks(), quick=args.quick, only=args.only, method=args.method):
        from ..errors import ParameterError

        raise ParameterError("only", args.only, "a pattern matching at least one check (see --list)")
    t0 = time.perf_counter()
    stream = not args.json
    headers = ["check", "method", "value", "reference", "tolerance", "pass"]
    if stream:
        print(f"symattn verify ({prof.name}: MC n={prof.n}, draws={prof.draws}, k={prof.k_se:g}; mpmath dps={prof.dps})",
              flush=True)

    def show(r):
        if stream:
            mark = "PASS" if r.passed else "FAIL"
            print(f"  {mark}  {r.name}  [{r.method}]  value={fmt(r.value)}  ref={fmt(r.reference)}  "
                  f"tol={fmt(r.tolerance, 3)}  ({r.seconds:.1f}s)", flush=True)
        elif sys.stderr.isatty():
            print(f"  {'ok ' if r.passed else 'FAIL'} {r.name}", file=sys.stderr, flush=True)

    results = run_checks(quick=args.quick, only=args.only, method=args.method, profile=prof, progress=show)
    secs = time.perf_counter() - t0
    failed = [r for r in results if not r.passed]
    if args.json:
        profile = {"name": prof.name, "n": prof.n, "draws": prof.draws, "k_se": prof.k_se, "dps": prof.dps,
                   "seed": prof.seed}
        params = {"command": "verify", "quick": args.quick, "only": args.only, "method": args.method,
                  "profile": profile}
        print_json(with_provenance({"checks": [r.to_dict() for r in results], "passed": not failed and bool(results),
                                    "total": len(results), "failed": len(failed), "seconds": secs,
                                    "profile": profile}, params, seed=prof.seed, backend="numpy", dtype="float64"))
    else:
        rows = [[r.name, r.method, fmt(r.value), fmt(r.reference), fmt(r.tolerance, 3),
                 "yes" if r.passed else "NO"] for r in results]
        print()
        print(format_table(headers, rows, align="llrrrl"))
        print()
        for r in failed:
            print(f"FAILED {r.name}: {r.detail}")
        print(f"{len(results) - len(failed)}/{len(results)} checks passed in {secs:.1f} s")
    return EXIT_OK if not failed else EXIT_FAILURE


def _run_atlas(args) -> int:
    """``symattn verify --atlas``: the shipped atlas against the current theory (symattn.verification.atlas)."""
    from ..verification.atlas import RTOL, check_atlas

    res = check_atlas(limit=args.atlas_limit)
    if args.json:
        print_json(with_provenance(res, {"command": "verify --atlas", "limit": args.atlas_limit}, backend="numpy",
                                   dtype="float64"))
    else:
        print(f"atlas: {res['cells']} cells of {res['calls']} points recomputed, {len(res['skipped'])} points "
              f"skipped (weights not installed); largest relative change {res['max_rel_diff']:.2g} "
              f"(tolerance {RTOL:g}) at {res['worst']}; {res['seconds']:.0f} s")
        for m in res["moved"][:10]:
            print(f"  moved: {m}")
        print("PASS" if res["passed"] else "FAIL: the theory moved; measure the atlas again (symattn atlas)")
    return EXIT_OK if res["passed"] else EXIT_FAILURE


def _run_convergence(args) -> int:
    from ..verification import convergence

    ns = tuple(dict.fromkeys(args.ns)) if args.ns else convergence.NS
    if not args.replot:  # everything is checked before the first simulation
        convergence.check_arguments(args.settings, ns, args.draws_scale, args.seed)
        output_folder(args.out, "out")

    def show(row):
        if not args.json:
            print(f"  {row['setting']:12s} n={row['n']:5d} p={row['p']:5d} draws={row['draws']:3d}  "
                  f"MC={row['mc']:.5f}±{row['se']:.5f}  theory={row['theory']:.5f}  gap={row['gap']:+.5f} "
                  f"({row['seconds']:.0f}s)", flush=True)

    if args.replot:
        res = convergence.replot(args.out)
    else:
        res = convergence.run(args.out, settings=args.settings, ns=ns, draws_scale=args.draws_scale,
                              seed=args.seed, progress=show, finite_p=args.finite_p)
    summ = res["summary"]
    if args.json:
        params = {"command": "verify --convergence", "out": args.out, "replot": args.replot,
                  "settings": args.settings, "ns": list(ns), "draws_scale": args.draws_scale,
                  "finite_p": args.finite_p}
        print_json(with_provenance({"csv": str(res["csv"]), "png": str(res["png"]),
                    "slopes": {k: {"gap": v["gap_slope"][0], "gap_se": v["gap_slope"][1],
                                   "last_segment": v["tail_slope"][0],
                                   "se": v["se_slope"][0], "gap_finite_p": v["gap_fp_slope"][0]}
                               for k, v in summ.items()},
                    "rows": res["rows"]}, params, seed=None if args.replot else args.seed, backend="numpy",
                                   dtype="float64"))
    else:
        rows = [[k, fmt(v["gap_slope"][0], 3), fmt(v["gap_slope"][1], 2), fmt(v["tail_slope"][0], 3),
                 fmt(v["se_slope"][0], 3), fmt(v["gap_fp_slope"][0], 3), fmt(v["max_abs_z"], 3)]
                for k, v in summ.items()]
        print(format_table(["setting", "|gap| slope", "± se", "last segment", "se slope", "finite-p gap slope",
                            "max |z|"], rows))
        print(f"wrote {res['csv']} and {res['png']}")
    return EXIT_OK


def main(argv=None) -> int:
    """``symattn verify ARGV...`` through :func:`symattn.cli.main` (exit codes and error messages included)."""
    from . import main as cli_main

    return cli_main(["verify", *(sys.argv[1:] if argv is None else argv)])
