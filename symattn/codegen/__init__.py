r"""Generated standalone solvers: one small numpy-only module per activation (``symattn codegen``).

:func:`generate_solver` prints, from the same SymPy objects the package solves
(:func:`~symattn.systems.bulk_system`, :func:`~symattn.systems.attention_system`,
:func:`~symattn.systems.linear_system` and the derivatives of
:mod:`symattn.backends.kernels`), a self-contained Python module specialised to one activation:

- the Hermite constants a1, s² = ν − a1², d are folded in as float64 literals (computed with
  mpmath at ``dps`` digits first; constant sub-expressions such as s²·s² are folded at that
  precision), a0 and ν appear in the docstring and as module constants;
- the kernels are printed with :class:`sympy.printing.numpy.NumPyPrinter` after common
  sub-expression elimination (:func:`sympy.cse`): the bulk fixed-point map g_i, its Jacobian
  ∂g_i/∂e_j and γ-sensitivity (both through :func:`~symattn.systems.bulk.total_derivative`), the
  nine traces T with Ṫ = ∂T/∂γ + Σ_j ∂T/∂e_j ė_j, Γ, Γ̇, Ĉ and I + ΓĈ (rank r), and E_LR;
- the run-time part (Marchenko–Pastur quadrature, vectorised Newton with backtracking and a
  damped fixed-point fallback, quadrature doubling, branch check, implicit differentiation,
  Woodbury F and F', the public functions and a command line) is copied from
  ``symattn/codegen/template.py``.

**Moment form.** Every integrand of the systems is a polynomial in λ over a power of
Δ(λ) = q0 + λ(p1 + β(λ)²), β = b0 + b1 λ (MATH §5). With the moments

  m_{k,j} = ∫ λ^j Δ(λ)^{-k} dμ_S(λ),   k = 1, 2,

each integral is Σ_{k,j} C_{k,j}(e, c, γ) m_{k,j}, and the generator prints the coefficients
C_{k,j} (SymPy ``expand`` in λ and 1/Δ, done once with a1, s², d symbolic and cached; the
constants are substituted afterwards). For j ≥ 1 the moments are taken against the smooth
measure ν(dλ) = λ μ_S(dλ), m_{k,j} = ∫ λ^{j-1} Δ^{-k} dν, which has no 1/λ peak when c is close
to 1; the two moments m_{k,0} are computed by the template (directly, or from the ν-moments and
the mass 1 of μ_S). Per quadrature node the solver only evaluates Δ, not the twelve Newton or
eighteen trace integrands, and the ν-moments are one matrix product with a table of
sin²θ (1 + cos θ)^i shared by all points, recombined by the binomial theorem with non-negative
terms.
"""

from __future__ import annotations

import datetime as _dt
import re
import textwrap
from functools import lru_cache
from pathlib import Path

__all__ = ["generate_solver", "write_solver", "add_parser", "run", "TEMPLATE"]

#: the run-time template copied into every generated module
TEMPLATE = Path(__file__).with_name("template.py")


# ============================================================================ printing
def _printer():
    from sympy.printing.numpy import NumPyPrinter

    from ..backends.compile import _ProductPowerPrinter

    class Printer(_ProductPowerPrinter):
        """NumPy printer: ``np.`` prefix, floats as repr(float) (17 significant digits), x**3 -> x*x*x."""

        def _module_format(self, fqn, register=True):
            if fqn.startswith("numpy."):
                return "np." + fqn[len("numpy."):]
            return NumPyPrinter._module_format(self, fqn, register)

        def _print_Float(self, expr):
            return repr(float(expr))

        def _print_Infinity(self, expr):
            return "np.inf"

        def _print_NegativeInfinity(self, expr):
            return "-np.inf"

    return Printer({"fully_qualified_modules": True, "inline": True, "allow_unknown_functions": False})


def _emit_function(name, params, doc, outputs, unpack, shape_of, matrix=None):
    """Source of one kernel: unpack lines, CSE temporaries, and the outputs written into ``out``.

    ``outputs``: list of SymPy expressions, written as ``out[k] = ...`` into an array
    (len, *shape); with ``matrix=(N, entries)`` the outputs are the entries (i, j) of an
    array (P, N, N) instead (zeros elsewhere). ``unpack``: {symbol: source} for argument
    pieces, emitted only when used. ``shape_of``: the source of the leading shape.
    """
    import sympy as sp

    pr = _printer()
    free = set().union(*(sp.sympify(e).free_symbols for e in outputs)) if outputs else set()
    lines = [f"def {name}({', '.join(params)}):", f'    """{doc}"""']
    for sym, src in unpack.items():
        if sym in free:
            lines.append(f"    {sym.name} = {src}")
    temps, reduced = sp.cse(outputs, symbols=sp.numbered_symbols("x"), order="none")
    for t, v in temps:
        lines.append(f"    {t} = {pr.doprint(v)}")
    if matrix is None:
        lines.append(f"    out = np.empty(({len(outputs)},) + np.shape({shape_of}))")
        for k, v in enumerate(reduced):
            lines.append(f"    out[{k}] = {pr.doprint(v)}")
    else:
        N, entries = matrix
        lines.append(f"    out = np.zeros(({shape_of}, {N}, {N}))")
        for (i, j), v in zip(entries, reduced):
            lines.append(f"    out[:, {i}, {j}] = {pr.doprint(v)}")
    lines.append("    return out")
    return "\n".join(lines)


# ============================================================================ symbolic pieces
class _Spec:
    """The numeric constants and symbols of one generation."""

    def __init__(self, f, dps: int, diagonal: str, rank: int):
        import mpmath
        import sympy as sp

        from ..model import kernel_constants
        from ..systems.symbols import a1, d, s2

        self.f, self.dps, self.diagonal, self.rank = f, dps, diagonal, rank
        k = kernel_constants(f, diagonal=diagonal, dps=dps)  # validates diagonal against f
        with mpmath.workdps(dps):
            consts = f.constants(dps)
            # quadrature noise below the working accuracy (e.g. a1 ~ 1e-41 for an even f) is an
            # exact zero: then the kernels lose those terms, as they do symbolically
            tol = mpmath.mpf(10) ** (2 - dps) * max(1, mpmath.sqrt(abs(consts["nu"])) + abs(consts["a0"]))
            self.a0, self.a1, self.s2, self.d = (mpmath.chop(mpmath.mpf(v), tol)
                                                 for v in (consts["a0"], k.a1, k.s2, k.d))
            self.nu = self.s2 + self.a1**2
        # D digits folded in: sympy Floats at that precision (constant products are folded at
        # dps digits, and printed rounded to float64)
        self.values = {a1: sp.Float(self.a1, dps), s2: sp.Float(self.s2, dps), d: sp.Float(self.d, dps)}
        for sym, v in list(self.values.items()):
            if v == 0:
                self.values[sym] = sp.Integer(0)


def _names():
    """Python names of the system symbols (SymPy names such as 'e_1', 's^2', 'lambda' are not)."""
    import sympy as sp

    from ..systems.symbols import e1, e2, e3, gamma, m2, rc

    return {e1: sp.Symbol("e1"), e2: sp.Symbol("e2"), e3: sp.Symbol("e3"), gamma: sp.Symbol("gamma"),
            rc: sp.Symbol("rc"), m2: sp.Symbol("snr")}


@lru_cache(maxsize=None)
def _delta_decomposition_symbolic():
    r"""β = b0 + b1 λ and Δ = q0 + λ(p1 + β²), read off the SymPy definitions (and checked).

    Returns (q0, p1, b0, b1) in the Python-named symbols and a1, s², d.
    """
    import sympy as sp

    from ..backends.compile import rationalise
    from ..systems.bulk import BETA, DELTA, beta
    from ..systems.symbols import lam

    names = _names()
    Bpoly = sp.Poly(rationalise(BETA), lam)
    if Bpoly.degree() > 1:
        raise AssertionError("beta is expected to be affine in lambda")
    b1, b0 = ([sp.Integer(0)] + Bpoly.all_coeffs())[-2:]
    Dr = rationalise(DELTA)
    q0 = Dr.subs(lam, 0)
    p1 = sp.expand((Dr - q0 - lam * beta**2) / lam)
    if p1.has(lam) or p1.has(beta) or sp.expand(Dr - (q0 + lam * (p1 + beta**2))) != 0:
        raise AssertionError("Delta is expected to be q0 + lambda (p1 + beta^2)")
    return tuple(sp.sympify(v).xreplace(names) for v in (q0, p1, b0, b1))


def _delta_decomposition(spec):
    """(q0, p1, b0, b1) with the constants of ``spec`` folded in."""
    return [v.xreplace(spec.values) for v in _delta_decomposition_symbolic()]


def _kernel_integrands(kind):
    """The integrand lists of the compiled kernels (as in symattn.backends.kernels), in β, Δ."""
    import sympy as sp

    from ..backends.kernels import E_DOTS, UNKNOWNS
    from ..systems import bulk_system
    from ..systems.attention import TRACE_INTEGRANDS
    from ..systems.bulk import total_derivative
    from ..systems.symbols import gamma

    g = list(bulk_system().integrands)
    if kind == "residual":
        return g
    if kind == "newton":
        return g + [total_derivative(gi, ej) for gi in g for ej in UNKNOWNS]
    if kind == "sensitivity":
        return [total_derivative(gi, gamma) for gi in g]
    T = list(TRACE_INTEGRANDS)
    T_dot = [total_derivative(t, gamma) + sum(total_derivative(t, ej) * ed for ej, ed in zip(UNKNOWNS, E_DOTS))
             for t in T]
    ed_names = {ed: sp.Symbol(f"ed{i + 1}") for i, ed in enumerate(E_DOTS)}
    return T + [t.xreplace(ed_names) for t in T_dot]


@lru_cache(maxsize=None)
def _moment_forms_symbolic(kind):
    r"""Each integrand h(λ; β, Δ) of the kernel list ``kind`` as Σ C_{k,j} m_{k,j}, in the ν-moments.

    m_{k,j} = ∫ λ^j Δ^{-k} dμ_S. With ν(dλ) = λ μ_S(dλ) (smooth also near c = 1; the atom drops
    out) and n_{k,i} = ∫ λ^i Δ^{-k} dν, m_{k,j} = n_{k,j-1} for j ≥ 1; the m_{k,0} stay symbols
    m{k}_0 (the run-time template computes them: see its ``_Quadrature.moments``). Returns SymPy
    expressions in the symbols m{k}_0, n{k}_{i}, e1..e3, rc, gamma, b0, b1 (β's coefficients,
    kept as symbols) and a1, s², d (folded in per activation by :func:`_moment_forms`).
    """
    import sympy as sp

    from ..backends.compile import rationalise
    from ..systems.bulk import Delta, beta
    from ..systems.symbols import lam

    names = _names()
    Dinv = sp.Symbol("Dinv")
    b0, b1 = sp.symbols("b0 b1")
    n = {(k, i): sp.Symbol(f"n{k}_{i}") for k in (1, 2) for i in range(16)}
    out = []
    for h in _kernel_integrands(kind):
        h = rationalise(h).xreplace({beta: b0 + b1 * lam, Delta: 1 / Dinv})
        h = sp.expand(h.xreplace(names))
        total = []
        for term in sp.Add.make_args(h):
            coeff, j = term.as_coeff_exponent(lam)
            coeff, k = coeff.as_coeff_exponent(Dinv)
            if not (j.is_Integer and k.is_Integer and j >= 0 and k in (1, 2)) or coeff.has(lam) or coeff.has(Dinv):
                raise AssertionError(f"integrand term {term} is not lambda^j/Delta^k, k = 1, 2")
            j, k = int(j), int(k)
            total.append(coeff * (n[k, j - 1] if j >= 1 else sp.Symbol(f"m{k}_0")))
        out.append(sp.Add(*total))
    return tuple(out)


def _moment_forms(kind, spec):
    """The moment forms of ``kind`` with the constants folded in; and {k: number of ν-moments needed}."""
    import sympy as sp

    values = dict(spec.values)
    _, _, b0v, b1v = _delta_decomposition(spec)
    for name, v in (("b0", b0v), ("b1", b1v)):
        if v.is_number:
            values[sp.Symbol(name)] = v
    out = [f.xreplace(values) for f in _moment_forms_symbolic(kind)]
    # grouped by moment, Σ_moments (coefficient polynomial)·moment: far fewer operations after CSE
    moments = sorted({v for f in out for v in f.free_symbols if re.fullmatch(r"[nm][12]_\d+", v.name)}, key=str)
    out = [sp.collect(f, moments) for f in out]
    count = {1: 0, 2: 0}
    for f in out:
        for sym in f.free_symbols:
            m = re.fullmatch(r"([nm])([12])_(\d+)", sym.name)
            if m:
                k, i = int(m.group(2)), int(m.group(3))
                count[k] = max(count[k], i + 1 if m.group(1) == "n" else 1)
    return out, count


def _moment_unpack(spec, n1, n2):
    import sympy as sp

    out = {sp.Symbol("m1_0"): "n0[0]", sp.Symbol("m2_0"): "n0[1]"}
    for k, n in ((1, n1), (2, n2)):
        for j in range(n):
            out[sp.Symbol(f"n{k}_{j}")] = f"n{k}[{j}]"
    return out


def _beta_lines(spec):
    """b0, b1 as unpack entries (their definitions in e3, rc)."""
    import sympy as sp

    pr = _printer()
    _, _, b0, b1 = _delta_decomposition(spec)
    return {sp.Symbol("b0"): pr.doprint(b0), sp.Symbol("b1"): pr.doprint(b1)}


def _integrand_kernels(spec):
    """Source of _delta_parts, _bulk_residual, _bulk_newton, _bulk_sensitivity, _traces; and the powers."""
    residual, deg_r = _moment_forms("residual", spec)
    newton, deg_n = _moment_forms("newton", spec)
    sensitivity, deg_s = _moment_forms("sensitivity", spec)
    traces, deg_t = _moment_forms("traces", spec)

    def powers(*counts):
        return tuple(max(cnt[k] for cnt in counts) for k in (1, 2))

    p_res, p_newton, p_all = powers(deg_r), powers(deg_n), powers(deg_r, deg_n, deg_s, deg_t)
    beta_unpack = _beta_lines(spec)
    unpack = {**_moment_unpack(spec, *p_all), **beta_unpack}
    args = ["n0", "n1", "n2", "e1", "e2", "e3", "rc", "gamma"]
    q0, p1, b0, b1 = _delta_decomposition(spec)
    src = [
        _emit_function("_delta_parts", ["e1", "e2", "e3", "rc", "gamma"],
                       "(q0, p1, b0, b1) with beta = b0 + b1 lam and Delta(lam) = q0 + lam (p1 + beta^2).",
                       [q0, p1, b0, b1], {}, "gamma"),
        _emit_function("_bulk_residual", args, "I_i(e) = int g_i dmu_S (i = 1, 2, 3) from the nu-moments: (3, P).",
                       residual, unpack, "gamma"),
        _emit_function("_bulk_newton", args,
                       "I_i(e) (rows 0-2) and the Jacobian int dg_i/de_j (rows 3-11, row-major): (12, P).",
                       newton, unpack, "gamma"),
        _emit_function("_bulk_sensitivity", args, "int dg_i/dgamma (at fixed e): (3, P).",
                       sensitivity, unpack, "gamma"),
        _emit_function("_traces", args + ["ed1", "ed2", "ed3"],
                       "T_Q^(0,1), T_QK^(0,1,2), T_KQK^(0..3) (rows 0-8) and their total gamma-derivatives "
                       "Tdot = int dT/dgamma + sum_j (int dT/de_j) edot_j (rows 9-17): (18, P).",
                       traces, unpack, "gamma"),
    ]
    return src, {"N_POWERS_1": max(p_all[0], 1), "N_POWERS_2": p_all[1], "NEWTON_POWERS": p_newton,
                 "RESIDUAL_POWERS": p_res}


def _matrix_kernels(spec):
    """Source of _woodbury_parts (Γ, Γ̇, Ĉ and I + ΓĈ on the rows/columns that matter) for rank r."""
    import sympy as sp

    from ..backends.compile import rationalise
    from ..systems import attention_system
    from ..systems.attention import TRACE_SYMBOLS

    system = attention_system(spec.rank)
    G = system.gram
    k = G.shape[0]
    gnames, gunpack = {}, {}
    for i in range(k):
        for j in range(i, k):
            s = sp.Symbol(f"G{i}_{j}")
            gnames[G[i, j]] = s
            gunpack[s] = f"G[:, {i}, {j}]"
    tnames = {T: sp.Symbol(f"T{i}") for i, T in enumerate(TRACE_SYMBOLS)}
    tdots = {T: sp.Symbol(f"Td{i}") for i, T in enumerate(TRACE_SYMBOLS)}
    tunpack = {sp.Symbol(f"T{i}"): f"T[:, {i}]" for i in range(len(TRACE_SYMBOLS))}
    tdunpack = {sp.Symbol(f"Td{i}"): f"Td[:, {i}]" for i in range(len(TRACE_SYMBOLS))}
    names = {**_names(), **gnames}

    def prep(M):
        return rationalise(M).xreplace(spec.values).xreplace(names)

    Gam = prep(system.Gamma).xreplace(tnames)
    Gdot = sp.zeros(*system.Gamma.shape)
    for T in TRACE_SYMBOLS:
        Gdot += system.Gamma.diff(T) * tdots[T]
    Gdot = prep(Gdot)
    Ch = prep(system.C_hat)
    # Ĉ vanishes outside the rows/columns S (e.g. b3, a4 for rank 1; all but b1, a0 when a1 = 0),
    # and Ĉ(I + ΓĈ)^{-1} = E_S Ĉ_SS (I + Γ_SS Ĉ_SS)^{-1} E_Sᵀ: only R = {b0} ∪ S is needed.
    full = Gam.shape[0]
    S = [i for i in range(full) if any(Ch[i, j] != 0 or Ch[j, i] != 0 for j in range(full))]
    R = [0] + [i for i in S if i != 0]
    Gam, Gdot, Ch = (M.extract(R, R) for M in (Gam, Gdot, Ch))
    W = sp.eye(len(R)) + Gam * Ch
    N = len(R)
    half = full // 2
    labels = [f"b{i}" if i < half else f"a{i - half}" for i in R]
    order = ", ".join(labels)

    # one function, one CSE over the four matrices (they share G/sqrt(c), G T, ... )
    mats = {"Gam": Gam, "Gdot": Gdot, "Ch": Ch, "M": W}
    entries, exprs = [], []
    for key, M in mats.items():
        M = M.applyfunc(sp.expand)
        for i in range(N):
            for j in range(N):
                if M[i, j] != 0:
                    entries.append((key, i, j))
                    exprs.append(M[i, j])
    pr = _printer()
    unpack = {**tunpack, **tdunpack, **gunpack}
    free = set().union(*(e.free_symbols for e in exprs))
    lines = ["def _woodbury_parts(T, Td, G, rc):",
             '    """Gamma = U^T H0^-1 U, dGamma/dgamma = sum_T dGamma/dT Tdot, C_hat = [[0, C^T], [C, 0]] (a1 folded',
             f'    in) and I + Gamma C_hat on the basis ({order}): four arrays (P, {N}, {N})."""']
    lines += [f"    {sym.name} = {src}" for sym, src in unpack.items() if sym in free]
    temps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("x"), order="none")
    lines += [f"    {t} = {pr.doprint(v)}" for t, v in temps]
    lines.append("    P = T.shape[0]")
    lines += [f"    {key} = np.zeros((P, {N}, {N}))" for key in mats]
    lines += [f"    {key}[:, {i}, {j}] = {pr.doprint(v)}" for (key, i, j), v in zip(entries, reduced)]
    lines.append("    return " + ", ".join(mats))
    return [f"WOODBURY_BASIS = {labels!r}  # the rows/columns of Gamma and C_hat that enter F", "\n".join(lines)]


def _linear_kernel(spec):
    import sympy as sp

    from ..backends.compile import rationalise
    from ..systems import linear_system

    E = rationalise(linear_system().closed_form["E"]).xreplace(_names())
    pr = _printer()
    temps, (red,) = sp.cse([E], symbols=sp.numbered_symbols("x"))
    lines = ["def _linear_error(rc, gamma, snr):",
             '    """E_LR = -gamma^2 F_LR\'(gamma) in closed form (MATH §3)."""']
    lines += [f"    {t} = {pr.doprint(v)}" for t, v in temps]
    lines.append(f"    return {pr.doprint(red)}")
    return "\n".join(lines)


# ============================================================================ docstring
def _latex_docs(spec) -> str:
    """The equations of the docstring (independent of the activation: a1, s², d stay symbols)."""
    return _latex_docs_rank(spec.rank)


@lru_cache(maxsize=None)
def _latex_docs_rank(rank: int) -> str:
    import sympy as sp

    from ..systems import attention_system, linear_system
    from ..systems.attention import TRACES, TRACE_SYMBOLS
    from ..systems.bulk import BETA, DELTA, RESOLVENT_KERNELS, beta, Delta, bulk_system
    from ..systems.symbols import e1, e2, e3

    L = sp.latex
    lin = linear_system()
    cf = lin.closed_form
    mt, m = sp.Symbol(r"\tilde{m}"), sp.Symbol("m")
    lines = [
        r"\tilde m(\gamma) &= " + L(cf["m_tilde"]),
        r"m(\gamma) &= c\,\tilde m + \frac{1 - c}{\gamma}",
        r"F_{LR}(\gamma) &= " + L(lin.output.xreplace({sp.Symbol("mtilde", positive=True): mt,
                                                       sp.Symbol("m", positive=True): m})),
        r"E_{LR}(\gamma) &= -\gamma^2 F_{LR}'(\gamma)",
    ]
    bulk = [rf"{L(beta)}(\lambda) &= {L(BETA)}", rf"{L(Delta)}(\lambda) &= {L(DELTA)}"]
    for e, g in zip((e1, e2, e3), bulk_system().integrands):
        bulk.append(rf"{L(e)} &= \int {L(g)}\, d\mu_S(\lambda)")
    traces = [rf"q &= {L(RESOLVENT_KERNELS['Q'])}, \quad k = {L(RESOLVENT_KERNELS['QK'])}, "
              rf"\quad r = {L(RESOLVENT_KERNELS['KQK'])}"]
    for T, (_, kind, j) in zip(TRACE_SYMBOLS, TRACES):
        kern = {"Q": "q", "QK": "k", "KQK": "r"}[kind]
        traces.append(rf"{L(T)} &= \int \lambda^{{{j}}}\, {kern}(\lambda)\, d\mu_S(\lambda)" if j else
                      rf"{L(T)} &= \int {kern}(\lambda)\, d\mu_S(\lambda)")
    system = attention_system(rank)
    wood = [
        r"\Lambda &= " + L(system.Lambda),
        r"C &= " + L(system.C),
        r"\hat C &= \begin{pmatrix} 0 & C^T \\ C & 0 \end{pmatrix}",
        r"\Gamma &= " + L(system.Gamma),
        r"F(\gamma) &= \Gamma_{00} - e^T \hat C (I + \Gamma \hat C)^{-1} e, \quad e = \Gamma_{:,0}",
        r"F'(\gamma) &= \dot\Gamma_{00} - 2\,\dot e^T u + u^T \dot\Gamma u, \quad u = \hat C (I + \Gamma\hat C)^{-1} e",
        r"E_A(\gamma) &= -\gamma^2 F'(\gamma)",
    ]

    def block(rows):
        body = " \\\\\n".join(rows)
        return "\\begin{aligned}\n" + body + "\n\\end{aligned}"

    mp_law = (r"\mu_S(d\lambda) = (1-c)_+\,\delta_0(d\lambda) + \frac{c\sqrt{(b-\lambda)(\lambda-a)}}"
              r"{2\pi\lambda}\,\mathbf 1_{[a,b]}(\lambda)\,d\lambda, \quad a, b = (1 \mp c^{-1/2})^2")
    return "\n".join([
        "Marchenko-Pastur law of S = Z^T Z/p (n x n, ratio n/p = 1/c)::", "", "    " + mp_law, "",
        "Linear regression, E_LR (MATH.md §3)::", "", textwrap.indent(block(lines), "    "), "",
        "Bulk system (MATH.md §5; unknowns e1, e2, e3 real at z = -gamma)::", "",
        textwrap.indent(block(bulk), "    "), "",
        "Traces at the bulk solution (MATH.md §6)::", "", textwrap.indent(block(traces), "    "), "",
        f"Woodbury step (rank r = {rank}; Gram matrix G of (mu, w_K, w_Q))::", "",
        textwrap.indent(block(wood), "    "),
    ])


def _fmt_mp(x, digits=20):
    import mpmath

    if mpmath.isinf(x) or mpmath.isnan(x):
        return str(x)
    return mpmath.nstr(x, digits)


def _docstring(spec, version, generated, command, module="solver") -> str:
    f = spec.f
    name = f.name
    if spec.rank == 1:
        usage = f"""\
    python {module}.py --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json
    python {module}.py --c 0.5 1 2 --gamma 0.1 --snr 1 --mu-wk 0.5 --wk2 1 --model attention

Python (every argument broadcasts; c and gamma may be grids)::

    import {module}
    E = {module}.memorization_error(c, gamma, model="both", **{module}.aligned(1.0))
    E_A = {module}.attention_error(c, gamma, snr=1.0, wk2=1.0, wq2=1.0, mu_wk=1.0, mu_wq=1.0, wk_wq=1.0)"""
    else:
        k = 1 + 2 * spec.rank
        eye = "[" + ", ".join("[" + ", ".join("1" if i == j else "0" for j in range(k)) + "]" for i in range(k)) + "]"
        usage = f"""\
    python {module}.py --c 0.5 --gamma 0.01 0.1 1 --gram '{eye}' --json

Python (every argument broadcasts; gram has shape (..., {k}, {k}), ordered mu, w_K^(1..r), w_Q^(1..r))::

    import {module}
    E = {module}.memorization_error(c, gamma, model="both", gram=G)"""
    expr = str(f.expr) if f.expr is not None else name
    head = f"""\
Standalone deterministic-equivalent solver for the activation ``{name}``.

Generated by symattn {version} on {generated} with::

    {command}

Do not edit: regenerate instead. Needs only numpy at run time (no sympy, no symattn).

Provenance
----------
- activation: {name};  f(x) = {expr}  (the model uses the centred f - a0)
- Hermite constants of the centred f, computed with mpmath at {spec.dps} digits and folded into
  the kernels as float64 literals (constant sub-expressions folded at {spec.dps} digits first):

    a0  = {_fmt_mp(spec.a0)}
    a1  = {_fmt_mp(spec.a1)}
    nu  = {_fmt_mp(spec.nu)}
    s^2 = nu - a1^2 = {_fmt_mp(spec.s2)}
    d   = {_fmt_mp(spec.d)}   (diagonal mode '{spec.diagonal}')

- weights W_K^T W_Q = I + sum_k w_K^(k) w_Q^(k)T of rank r = {spec.rank}

Usage
-----
Command line (same JSON keys as ``symattn solve --json``)::

{usage}

Limitations: the diagonal constant d is a literal, so the finite-p diagonal d_n of
``symattn solve --n N`` is not available here; float64 only (use ``symattn solve --backend
mpmath`` for more digits).

Model
-----
n tokens X = mu y^T + Z (p x n, p = c n), attention features Phi = X K with
K = f(X^T W X/sqrt p)/sqrt p, ridge readout trained on y. E(gamma) = lim gamma^2 yhat^T Q^2 yhat
= -gamma^2 F'(gamma), F = lim yhat^T (Phi^T Phi/n + gamma I)^-1 yhat, yhat = y/sqrt n. The
kernel is linearised as a1 (X^T W X/p - I) + s N/sqrt p + d I (s^2 = nu - a1^2).

Numerics
--------
- Every integrand of the systems is a polynomial in lam over Delta or Delta^2, so the generated
  kernels take the moments int lam^i Delta^-k dnu against nu(dlam) = lam mu_S(dlam), whose
  density c sqrt((b - lam)(lam - a))/(2 pi) is smooth also for c close to 1; the integrals
  against mu_S follow exactly (mu_S has mass 1). With lam = a + h (1 + cos theta) they are
  computed by the midpoint rule in theta (spectrally accurate), one matrix product per evaluation.
- 64 nodes, doubled per point until the fixed-point residual with the interleaved trapezoid rule
  (theta = k pi/m) is below 1e-12 (about twice the quadrature error).
- Newton on e = I(e) with the SymPy-derived Jacobian and backtracking, from e = (1/gamma, 0, 0),
  relative residual 1e-13; damped fixed point e <- (e + I(e))/2 as fallback; ConvergenceError if
  a point does not converge or leaves the branch e1 > 0, 0 <= e2 <= 1, Delta > 0.
- E = -gamma^2 F' with F' by implicit differentiation: (I - int dg/de) edot = int dg/dgamma,
  then the trace derivatives Tdot and the Woodbury derivative (formula below).
- The bulk system depends on (c, gamma) only: it is solved once per distinct pair, and the
  Woodbury step is vectorised over the geometry.

Equations
---------
"""
    return head + _latex_docs(spec) + "\n"


# ============================================================================ generation
def _replace_block(text: str, name: str, body: str) -> str:
    pat = re.compile(rf"# @@BEGIN {name}@@\n.*?# @@END {name}@@\n", re.S)
    if not pat.search(text):
        raise AssertionError(f"template block {name} not found")
    return pat.sub(lambda _: f"# ---- generated: {name} ----\n{body.rstrip()}\n# ---- end of {name} ----\n", text)


def generate_solver(f, dps: int = 30, diagonal: str = "f", rank: int = 1, generated: str | None = None,
                    command: str | None = None, module: str = "solver") -> str:
    r"""The source of a standalone solver module specialised to the activation ``f``.

    Parameters
    ----------
    f : activation spec (catalog name, SymPy expression string in x, sympy expr or Activation);
        callables are refused (the module needs f's Hermite constants only, but its provenance
        needs an expression)
    dps : digits of the Hermite constants a1, s² = ν − a1², d (mpmath) before they are rounded
        to float64 literals; 15 <= dps <= 1000. Run-time arithmetic is always float64.
    diagonal : 'f' (d = lim f(√p)/√p; refused for superlinear f) or 'zero' (d = 0)
    rank : rank r of the weights W_K^T W_Q − I (Γ is (6+4r)×(6+4r))
    generated : the date stamp written into the provenance (default: now, UTC)
    command : the command line recorded in the provenance
    module : the module name used in the usage examples of the docstring

    The module computes E_A(γ) = −γ² F'(γ) (MATH §6) and E_LR (MATH §3) exactly like
    :func:`symattn.memorization_error` with ``backend='numpy'``.
    """
    from .. import __version__
    from ..activations import activation
    from ..errors import ParameterError
    from ..model import check_diagonal, check_dps, check_int

    dps = check_dps(dps)
    check_diagonal(diagonal)
    rank = check_int("rank", rank, 1, 8)
    act = activation(f)
    if act.expr is None:
        raise ParameterError("activation", act.name, "a catalog name or a SymPy expression in x (not a callable)")
    return _generate(act, dps, diagonal, rank, __version__,
                     generated or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                     command or _command(act.name, dps, diagonal, rank),
                     module if str(module).isidentifier() else "solver")


def _command(name, dps, diagonal, rank):
    import shlex

    parts = ["symattn", "codegen", shlex.quote(name), "-o", "solver.py"]
    if dps != 30:
        parts += ["--dps", str(dps)]
    if diagonal != "f":
        parts += ["--diagonal", diagonal]
    if rank != 1:
        parts += ["--rank", str(rank)]
    return " ".join(parts)


@lru_cache(maxsize=32)
def _kernels_source(act, dps, diagonal, rank):
    spec = _Spec(act, dps, diagonal, rank)
    integrands, powers = _integrand_kernels(spec)
    parts = integrands + _matrix_kernels(spec) + [_linear_kernel(spec)]
    return spec, "\n\n\n".join(parts) + "\n", powers


def _generate(act, dps, diagonal, rank, version, generated, command, module="solver") -> str:
    spec, kernels, powers = _kernels_source(act, dps, diagonal, rank)
    text = TEMPLATE.read_text(encoding="utf-8")
    doc = _docstring(spec, version, generated, command, module).replace('"""', "'''")
    if doc.endswith("\\"):
        doc += " "
    text = text.replace("@@DOCSTRING@@", doc, 1)
    # the template's own header comment describes the template, not the generated file
    text = re.sub(r"^# This file is the run-time template.*?\n\n", "", text, count=1, flags=re.S | re.M)

    def flt(x):
        v = float(x)
        return repr(v) if v == v and abs(v) != float("inf") else f"float({str(v)!r})"

    expr = str(act.expr)
    consts = "\n".join([
        f"ACTIVATION = {act.name!r}  # the activation (catalog name or SymPy expression in x)",
        f"EXPRESSION = {expr!r}  # f(x), uncentred",
        f"A0 = {flt(spec.a0)}  # E f(xi), xi ~ N(0, 1): subtracted (the model uses f - a0)",
        f"A1 = {flt(spec.a1)}  # a1 = E[xi f(xi)]",
        f"NU = {flt(spec.nu)}  # nu = E (f(xi) - a0)^2",
        f"S2 = {flt(spec.s2)}  # s^2 = nu - a1^2",
        f"D = {flt(spec.d)}  # diagonal constant d",
        f"DIAGONAL = {diagonal!r}  # 'f': d = lim f(sqrt p)/sqrt p; 'zero': d = 0",
        f"RANK = {rank}  # rank r of W_K^T W_Q - I",
        f"DPS = {dps}  # mpmath digits of the Hermite constants before rounding to float64",
        f"SYMATTN_VERSION = {version!r}",
        f"GENERATED = {generated!r}",
        f"N_POWERS_1 = {powers['N_POWERS_1']}  # nu-moments int lam^i/Delta dnu used, i < N_POWERS_1",
        f"N_POWERS_2 = {powers['N_POWERS_2']}  # nu-moments int lam^i/Delta^2 dnu used, i < N_POWERS_2",
        f"NEWTON_POWERS = {powers['NEWTON_POWERS']!r}  # the same, for the Newton step",
        f"RESIDUAL_POWERS = {powers['RESIDUAL_POWERS']!r}  # the same, for the fixed-point map alone",
    ])
    text = _replace_block(text, "constants", consts)
    text = _replace_block(text, "kernels", kernels)
    return text


def write_solver(f, path, **kwargs) -> Path:
    """Write :func:`generate_solver` (same keywords) to ``path``; returns the path."""
    path = Path(path)
    path.write_text(generate_solver(f, **kwargs), encoding="utf-8")
    return path


# ============================================================================ command line
def add_parser(subparsers):
    from ..cli import add_activation_arg, add_command, add_diagonal_arg, add_json_flag

    p = add_command(
        subparsers, "codegen",
        help="write a standalone numpy-only solver module for one activation",
        description="""
            Writes a self-contained Python module that solves the deterministic equivalents of
            E_attention and E_linear for one activation ACT (a catalog name or a SymPy expression in
            x). It needs only numpy at run time (no sympy, no symattn), has the Hermite constants
            a1, s^2 = nu - a1^2 and d folded in as float64 literals, and contains the bulk and
            attention systems, their Jacobian and gamma-derivatives as code printed from the SymPy
            systems with common-subexpression elimination, the Marchenko-Pastur quadrature, a Newton
            solve with backtracking and a damped fixed-point fallback, and E_A, E_LR vectorised over
            c, gamma and the geometry. Its docstring carries the equations in LaTeX and the
            provenance (activation, symattn version, date).

            The module is a command line (python solver.py --c C [C ...] --gamma G [G ...]
            [geometry] [--model attention|linear|both] [--json], printing the keys of
            'symattn solve --json') and a library (memorization_error, attention_error,
            linear_error, aligned). --dps D sets the digits of the Hermite constants (mpmath)
            before they are rounded to float64; run-time arithmetic is float64 in any case.""",
        examples=[
            "# worked example: a Gaussian-windowed activation, from expression to numbers",
            "symattn hermite 'x*exp(-x**2/2)'                 # a1, nu, d",
            "symattn codegen 'x*exp(-x**2/2)' -o gauss_solver.py",
            "python gauss_solver.py --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json",
            "python -c 'import gauss_solver as s; print(s.memorization_error(0.5, [0.1, 1], "
            "model=\"both\", **s.aligned(1.0)))'",
            "symattn solve -a 'x*exp(-x**2/2)' --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json   # same numbers",
            "# more",
            "symattn codegen tanh -o tanh_solver.py --dps 50",
            "symattn codegen he3 --diagonal zero -o he3_solver.py",
            "symattn codegen 'atan(x)' | less              # print the module",
        ],
        notes="""The generated module has no finite-p diagonal (symattn solve --n N): d is a literal.
            See docs/new_activation.md ("Studying a new activation").""",
    )
    add_activation_arg(p, positional=True)
    p.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="where to write the module ('-' for standard output, the default)")
    p.add_argument("--dps", type=int, default=30, metavar="D",
                   help="digits of the Hermite constants before rounding to float64, 15 <= D <= 1000 "
                        "(default 30)")
    add_diagonal_arg(p)
    p.add_argument("--rank", type=int, default=1, metavar="R",
                   help="rank r of W_K^T W_Q - I (default 1; r > 1 takes the geometry as --gram)")
    add_json_flag(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    import shlex

    from ..activations import activation
    from ..cli import _float, dump_json
    from ..errors import ParameterError

    if args.output != "-":
        parent = Path(args.output).expanduser().resolve().parent
        if not parent.is_dir() or Path(args.output).is_dir():
            raise ParameterError("output", args.output, "a file in an existing directory, or '-'")
    f = activation(args.activation)
    command = ["symattn", "codegen", shlex.quote(args.activation), "-o", shlex.quote(args.output)]
    if args.dps != 30:
        command += ["--dps", str(args.dps)]
    if args.diagonal != "f":
        command += ["--diagonal", args.diagonal]
    if args.rank != 1:
        command += ["--rank", str(args.rank)]
    module = Path(args.output).stem if args.output != "-" else "solver"
    src = generate_solver(f, dps=args.dps, diagonal=args.diagonal, rank=args.rank, command=" ".join(command),
                          module=module)
    if args.output == "-":
        if args.json:
            print(dump_json({"activation": f.name, "output": None, "source": src}))
        else:
            print(src, end="")
        return 0
    path = Path(args.output)
    try:
        path.write_text(src, encoding="utf-8")
    except OSError as exc:
        raise ParameterError("output", args.output, "a writable file path", hint=str(exc)) from None
    spec = _kernels_source(f, args.dps, args.diagonal, args.rank)[0]
    info = {"activation": f.name, "output": str(path), "lines": src.count("\n"), "dps": args.dps,
            "diagonal": args.diagonal, "rank": args.rank,
            "a0": _float(spec.a0), "a1": _float(spec.a1), "nu": _float(spec.nu), "d": _float(spec.d)}
    if args.json:
        print(dump_json(info))
    else:
        print(f"wrote {path} ({info['lines']} lines): standalone solver for {f.name} "
              f"(a1 = {info['a1']:.6g}, nu = {info['nu']:.6g}, d = {info['d']:.6g})")
        print(f"try: python {shlex.quote(str(path))} --c 0.5 --gamma 0.1 1 --json")
    return 0
