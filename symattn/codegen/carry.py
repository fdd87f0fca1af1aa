r"""Carry library source into a standalone module: verbatim text, edited at the level of the AST.

A generated solver is the concatenation of module bodies (the solver runtime
:mod:`symattn.backends.solver` and the public functions :mod:`symattn.codegen.standalone`) and
of the objects those bodies import from the rest of the library. :func:`carry` reads each body
with :mod:`ast` and drops, by their line spans, every statement that cannot stand alone:

- the module docstring and ``from __future__`` (the generated module has its own);
- every import: relative ones are replaced by copies of what they bind (a function's or a
  class's source from :func:`inspect.getsource`, emitted under the name it is bound to, or a
  literal constant as ``name = repr(value)``), absolute ones are hoisted to the top of the module
  (numpy, scipy and the standard library only);
- top-level definitions of the names the generated module defines itself (the activation's
  constants, ``KERNELS``, and the runtime's entry points that the public functions replace).

Everything else, comments included, is copied verbatim, so that a function of the generated
module has exactly the source text of the library's.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass, field

#: top-level packages a generated module may import (besides the standard library)
ALLOWED_IMPORTS = frozenset({"numpy", "scipy"})


@dataclass
class Carried:
    """What :func:`carry` returns: hoisted imports, copied objects and the bodies, as source."""

    imports: list = field(default_factory=list)     # import statements (source lines), in order
    objects: list = field(default_factory=list)     # (origin "module.name", source)
    bodies: list = field(default_factory=list)      # (module name, source)


def _defined_names(node) -> set:
    """The names a top-level statement binds (def, class, assignments)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _span(node):
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno


def _check_import(node, origin, allowed=ALLOWED_IMPORTS):
    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
    for name in names:
        top = name.split(".")[0]
        if top not in allowed and top not in sys.stdlib_module_names:
            raise AssertionError(f"{origin}: a generated module may not import {name}")


def _is_function(obj) -> bool:
    """A function, or a function wrapped by a decorator such as functools.lru_cache."""
    return inspect.isfunction(obj) or (callable(obj) and hasattr(obj, "__wrapped__")
                                       and inspect.isfunction(inspect.unwrap(obj)))


def _is_literal(obj) -> bool:
    """A module-level constant that can be written as ``name = repr(value)`` (numbers, strings, tuples of them)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return True
    return isinstance(obj, tuple) and all(_is_literal(x) for x in obj)


def _origin(obj, fallback: str) -> str:
    """Where ``obj`` is defined: "module.qualname" of a function or class (one object imported through two
    modules is one origin), else ``fallback`` ("module.name" of the module that binds it)."""
    if _is_function(obj) or inspect.isclass(obj):
        obj = obj if inspect.isclass(obj) else inspect.unwrap(obj)
        return f"{obj.__module__}.{obj.__qualname__}"
    return fallback


def _bound_names(nodes) -> set:
    return set().union(*(_defined_names(n) for n in nodes)) if nodes else set()


def _no_nested_relative_imports(tree, origin):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{origin}: a relative import inside a function cannot be carried: "
                                 f"{ast.unparse(node)}")


def _loaded_names(tree) -> set:
    """The free names ``tree`` reads: loaded names (and base classes) that no parameter or
    assignment inside ``tree`` binds (a parameter ``d`` is not the module's global ``d``)."""
    local = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)} | {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} | {
        b.id for n in ast.walk(tree) if isinstance(n, ast.ClassDef) for b in n.bases if isinstance(b, ast.Name)}
    return loaded - local


class _Carrier:
    def __init__(self, defined, allowed=ALLOWED_IMPORTS):
        self.allowed = frozenset(allowed)
        self.defined = set(defined)      # names the generated module defines itself
        self.bound = {}                  # name -> origin, for everything already emitted
        self.deferred = []               # assignments, emitted after every copied definition
        self.out = Carried()

    def add_import(self, node, origin):
        _check_import(node, origin, self.allowed)
        src = ast.unparse(node)
        if src not in self.out.imports:
            self.out.imports.append(src)

    def bind(self, name, obj, origin):
        """Emit ``obj`` (imported by a carried body) under ``name``, with what it needs."""
        if name in self.defined:
            return
        if name in self.bound:
            if self.bound[name] != origin:
                raise AssertionError(f"{name} is bound to both {self.bound[name]} and {origin}")
            return
        self.bound[name] = origin
        if _is_function(obj) or inspect.isclass(obj):
            obj = inspect.unwrap(obj) if not inspect.isclass(obj) else obj   # an lru_cache'd function: its decorated source
            src = textwrap.dedent(inspect.getsource(obj))
            tree = ast.parse(src)
            _no_nested_relative_imports(tree, origin)
            home = sys.modules[obj.__module__]
            self._needs(tree, home, f"{obj.__module__}.{obj.__qualname__}", own=obj.__name__)
            if name != obj.__name__:  # ``import x as y``: the copy is defined as y
                lines = src.splitlines(keepends=True)
                node = tree.body[0]
                head = lines[node.lineno - 1]
                word = "class" if inspect.isclass(obj) else "def"
                old = f"{word} {obj.__name__}"
                if not head[node.col_offset:].startswith(old):
                    raise AssertionError(f"cannot rename {origin}")
                lines[node.lineno - 1] = head[:node.col_offset] + f"{word} {name}" + head[node.col_offset + len(old):]
                src = "".join(lines)
            self.out.objects.append((origin, src.rstrip() + "\n"))
            return
        src = f"{name} = {obj!r}\n"
        if ast.literal_eval(ast.parse(src).body[0].value) != obj:
            raise AssertionError(f"{origin} is neither a function, a class nor a literal")
        self.out.objects.append((origin, src))

    def bind_assignment(self, name, home):
        """Emit the top-level ``name = ...`` statement of ``home`` (e.g. a tuple of classes), with what it uses."""
        origin = f"{home.__name__}.{name}"
        if name in self.defined or name in self.bound:
            return
        src = inspect.getsource(home)
        for node in ast.parse(src).body:
            if isinstance(node, ast.Assign) and _defined_names(node) == {name}:
                self.bound[name] = origin
                text = ast.get_source_segment(src, node)
                self._needs(ast.parse(text), home, origin, own=name)
                self.deferred.append((origin, text + "\n"))   # after the classes it may name
                return
        raise AssertionError(f"{origin} is neither a function, a class, a literal nor a simple assignment")

    def _needs(self, tree, home, origin, own):
        """Carry the globals of ``home`` that the copied ``tree`` uses (classes, functions, imports)."""
        imports = {}
        for node in ast.parse(inspect.getsource(home)).body:
            if isinstance(node, ast.Import) or isinstance(node, ast.ImportFrom) and node.level == 0:
                for alias in node.names:
                    imports[alias.asname or alias.name.split(".")[0]] = node
        for name in sorted(_loaded_names(tree)):
            if name == own or name in self.defined or hasattr(builtins, name) and not hasattr(home, name):
                continue
            if name in imports:
                self.add_import(imports[name], origin)
            elif hasattr(home, name) and not inspect.ismodule(getattr(home, name)):
                obj = getattr(home, name)
                if _is_function(obj) or inspect.isclass(obj) or _is_literal(obj):
                    self.bind(name, obj, _origin(obj, f"{home.__name__}.{name}"))
                elif name in vars(home) and not name.startswith("__"):
                    self.bind_assignment(name, home)

    def body(self, module, drop):
        """``module``'s source without its docstring, imports and the definitions of ``drop``."""
        src = inspect.getsource(module)
        tree = ast.parse(src)
        cut, dropped = [], set()
        for i, node in enumerate(tree.body):
            if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                cut.append(_span(node))
            elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
                cut.append(_span(node))
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), module.__package__)
                home = importlib.import_module(base)
                for alias in node.names:
                    obj = getattr(home, alias.name)
                    self.bind(alias.asname or alias.name, obj, _origin(obj, f"{base}.{alias.name}"))
                cut.append(_span(node))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.add_import(node, module.__name__)
                cut.append(_span(node))
            elif _defined_names(node) and _defined_names(node) <= set(drop) | self.defined:
                cut.append(_span(node))
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in self.defined:
                    dropped.add(node.name)   # a name the generated module defines itself may stay in use
        kept = [n for n in tree.body if not any(a <= n.lineno <= b for a, b in cut)]
        for node in kept:
            _no_nested_relative_imports(node, module.__name__)
        used = set().union(*(_loaded_names(n) for n in kept)) if kept else set()
        if dropped & used:
            raise AssertionError(f"{module.__name__}: dropped definitions still used: {sorted(dropped & used)}")
        lines = src.splitlines(keepends=True)
        for a, b in cut:
            for k in range(a - 1, b):
                lines[k] = None
        text = "".join(line for line in lines if line is not None)
        while "\n\n\n\n" in text:
            text = text.replace("\n\n\n\n", "\n\n\n")
        self.out.bodies.append((module.__name__, text.strip("\n") + "\n"))


def carry(bodies, objects=(), defined=(), allowed=ALLOWED_IMPORTS) -> Carried:
    """Carry module bodies and what they import into the parts of one standalone source.

    Parameters
    ----------
    bodies : list of (module, drop)
        The bodies to copy, in the order they are emitted; ``drop`` names top-level functions of
        that body to leave out (a later body defines its own), which the rest of the body must
        not use. A body's relative imports of another body's names are dropped.
    objects : list of (name, object)
        Functions, classes or literals to carry besides what the bodies import.
    defined : iterable of str
        Names the generated module defines itself: their imports and top-level definitions are
        dropped everywhere.
    allowed : set of str
        The top-level packages the carried source may import besides the standard library.

    Returns
    -------
    Carried
        ``imports`` (to hoist), ``objects`` (copied definitions, each after what it needs) and
        ``bodies``.

    Examples
    --------
    >>> from symattn.backends import quadrature
    >>> out = carry([(quadrature, ())])
    >>> out.imports, [name for name, _ in out.bodies]
    (['import numpy as np'], ['symattn.backends.quadrature'])
    """
    carrier = _Carrier(defined, allowed)
    for module, _ in bodies:
        # names a body defines are bound to it before any import is resolved, so that a later
        # body importing them (the public functions importing the runtime) drops the import
        for name in _bound_names(ast.parse(inspect.getsource(module)).body):
            carrier.bound.setdefault(name, f"{module.__name__}.{name}")
    for name, obj in objects:
        module = getattr(obj, "__module__", None) or "symattn"
        carrier.bind(name, obj, f"{module}.{getattr(obj, '__name__', name)}")
    for module, drop in bodies:
        carrier.body(module, drop)
    carrier.out.objects.extend(carrier.deferred)
    return carrier.out
