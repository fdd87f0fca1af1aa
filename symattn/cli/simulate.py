r"""``symattn simulate``: exact finite-n Monte Carlo of E_attention and E_linear."""

from __future__ import annotations

from ..model import N_MAX
from .common import (EXIT_OK, add_activation_arg, add_command, add_diagonal_arg, add_gamma_arg, add_geometry_args,
                     add_monte_carlo_args, add_progress_flag, add_variant_args, finish_command, fmt, format_table,
                     geometry_from_args, geometry_line, integer, number, print_json, variant_parameters,
                     with_provenance)

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

    Variants (docs/theory.md §13): --residual (Phi = X(I + K)), --heads with --readout
    concat|sum (several heads W_h; p is the heads' size), --kernel softmax --temperature TAU
    (the row softmax over l != i, with --diagonal zero).

    JSON: {"gamma", "n", "p", "draws", "E_attention": {"mean", "sem"},
    "E_linear": {"mean", "sem"}, "provenance"}; "provenance" records the seed, the parameters,
    the backend and dtype, the symattn and library versions and a timestamp."""
EXAMPLES = [
    "symattn simulate --activation tanh --n 500 --c 1 --gamma 0.01 0.1 1",
    "symattn simulate -a relu --n 1000 --c 0.5 --gamma 0.1 1 --aligned --snr 1 --draws 8 --json",
    "symattn simulate -a he3 --diagonal zero --n 800 --c 2 --gamma 1",
    "symattn simulate -a tanh --n 4000 --c 1 --gamma 0.1 --backend torch --device cuda",
    "symattn simulate -a tanh --n 600 --c 0.5 --gamma 0.1 1 --residual",
    "symattn simulate -a tanh --n 768 --c 0.5 --gamma 1 --heads minilm:2 --readout sum",
    "symattn simulate --n 500 --c 0.5 --gamma 1e-3 --kernel softmax --temperature 2 --diagonal zero",
]


def add_parser(subparsers):
    p = add_command(subparsers, "simulate", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    add_activation_arg(p)
    p.add_argument("--n", type=integer("n", 2, N_MAX), required=True, metavar="N",
                   help="number of tokens n >= 2 (the memory it needs is checked first)")
    p.add_argument("--c", type=number, required=True, metavar="C", help="c = p/n, 0 < C <= 10000")
    add_gamma_arg(p)
    add_geometry_args(p)
    p.add_argument("--draws", type=integer("draws", 1, DRAWS_MAX), default=4, metavar="D",
                   help="independent draws (default 4)")
    add_monte_carlo_args(p, seed_help="random seed (default 0)",
                         backend_help="numpy (CPU) or torch (CPU or CUDA; needs the [gpu] extra). Default numpy",
                         device_help="torch device: cpu or cuda (default: cuda if available, else cpu)")
    add_diagonal_arg(p)
    add_variant_args(p)
    add_progress_flag(p)
    return finish_command(p, run)


def simulate_data(act: str, n: int, c: float, gamma, geometry=None, draws: int = 4, seed: int = 0,
                  backend: str = "numpy", device: str | None = None, diagonal: str = "f",
                  progress=None, **variant) -> dict:
    """The ``symattn simulate --json`` object: :meth:`SimulationResult.to_dict` of :func:`symattn.simulate`
    (``variant``: its ``residual``, ``heads``, ``readout``, ``kernel`` and ``temperature``).

    Examples
    --------
    >>> data = simulate_data("tanh", n=40, c=0.5, gamma=[1.0], draws=2, progress=False)
    >>> (data["n"], data["p"], data["draws"]), sorted(data["E_attention"])
    ((40, 20, 2), ['mean', 'sem'])
    """
    from ..activations.activation import activation
    from ..model import as_geometry
    from ..montecarlo import simulate

    res = simulate(activation(act), n=n, c=c, gamma=gamma, geometry=as_geometry(geometry), draws=draws, seed=seed,
                   backend=backend, device=device, diagonal=diagonal, progress=progress, **variant)
    return res.to_dict()


def run(args) -> int:
    import numpy as np

    from ..errors import ParameterError

    geometry = geometry_from_args(args)
    from .general_w import variant_from_args

    variant = variant_from_args(args)
    if "heads" in variant and variant["heads"][0].shape[0] != round(args.c * args.n):
        p = variant["heads"][0].shape[0]
        raise ParameterError("n", args.n, f"n with round(c n) = {p}, the size of the heads (e.g. --n {round(p / args.c)} "
                             f"at --c {args.c:g})")
    try:
        data = simulate_data(args.activation, args.n, args.c, args.gamma, geometry, args.draws, args.seed,
                             args.backend, args.device, args.diagonal,
                             progress=False if args.no_progress else None, **variant)
    except np.linalg.LinAlgError as exc:  # LAPACK on a matrix with inf/NaN entries
        raise ParameterError("activation", args.activation, "an activation whose kernel stays finite in float64 "
                             f"at n={args.n}, c={args.c:g}",
                             hint=f"the eigensolver failed on non-finite entries ({exc}): f overflows at the "
                                  "kernel's arguments, which grow like sqrt(p)") from None
    if args.json:
        params = {"command": "simulate", "activation": args.activation, "n": args.n, "c": args.c,
                  "gamma": list(args.gamma), "geometry": geometry.as_dict(), "draws": args.draws,
                  "diagonal": args.diagonal, "device": args.device, **variant_parameters(args)}
        if data.get("provenance") is None:
            data = with_provenance(data, params, seed=args.seed, backend=args.backend, dtype="float64")
        else:  # the library's own provenance of the run, with the command line's parameters added
            data["provenance"]["parameters"] = {**params, **data["provenance"].get("parameters", {})}
        return print_json(data)
    print(f"activation {args.activation}: n = {data['n']}, p = {data['p']}, draws = {data['draws']}, "
          f"seed = {args.seed}, backend = {args.backend}")
    print(geometry_line(geometry))
    if variant:
        print("variant: " + ", ".join(f"{k} = {v}" for k, v in variant_parameters(args).items()))
    rows = []
    for i, g in enumerate(data["gamma"]):
        row = [fmt(g)]
        for k in ("E_attention", "E_linear"):
            row += [fmt(data[k]["mean"][i], 6), fmt(data[k]["sem"][i], 2)]
        rows.append(row)
    print(format_table(["gamma", "E_attention", "sem", "E_linear", "sem"], rows, align="rrrrr"))
    return EXIT_OK

