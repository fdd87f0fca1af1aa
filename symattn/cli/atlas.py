r"""``symattn atlas``: the accuracy atlas, theory against exact Monte Carlo over layers and settings."""

from __future__ import annotations

from .common import EXIT_OK, add_command, finish_command, fmt, format_table, integer, print_json

HELP = "measure where the theory holds: theory vs exact Monte Carlo over layers and settings"
DESCRIPTION = """
    Runs every block of the atlas spec SPEC (default: the shipped default atlas -- the real
    all-MiniLM-L6-v2 layer at c = 0.75-3, all heads, single heads, three-head sums, the 12-head
    concatenation and an n-law by tiling W (x) I_T, needing the [real] extra; and the paper's
    model). Each block is a sweep spec (symattn sweep) stored in DIR/<block>: resumable and
    extensible. Then writes the atlas table DIR/atlas.csv, one row per cell (point x gamma): the
    theory, the Monte Carlo mean and standard error, the gap (MC - theory)/theory, the z-score, whether
    |theory - MC| <= max(3 se, 3 %), the engine, n, and the layer; and DIR/summary.json.

    --quick runs the small shipped atlas (the paper's model and the residual layer at small n;
    under 3 minutes on 2 cores). The table of the default atlas is installed with the package
    (symattn/data/atlas.csv): TheoryResult.accuracy and the AccuracyWarning read it, and
    symattn verify --atlas checks it against the current theory. Figures: symattn atlas --figures
    DIR --out FOLDER draws the heat maps of docs/accuracy.md from a finished atlas.

    JSON: {"blocks": {name: {"tasks", "computed", "reused", "seconds", ...}}, "cells", "within",
    "table", "seconds"}."""
EXAMPLES = [
    "symattn atlas --quick --store atlas-quick",
    "symattn atlas --store atlas                 # the default atlas ([real] extra)",
    "symattn atlas my_atlas.toml --store atlas --scheduler tcp://10.0.0.5:8786",
    "symattn atlas --figures atlas --out docs/figures",
    "symattn atlas --refresh-theory --table symattn/data/atlas.csv --out atlas.csv   # new theory, same MC",
    "symattn atlas --add-cells minilm_test.csv --table atlas.csv   # cells measured elsewhere (the test error, say)",
]


def add_parser(subparsers):
    p = add_command(subparsers, "atlas", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("spec", metavar="SPEC.toml", nargs="?", default=None,
                   help="the atlas spec (TOML of [[block]] sweep specs); default: the shipped default atlas")
    p.add_argument("--store", default="atlas", metavar="DIR", help="the atlas folder (default ./atlas)")
    p.add_argument("--quick", action="store_true", help="the small shipped atlas (CI size), when SPEC is not given")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a dask scheduler tcp://HOST:PORT, or 'serial' (default: an embedded LocalCluster)")
    p.add_argument("--workers", type=integer("workers", 1, 4096), default=None, metavar="N",
                   help="embedded cluster: N worker processes (default: one per core)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="instead of running: draw the heat maps of the finished atlas DIR into --out")
    p.add_argument("--out", default=None, metavar="FOLDER", help="with --figures: where the PNGs go")
    p.add_argument("--refresh-theory", dest="refresh_theory", action="store_true",
                   help="instead of running: recompute the theory of the finished atlas --store with the current "
                        "code, keep its Monte Carlo, and write the table again (after a change of the theory)")
    p.add_argument("--table", default=None, metavar="CSV",
                   help="with --refresh-theory: refresh an atlas table instead of a store (each row's call gives "
                        "the theory, its Monte Carlo is kept; written to --out, default over CSV)")
    p.add_argument("--add-cells", dest="add_cells", default=None, metavar="CSV",
                   help="instead of running: put the cells of CSV (the atlas columns, 'error' train or test) into "
                        "the table --table, replacing the rows of their blocks (written to --out, default over it)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return finish_command(p, run)


def run(args) -> int:
    from ..errors import ParameterError

    if args.figures is not None:
        from ..atlas.figures import atlas_figures

        if args.out is None:
            raise ParameterError("out", None, "a folder for the figures (--out FOLDER) with --figures")
        paths = atlas_figures(args.figures, args.out)
        if args.json:
            return print_json({"figures": [str(p) for p in paths]})
        for path in paths:
            print(path)
        return EXIT_OK
    from ..atlas import refresh_theory, run_atlas

    if args.add_cells is not None:
        from ..atlas import merge_cells

        if args.table is None:
            raise ParameterError("table", None, "an atlas table to add the cells to (--table CSV) with --add-cells")
        res = merge_cells(args.add_cells, args.table, args.out)
        if args.json:
            return print_json(res)
        for name, b in res["blocks"].items():
            print(f"{name}: {b['cells']} cells, {b['within']} within max(3 se, 3 %)")
        print(f"{res['cells']} cells; table {res['table']}")
        return EXIT_OK
    if args.refresh_theory and args.table is not None:
        from ..atlas import refresh_table

        res = refresh_table(args.table, args.out, workers=args.workers,
                            progress=False if args.no_progress else None)
        if args.json:
            return print_json(res)
        for name, b in res["blocks"].items():
            print(f"{name}: {b['moved']} of {b['cells']} cells moved (largest relative change {b['largest']:.2g}); "
                  f"within {100 * b['within_before']:.1f} % -> {100 * b['within_after']:.1f} %")
        print(f"{res['cells']} cells ({res['failed']} failed, {len(res['skipped'])} calls skipped); "
              f"table {res['table']}; {res['seconds']:.0f} s")
        return EXIT_OK
    if args.table is not None:
        raise ParameterError("table", args.table, "only with --refresh-theory or --add-cells (an atlas table)")
    if args.refresh_theory:
        res = refresh_theory(args.store, scheduler=args.scheduler, workers=args.workers)
        if args.json:
            return print_json(res)
        for name, b in res["blocks"].items():
            print(f"{name}: {b['moved']} cells moved (largest relative change {b['largest']:.2g})")
        print(f"{res['cells']} cells; table {res['table']}; {res['seconds']:.0f} s")
        return EXIT_OK

    summary = run_atlas(args.spec, args.store, scheduler=args.scheduler, workers=args.workers, quick=args.quick,
                        progress=False if args.no_progress else None)
    if args.json:
        return print_json(summary)
    rows = [[name, str(b["tasks"]), str(b["computed"]), str(b["reused"]), fmt(b["seconds"], 3)]
            for name, b in summary["blocks"].items()]
    print(format_table(["block", "tasks", "computed", "reused", "seconds"], rows, align="lrrrr"))
    within = summary["within"]
    print(f"{summary['cells']} cells, {'-' if within is None else f'{100 * within:.1f} %'} within max(3 se, 3 %); "
          f"table {summary['table']}; {summary['seconds']:.0f} s")
    return EXIT_OK
