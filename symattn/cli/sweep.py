r"""``symattn sweep``: a grid of exact Monte Carlo tasks on dask.distributed, stored resumably."""

from __future__ import annotations

from .common import EXIT_OK, add_command, finish_command, fmt, format_table, integer, print_json

HELP = "run a parameter sweep (Monte Carlo + theory) on dask, into a resumable zarr store"
DESCRIPTION = """
    Runs every task (point, draw) of the TOML spec SPEC -- scalars or lists of activation, c,
    gamma, snr, aligned or the geometry keys wk2, wq2, mu_wk, mu_wq, wk_wq, n, diagonal, the layer
    (weights, heads, readout, residual, kernel, temperature, tile: the keys of symattn.Layer and of
    the flags of solve and simulate) and its signal mu; scalars draws, seed, backend, correction
    (docs/tutorials/sweeps.md) -- and writes each one into the zarr store
    DIR as it finishes, with the deterministic equivalent of every point. A task is one exact
    Monte Carlo draw of E_A(gamma) and E_LR(gamma) for all gamma at once; its seed is derived from
    the spec's seed and the point's parameters, so results do not depend on the number of
    workers. Rerunning the same spec on the same store computes only what is missing, also when the
    spec extends the stored one (more draws, supersets of swept lists); a store made by another
    spec is refused, naming the key.

    With no --scheduler, an embedded dask LocalCluster with --workers single-threaded processes
    (default: one per core); --scheduler tcp://HOST:PORT uses a running cluster (dask scheduler /
    dask worker, dask-jobqueue, Kubernetes); --scheduler serial runs in this process without dask.

    JSON: {"tasks", "computed", "reused", "store", "points", "draws", "gamma", "dims", "engine",
    "workers", "seconds", "agreement", "provenance"}. Read the store with sa.open_sweep(DIR), or
    with xarray alone: xarray.open_zarr(DIR)."""
EXAMPLES = [
    "symattn sweep spec.toml --store results/",
    "symattn sweep spec.toml --store results/ --workers 2 --json",
    "symattn sweep spec.toml --store results/ --scheduler tcp://10.0.0.5:8786",
]


def add_parser(subparsers):
    p = add_command(subparsers, "sweep", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    p.add_argument("spec", metavar="SPEC.toml", help="the sweep spec (TOML)")
    p.add_argument("--store", required=True, metavar="DIR", help="the result store (a zarr folder; created if missing)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a dask scheduler address tcp://HOST:PORT, or 'serial' (default: an embedded LocalCluster)")
    p.add_argument("--workers", type=integer("workers", 1, 4096), default=None, metavar="N",
                   help="embedded cluster: N worker processes (default: one per core); with --scheduler: wait "
                        "for N workers")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return finish_command(p, run)


def _agreement_rows(summary):
    rows = []
    for model, a in summary["agreement"].items():
        rows.append([model, str(a["cells"]), fmt(a["max_abs_z"], 3), fmt(a["within_3se"], 3), fmt(a["max_rel_gap"], 3)])
    return rows


def run(args) -> int:
    from ..sweep import sweep

    summary = sweep(args.spec, args.store, scheduler=args.scheduler, workers=args.workers,
                    progress=False if args.no_progress else None)
    if args.json:
        return print_json(summary)
    print(f"sweep {args.spec}: {summary['grid_points']} grid points x {len(summary['gamma'])} gamma, "
          f"{summary['draws']} draws: {summary['tasks']} tasks, {summary['computed']} computed, "
          f"{summary['reused']} reused ({summary['engine']}, {summary['workers']} workers, "
          f"{summary['seconds']:.1f} s); store {summary['store']}")
    if summary.get("corrupted"):
        print(f"{summary['corrupted']} stored task(s) failed their checksum and were computed again")
    if summary.get("rebuilt_root"):
        print("the store's root metadata was damaged and has been rebuilt from symattn_root.json")
    print("theory vs Monte Carlo (z = |mean - theory|/se):")
    print(format_table(["model", "cells", "max |z|", "within 3 se", "max rel gap"], _agreement_rows(summary),
                       align="lrrrr"))
    return EXIT_OK
