r"""``symattn simulate``: exact finite-n Monte Carlo of E_attention and E_linear."""

from __future__ import annotations

from ..model import N_MAX
from .common import (EXIT_OK, add_activation_arg, add_command, add_diagonal_arg, add_gamma_arg, add_geometry_args,
                     add_monte_carlo_args, add_progress_flag, add_variant_args, add_weights_args, finish_command,
                     fmt, format_table, integer, number, print_json, variant_parameters, with_provenance)

#: the most draws one command accepts
DRAWS_MAX = 10**6

HELP = "exact finite-n Monte Carlo of E_attention and E_linear"
DESCRIPTION = """
    Exact Monte Carlo of the finite-n model (docs/theory.md §2). Each draw samples X = mu y^T + Z
    (p x n, p = round(c n), Z i.i.d. N(0,1), balanced labels y in {+-1}^n), builds the
    kernel K = f(X^T W X/sqrt p)/sqrt p with W = I + w_K w_Q^T, and from one eigh of
    M = K^T X^T X K/n = sum_k lambda_k v_k v_k^T gets every ridge at once:
    E_A(gamma) = (gamma^2/n) sum_k (v_k^T y)^2/(lambda_k + gamma)^2; E_LR the same with
    M = X^T X/n. Reports the mean and standard error over the draws; runs are reproducible
    by --seed. Progress is shown on stderr for long runs.

    The layer is the same as solve's (symattn.Layer, from the same flags): --weights FILE.npy |
    minilm:LAYER[:HEAD] (one exact p x p W; p is W's size, so n = round(p/c) unless --n says it),
    with the signal --mu zero|top|random:SEED|FILE.npy scaled by --snr; variants (docs/theory.md
    §13): --residual (Phi = X(I + K)), --heads with --readout concat|sum (several heads W_h),
    --kernel softmax --temperature TAU (the row softmax over l != i, with --diagonal zero).

    Several c: --c 0.5 1 2 runs each (n fixed by --n, or round(p/c) with weights).

    Test error (--error test|both): each draw also samples a fresh sequence (X', y') of the same
    law, and the readout beta = (Phi Phi^T/n + gamma)^{-1} Phi y/n fitted on the draw is scored
    there: E_test = (1/n)||y' - Phi'^T beta||^2 (docs/theory.md §14), for every layer (weights,
    heads, residual, softmax). Keys E_attention_test, E_linear_test.

    Time-correlated tokens (docs/theory.md §15): --ar1 RHO (E[z_t z_s^T] = RHO^|t-s| I) or
    --autocorr FILE.npy (the autocorrelation r_1..r_L), Z = G L^T with T = L L^T; --markov Q draws the
    labels as a +-1 Markov chain with persistence Q. The test sequence has the same law.

    JSON: {"gamma", "n", "p", "draws", "E_attention": {"mean", "sem"},
    "E_linear": {"mean", "sem"}, "provenance"}; with several c, {"c": [...], "runs": [one such
    object per c], "provenance"}. "provenance" records the seed, the parameters, the layer, the
    backend and dtype, the symattn and library versions and a timestamp."""
EXAMPLES = [
    "symattn simulate --activation tanh --n 500 --c 1 --gamma 0.01 0.1 1",
    "symattn simulate -a relu --n 1000 --c 0.5 --gamma 0.1 1 --aligned --snr 1 --draws 8 --json",
    "symattn simulate -a he3 --diagonal zero --n 800 --c 2 --gamma 1",
    "symattn simulate -a tanh --n 4000 --c 1 --gamma 0.1 --backend torch --device cuda",
    "symattn simulate -a tanh --n 600 --c 0.5 --gamma 0.1 1 --residual",
    "symattn simulate -a tanh --n 768 --c 0.5 --gamma 1 --heads minilm:2 --readout sum",
    "symattn simulate -a gelu --c 1 2 --gamma 0.01 0.1 --weights minilm:1 --mu top --snr 2   # n = 384/c",
    "symattn simulate --n 500 --c 0.5 --gamma 1e-3 --kernel softmax --temperature 2 --diagonal zero",
    "symattn simulate -a tanh --n 1000 --c 1 --gamma 0.01 0.1 1 10 --aligned --snr 1 --draws 16 --error both",
    "symattn simulate -a relu --n 500 --c 0.5 --gamma 0.01 1 --ar1 0.9 --markov 0.8 --error both --json",
]


def add_parser(subparsers):
    p = add_command(subparsers, "simulate", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    add_activation_arg(p)
    p.add_argument("--n", type=integer("n", 2, N_MAX), default=None, metavar="N",
                   help="number of tokens n >= 2 (the memory it needs is checked first); required unless "
                        "--weights or --heads fix p, when n = round(p/c) by default")
    p.add_argument("--c", type=number, nargs="+", required=True, metavar="C",
                   help="c = p/n, 0 < C <= 10000 (one or more; each is simulated)")
    add_gamma_arg(p)
    add_geometry_args(p)
    p.add_argument("--draws", type=integer("draws", 1, DRAWS_MAX), default=4, metavar="D",
                   help="independent draws (default 4)")
    add_monte_carlo_args(p, seed_help="random seed (default 0)",
                         backend_help="numpy (CPU) or torch (CPU or CUDA; needs the [gpu] extra). Default numpy",
                         device_help="torch device: cpu or cuda (default: cuda if available, else cpu)")
    add_diagonal_arg(p)
    add_weights_args(p)
    add_variant_args(p)
    p.add_argument("--error", choices=("train", "test", "both"), default="train",
                   help="train: the memorisation error (default); test: the readout scored on a fresh sequence "
                        "per draw (docs/theory.md §14); both: the two, columns E_*_test beside E_*")
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which models are simulated (default both; the other's keys are null)")
    add_progress_flag(p)
    from .tokens import add_tokens_args

    add_tokens_args(p)
    return finish_command(p, run)


def simulate_data(layer, n: int, c: float, gamma, mu=None, geometry=None, draws: int = 4, seed: int = 0,
                  backend: str = "numpy", device: str | None = None, progress=None, error="train", tokens=None,
                  model: str = "both") -> dict:
    """The ``symattn simulate --json`` object of one c: :meth:`SimulationResult.to_dict` of
    :meth:`symattn.Layer.simulate`.

    Examples
    --------
    >>> from symattn import Layer
    >>> data = simulate_data(Layer("tanh"), n=40, c=0.5, gamma=[1.0], draws=2, progress=False)
    >>> (data["n"], data["p"], data["draws"]), sorted(data["E_attention"])
    ((40, 20, 2), ['mean', 'sem'])
    >>> sorted(simulate_data(Layer("tanh"), n=40, c=0.5, gamma=[1.0], draws=2, progress=False, error="test"))[:2]
    ['E_attention', 'E_attention_test']
    """
    res = layer.simulate(n, c, gamma, mu=mu, geometry=geometry, draws=draws, seed=seed, backend=backend,
                         device=device, progress=progress, error=error, tokens=tokens,
                         models=("attention", "linear") if model == "both" else (model,))
    return res.to_dict()


def _tokens(args, layer, c: float) -> int:
    """n at this c: --n, or round(p/c) when the weights fix p (then --n must agree with them)."""
    from ..errors import ParameterError
    from ..model import dimension
    from ..realweights import tokens_for

    p = layer.p
    if p is None:
        if args.n is None:
            raise ParameterError("n", None, "the number of tokens --n N (2 <= N) without --weights or --heads")
        return args.n
    if args.n is None:
        return tokens_for(p, c)
    if dimension(args.n, c) != p:
        raise ParameterError("n", args.n, f"n with round(c n) = {p}, the size of the weights (e.g. --n {round(p / c)} "
                             f"at --c {c:g}, or no --n)")
    return args.n


def run(args) -> int:
    import numpy as np

    from ..errors import ParameterError

    from .general_w import layer_from_args, signal_from_args

    from .tokens import tokens_from_args, tokens_parameters

    layer = layer_from_args(args)
    law = tokens_from_args(args)
    mu, geometry, signal_text = signal_from_args(args, layer)
    runs = []
    for c in args.c:
        n = _tokens(args, layer, c)
        try:
            runs.append(simulate_data(layer, n, c, args.gamma, mu, geometry, args.draws, args.seed, args.backend,
                                      args.device, progress=False if args.no_progress else None, error=args.error,
                                      tokens=law, model=args.model))
        except np.linalg.LinAlgError as exc:  # LAPACK on a matrix with inf/NaN entries
            raise ParameterError("activation", args.activation, "an activation whose kernel stays finite in float64 "
                                 f"at n={n}, c={c:g}",
                                 hint=f"the eigensolver failed on non-finite entries ({exc}): f overflows at the "
                                      "kernel's arguments, which grow like sqrt(p)") from None
    if args.json:
        params = {"command": "simulate", "activation": args.activation, "n": args.n, "c": list(args.c),
                  "gamma": list(args.gamma), "geometry": None if geometry is None else geometry.as_dict(),
                  "weights": args.weights, "mu": args.mu, "snr": args.snr, "draws": args.draws,
                  "diagonal": args.diagonal, "device": args.device, "error": args.error, "model": args.model,
                  **variant_parameters(args),
                  **tokens_parameters(law)}
        for data in runs:   # the library's own provenance of each run, with the command line's parameters added
            data["provenance"]["parameters"] = {**params, **data["provenance"].get("parameters", {})}
        if len(runs) == 1:
            return print_json(runs[0])
        return print_json(with_provenance({"c": list(args.c), "runs": runs}, params, seed=args.seed,
                                          backend=args.backend, dtype="float64"))
    for c, data in zip(args.c, runs):
        print(f"activation {args.activation}: c = {fmt(c)}, n = {data['n']}, p = {data['p']}, "
              f"draws = {data['draws']}, seed = {args.seed}, backend = {args.backend}")
        print(signal_text)
        if law is not None:
            print(f"tokens: {law!r} (docs/theory.md §15)")
        if layer.form != "plain" or layer.kernel != "entrywise":   # not the paper's layer (simulated, any form)
            print(f"layer: {layer!r}")
        keys = [k for k in ("E_attention", "E_linear", "E_attention_test", "E_linear_test") if data.get(k)]
        rows = []
        for i, g in enumerate(data["gamma"]):
            row = [fmt(g)]
            for k in keys:
                row += [fmt(data[k]["mean"][i], 6), fmt(data[k]["sem"][i], 2)]
            rows.append(row)
        header = ["gamma"] + [h for k in keys for h in (k, "sem")]
        print(format_table(header, rows, align="r" * len(header)))
    return EXIT_OK
