r"""``symattn hermite``: the Hermite expansion of an activation (a_k, a1, nu, d)."""

from __future__ import annotations

from ..formatting import finite_or_none
from .common import (EXIT_OK, add_activation_arg, add_command, add_dps_arg, finish_command, fmt, format_table,
                     integer, print_json, with_provenance)

HELP = "Hermite expansion of an activation (a_k, a1, nu, d)"
DESCRIPTION = """
    Expands the centred activation in normalised probabilists' Hermite polynomials,
    f(xi) - a0 = sum_{k>=1} a_k He_k(xi)/sqrt(k!), with a_k = E[f(xi) He_k(xi)]/sqrt(k!)
    and xi ~ N(0,1), so that a0 = E f(xi), a1 = E[xi f(xi)] and nu = E[(f(xi)-a0)^2]
    = sum_k a_k^2. Also prints the diagonal constant d = lim_{p->inf} f(sqrt p)/sqrt p of
    the kernel (0 for bounded f, 1 for relu/|x|, inf for superlinear f such as he3).
    Coefficients a_0..a_K are computed with mpmath at D significant digits (values below
    10^-D max(1, |a_k|) are shown as 0); where SymPy can integrate them exactly the exact
    value is shown as well.

    JSON: {"activation", "a0", "a1", "nu", "d", "coefficients": [str], "exact": [str|null],
    "provenance"}; coefficients are decimal strings with D significant digits; a non-finite d
    (superlinear f) is written as null; "provenance" records the parameters, the symattn and
    library versions and a timestamp."""
EXAMPLES = ["symattn hermite tanh", "symattn hermite relu --kmax 8 --dps 50", "symattn hermite 'x*erf(x)' --json"]


def add_parser(subparsers):
    p = add_command(subparsers, "hermite", help=HELP, description=DESCRIPTION, examples=EXAMPLES)
    add_activation_arg(p, positional=True)
    p.add_argument("--kmax", type=integer("kmax", 0, 200), default=6, metavar="K",
                   help="highest degree K, 0 <= K <= 200 (default 6)")
    add_dps_arg(p, "decimal digits of the coefficients")
    p.add_argument("--no-exact", action="store_true",
                   help="skip the exact SymPy coefficients (faster); 'exact' is then all null")
    return finish_command(p, run)


def hermite_data(act: str, kmax: int = 6, dps: int = 30, exact: bool = True) -> dict:
    """The ``symattn hermite --json`` object of the activation ``act``.

    a_k = E[f(ξ) He_k(ξ)]/√(k!) for k = 0..kmax (mpmath at ``dps`` digits; values below
    10^-dps·max(1, |a_k|) are set to 0), with a0, a1, ν = Σ_{k≥1} a_k² and d = lim f(√p)/√p.

    Parameters
    ----------
    act : str or Activation
        A catalog name or a SymPy expression in x.
    kmax : int
        Highest degree (0..200).
    dps : int
        mpmath digits (15..1000).
    exact : bool
        Also the exact SymPy coefficients where SymPy finds them.

    Returns
    -------
    dict
        ``{"activation", "a0", "a1", "nu", "d", "coefficients": [str], "exact": [str | None]}``.

    Examples
    --------
    >>> data = hermite_data("x", kmax=2, dps=15, exact=False)
    >>> data["a1"], data["coefficients"]
    (1.0, ['0.0', '1.0', '0.0'])
    """
    import mpmath

    from ..activations.activation import activation
    from ..model import check_dps, check_int

    kmax = check_int("kmax", kmax, 0, 200)
    dps = check_dps(dps)
    f = activation(act)
    coeffs = f.hermite_coefficients(kmax=kmax, dps=dps)
    # digits beyond the working precision are quadrature noise (e.g. 3e-44 for a zero of relu)
    with mpmath.workdps(dps):
        tol = mpmath.mpf(10) ** (-dps) * max([mpmath.mpf(1)] + [abs(c) for c in coeffs])
        coeffs = [mpmath.chop(c, tol) for c in coeffs]
    ex = f.exact_coefficients(kmax) if exact else None
    ex = [None] * len(coeffs) if ex is None else list(ex)
    ex += [None] * (len(coeffs) - len(ex))
    return {
        "activation": f.name,
        "a0": finite_or_none(f.a0),
        "a1": finite_or_none(f.a1),
        "nu": finite_or_none(f.nu),
        "d": finite_or_none(f.d),
        "coefficients": [mpmath.nstr(c, dps) for c in coeffs],
        "exact": [None if e is None else str(e) for e in ex[:len(coeffs)]],
    }


def run(args) -> int:
    data = hermite_data(args.activation, args.kmax, args.dps, exact=not args.no_exact)
    if args.json:
        params = {"command": "hermite", "activation": args.activation, "kmax": args.kmax, "dps": args.dps,
                  "exact": not args.no_exact}
        return print_json(with_provenance(data, params, backend="mpmath", dtype=f"mpf ({args.dps} digits)"))
    print(f"activation: {data['activation']}")
    print(f"a0 = {fmt(data['a0'], 12)}   a1 = {fmt(data['a1'], 12)}   nu = {fmt(data['nu'], 12)}   "
          f"d = {'inf' if data['d'] is None else fmt(data['d'], 12)}")
    print("f(xi) - a0 = sum_k a_k He_k(xi)/sqrt(k!)")
    rows = [[str(k), c, "-" if e is None else e] for k, (c, e) in enumerate(zip(data["coefficients"], data["exact"]))]
    print(format_table(["k", "a_k", "exact"], rows, align="rll"))
    return EXIT_OK
