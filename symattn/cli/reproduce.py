r"""``symattn reproduce``: the paper's figures, theory lines against Monte Carlo points (PNG, PDF, CSV).

The figures themselves are :mod:`symattn.figures`; this module only parses the options and
prints the summary of :func:`symattn.figures.run`.
"""

from __future__ import annotations

from .common import (EXIT_OK, add_command, add_monte_carlo_args, add_progress_flag, finish_command, integer,
                     output_folder, print_json, with_provenance)

HELP = "the paper's figures: theory lines vs Monte Carlo points (PNG, PDF, CSV)"
DESCRIPTION = """
    Writes the paper's figures, each with deterministic-equivalent theory
    lines (finite-p diagonal d_n at the simulated n) and exact Monte Carlo points with
    +-1 standard-error bars, as PNG and PDF plus a CSV of the data:
    fig_ridge (the paper's Figure 1, ridge regression alone: E_LR over gamma, over c at
    gamma = 1e-5, and over ||mu||^2 at gamma = 1e-5),
    fig_mu0 (mu = 0: E_A for tanh and ReLU vs E_LR over gamma, c and, with W = I, ||mu||^2),
    fig_aligned (w_K = w_Q = theta mu/||mu||: E_A vs E_LR over theta and gamma, with the
    theory map of E_A/E_LR marking where the gap closes and where it reverses),
    fig_a1zero (cos and He3 (diagonal zeroed) vs tanh over c and ||mu||^2), and, with the
    [real] extra installed, fig_minilm and fig_minilm_rank (pretrained all-MiniLM-L6-v2
    attention weights W = W_K^T W_Q per layer against the theory of their fit
    alpha I + rank r, alpha folded into f as f(alpha .): a comparison) and fig_minilm_w
    (the general-W theory of the real W per layer and per head, mu = 0 and mu = top,
    against exact Monte Carlo with that W; docs/theory.md §12). The layer's variants
    (docs/theory.md §13): fig_heads (E vs the number of heads at fixed total width, sum
    and concatenation), fig_residual (with and without the residual connection, vs E_LR),
    fig_softmax (the row softmax vs the entrywise exp kernel and E_LR) and, with the
    [real] extra, fig_minilm_heads (MiniLM's 12 real heads per layer, sum and concat).
    Time-correlated tokens (docs/theory.md §15): fig_tokens (train and test error against
    the AR(1) correlation rho, attention and E_LR, theory lines over Monte Carlo points; a
    Monte Carlo row whose theory is unavailable has kind mc_only).

    CSV columns: figure, panel, kind (curve|point|diagnostic), curve, model, activation,
    diagonal, x_name, x, theory, mc_mean, mc_sem, mc_model, n, p, draws, c, gamma, snr,
    theta, t, strong_signal, where t = (||mu||^2 + mu^T w_K mu^T w_Q)/sqrt(p) and
    strong_signal = |t| > 0.15 (the regime of docs/theory.md §10 where the asymptotic
    theory is off at realistic p). Each figure's summary line counts the Monte Carlo
    points within max(3 se, 3%) of the theory outside that regime."""
EXAMPLES = ["symattn reproduce --quick --out figures", "symattn reproduce --out figures-full",
            "symattn reproduce --quick --only minilm --out /tmp/minilm",
            "symattn reproduce --backend torch --device cuda --out figures-full",
            "symattn reproduce --paper --scheduler local --store ~/symattn-store --out figures-paper",
            "symattn reproduce --paper --scheduler tcp://10.0.0.5:8786 --store /shared/store --out figures-paper"]
NOTES = """--quick (n = 400, 5 draws) takes about 60 s of CPU time, under 3 minutes on 2 cores.
    The full run (n = 1500, 8 draws, gamma down to 1e-3, real weights with ranks up to 8)
    takes roughly 15-30 minutes on 2 CPU cores and shows a progress bar. Without the [real]
    extra the real-weights figures are skipped with a message (exit code 0); asked for by
    name (--only minilm) they are an error instead (exit code 2, with the install command).
    --paper uses the paper's sizes (see --paper); on 2 cores with --scheduler local it
    takes about the time given in docs/gallery.md. With --scheduler every draw is one dask
    task seeded by its index: the numbers equal those of the serial run. Each finished
    run is kept in the store (OUT/.cache, or --store DIR) as soon as it is done, so a rerun
    of the same command, after Ctrl-C or kill -9, recomputes only what is missing.
    The output folder is created and checked to be writable before any work. The --json
    summary carries a "provenance" object (seed, settings, versions, timestamp). See
    docs/gallery.md."""


def add_parser(subparsers):
    from ..figures import FIGURES

    p = add_command(subparsers, "reproduce", help=HELP, description=DESCRIPTION, examples=EXAMPLES, notes=NOTES)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes (n = 400, 5 draws): under 3 minutes")
    size.add_argument("--paper", action="store_true",
                      help="the paper's figures at the paper's sizes: Figure 1 (ridge regression) at p = 2048, "
                           "n = 512 / n = 4096 / p = 512, n = 2048, and the attention figures (mu0, aligned, "
                           "a1zero) at n = 2048; --only adds the others at these sizes (use --scheduler or --workers)")
    p.add_argument("--out", default="symattn-figures", metavar="DIR", help="output folder (default symattn-figures)")
    p.add_argument("--only", nargs="+", choices=list(FIGURES), metavar="FIG",
                   help="make only these figures: " + ", ".join(FIGURES))
    add_monte_carlo_args(p, seed_help="Monte Carlo seed (default 0)", backend_help="Monte Carlo backend",
                         device_help="torch device (cpu, cuda)")
    p.add_argument("--no-cache", action="store_true",
                   help="simulate every Monte Carlo run again and keep no cache (default: finished runs are "
                        "kept in DIR/.cache, so a rerun after Ctrl-C recomputes nothing that was finished)")
    p.add_argument("--store", default=None, metavar="DIR",
                   help="keep the finished Monte Carlo runs in DIR instead of OUT/.cache: a persistent, resumable "
                        "store that reruns (after Ctrl-C or kill -9) and other output folders reuse")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the Monte Carlo on dask: 'local' for an embedded LocalCluster on this machine, or "
                        "the address tcp://HOST:PORT of a running scheduler (dask scheduler / dask worker, "
                        "dask-jobqueue, Kubernetes); every draw is a task (default: in this process)")
    p.add_argument("--workers", type=integer("workers", 1, 4096), default=None, metavar="N",
                   help="embedded cluster of N single-threaded worker processes (default with --scheduler local: "
                        "one per core); with an address: wait for N workers")
    add_progress_flag(p)
    return finish_command(p, run)


def run(args) -> int:
    from dataclasses import replace

    from ..errors import ParameterError
    from ..figures import FULL, PAPER, PAPER_FIGURES, QUICK
    from ..figures import run as run_figures
    from ..model import check_int

    if args.device is not None and args.backend == "numpy":
        raise ParameterError("device", args.device, "no --device with --backend numpy",
                             hint="use --backend torch --device cuda for a GPU")
    if args.store is not None and args.no_cache:
        raise ParameterError("no-cache", True, "not with --store (the store is the cache)")
    s = QUICK if args.quick else (PAPER if args.paper else FULL)
    s = replace(s, seed=check_int("seed", args.seed, 0), backend=args.backend, device=args.device)
    figures = list(dict.fromkeys(args.only)) if args.only else (list(PAPER_FIGURES) if args.paper else None)
    named = [nm for nm in (figures or ()) if nm in ("minilm", "minilm_w", "minilm_test")]
    if named:
        _check_real_weights(named[0])
    output_folder(args.out, "out")  # an existing file, /proc/x, ...: refused before minutes of work
    summary = run_figures(out=args.out, settings=s, figures=figures, progress=False if args.no_progress else None,
                          echo=None if args.json else print, cache=not args.no_cache, store=args.store,
                          scheduler=args.scheduler, workers=args.workers)
    if args.json:
        from dataclasses import asdict

        params = {"command": "reproduce", "out": args.out, "figures": figures, "settings": asdict(s)}
        print_json(with_provenance(summary, params, seed=s.seed, backend=args.backend, dtype="float64"))
    return EXIT_OK


def _check_real_weights(name: str = "minilm") -> None:
    """``--only minilm`` asks for the real-weights figure by name: without the ``[real]`` extra that is
    an error (RealWeightsUnavailable, exit 2, with the install command), not a silent skip."""
    from .. import realweights
    from ..errors import ParameterError, RealWeightsUnavailable

    try:
        realweights.minilm_path()
        realweights.import_safetensors()
    except RealWeightsUnavailable as exc:
        raise ParameterError("only", name, "figures whose inputs are installed", hint=str(exc)) from None
