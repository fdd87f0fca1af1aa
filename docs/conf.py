"""Sphinx configuration of the symattn documentation site.

Build (warnings are errors; ``tests/test_docs.py`` runs the same command)::

    pip install -e '.[docs]'
    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are MyST Markdown (``myst_parser``), the math is typeset by MathJax 3 served from the site
itself (``sphinx-mathjax-offline`` ships MathJax 3.2.2, so no CDN is needed), the API reference is
generated from the numpydoc docstrings (``autodoc`` + ``autosummary`` + ``numpydoc``), and the CLI
reference is generated from ``symattn.cli.build_parser`` by ``sphinx-argparse``, so that it cannot
drift from the parser.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document the checkout, also when it is not installed
sys.path.insert(0, str(DOCS / "_ext"))  # the site's own extensions (docnumbers, docexec, clitable)

import symattn  # noqa: E402

# -- project ---------------------------------------------------------------------------------------
project = "symattn"
author = "the symattn developers"
copyright = "the symattn developers"
release = symattn.__version__
version = ".".join(release.split(".")[:2])

# -- extensions ------------------------------------------------------------------------------------
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx.ext.mathjax",
    "sphinxarg.ext",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax: the site works offline
    "clitable",  # {symattn-commands}: the table of commands of docs/cli.md, from the parser
    "docexec",  # the >>> examples of the tutorials are executed at build time (a wrong output fails -W)
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
templates_path = ["_templates"]
html_static_path = ["_static"]

# -- MyST ------------------------------------------------------------------------------------------
myst_enable_extensions = [
    "dollarmath",   # $...$ and $$...$$ (docs/theory.md)
    "amsmath",      # \begin{align} ... at the top level
    "colon_fence",
    "deflist",
    "substitution",  # {{ key }}: the numbers the gallery quotes, computed by docs/_ext/docnumbers.py
]
myst_dmath_double_inline = True
# Every number the gallery quotes is computed here, from the CSVs of docs/figures and the code
# (docs/_ext/docnumbers.py); an unknown {{ key }} is a warning, so the -W build fails on it.
import docnumbers  # noqa: E402

myst_substitutions = docnumbers.substitutions()
myst_heading_anchors = 4  # [text](#slug) links inside a page (docs/cli.md, docs/new_activation.md)

# -- MathJax ---------------------------------------------------------------------------------------
# Every display equation gets a number, (1), (2), ... per page: docs/theory.md states its results
# as display equations without labels, and the numbers make them citable on the page.
mathjax3_config = {
    "tex": {"tags": "all"},
}

# -- autodoc / autosummary / numpydoc --------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
# a module's page lists what its __all__ names (symattn.limits: limits, the closed forms), each on its own page
# with signature, parameters, returns, raises and example, not what it imports (dataclass, field)
autosummary_ignore_module_all = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc Parameters section states the types
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# -- HTML ------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"symattn {release}"
html_css_files = ["symattn.css"]
html_favicon = "_static/favicon.svg"  # also spares the browser a request for /favicon.ico
html_theme_options = {
    "source_repository": "",
    "navigation_with_keys": True,
}
html_last_updated_fmt = None

suppress_warnings = [
    # docs/cli.md shows JSON shapes with "..." placeholders: not valid JSON, drawn as plain text
    "misc.highlighting_failure",
]

# -- the CLI reference (sphinx-argparse) -----------------------------------------------------------
# The parser's texts are written for a terminal, not in reStructuredText: the descriptions and
# epilogs are pre-wrapped (RawDescriptionHelpFormatter) and the help strings use |x|, x**2, a_k.
# On the site the descriptions and epilogs are shown as `--help` shows them (literal blocks) and
# the help strings are escaped, so that the page is generated from the parser as it is.
_RST_SPECIAL = re.compile(r"([\\*`|_\[\]<>])")


def _rst_escape(text: str) -> str:
    return _RST_SPECIAL.sub(r"\\\1", text)


def _rst_literal(text: str) -> str:
    return ".. code-block:: text\n\n" + "\n".join("    " + line for line in text.splitlines())


def _plain_texts(data: dict) -> dict:
    for key in ("description", "epilog"):
        if data.get(key):
            data[key] = _rst_literal(data[key])
    if data.get("help"):
        data["help"] = _rst_escape(data["help"])
    for group in data.get("action_groups", ()):
        for option in group.get("options", ()):
            if option.get("help"):
                option["help"] = _rst_escape(option["help"])
    for child in data.get("children", ()):
        _plain_texts(child)
    return data


def _patch_sphinxarg() -> None:
    import sphinxarg.ext

    if getattr(sphinxarg.ext.parse_parser, "_symattn", False):
        return
    original = sphinxarg.ext.parse_parser

    def parse_parser(*args, **kwargs):
        return _plain_texts(original(*args, **kwargs))

    parse_parser._symattn = True
    sphinxarg.ext.parse_parser = parse_parser


# -- cross-references to the theory ----------------------------------------------------------------
# Docstrings cite the theory as ``docs/theory.md §n`` (or ``§n.m``). On the site, each citation in an
# API page becomes a link to that section of the theory page (the role :theory:`§n.m`, resolved
# once every page is read); a citation of a section that docs/theory.md does not have is a warning,
# so the -W build fails on it.
from docutils import nodes  # noqa: E402
from sphinx.util import logging as sphinx_logging  # noqa: E402

_CITATION = re.compile(r"(?<![`<\w])docs/theory\.md\s+§(\d+(?:\.\d+)?)")
_SECTION_TITLE = re.compile(r"^§(\d+(?:\.\d+)?)\.?(\s|$)")
_logger = sphinx_logging.getLogger("symattn.docs")


def _cite_theory(app, what, name, obj, options, lines):
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if "docs/theory.md" in line and not stripped.startswith((">>>", "...")):
            lines[i] = _CITATION.sub(lambda m: f":theory:`§{m.group(1)}`", line)


# The docstrings are written for a terminal too: |t| is an absolute value, not a reStructuredText
# substitution. Outside inline literals, doctest lines and literal/math blocks (after a line
# ending in '::'), such bars are escaped so that they are shown as typed.
_BARS = re.compile(r"(?<![\\|\w])\|(?=[^\s|])([^|`\n]*?[^\s|\\])\|(?![\w|])")


def _escape_bars(app, what, name, obj, options, lines):
    block_indent = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if block_indent is not None:
            if not stripped or indent > block_indent:
                continue
            block_indent = None
        if stripped.endswith("::"):
            block_indent = indent
        if "|" not in line or stripped.startswith((">>>", "...")):
            continue
        parts = re.split(r"(``.*?``|`[^`]*`)", line)
        lines[i] = "".join(p if k % 2 else _BARS.sub(r"\\|\1\\|", p) for k, p in enumerate(parts))


def _theory_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    number = text.lstrip("§").strip()
    node = nodes.inline(rawtext, f"docs/theory.md §{number}", classes=["theory-ref"])
    node["theory_section"] = number
    node.line = lineno
    return [node], []


def _theory_sections(env) -> dict[str, str]:
    """'5.2' -> the HTML id of the section '§5.2 ...' of the theory page."""
    if getattr(env, "_symattn_theory_ids", None) is None:
        ids: dict[str, str] = {}
        for section in env.get_doctree("theory").findall(nodes.section):
            m = _SECTION_TITLE.match(section[0].astext()) if len(section) else None
            if m and section["ids"]:
                ids.setdefault(m.group(1), section["ids"][0])
        env._symattn_theory_ids = ids
    return env._symattn_theory_ids


def _resolve_theory_refs(app, doctree, docname):
    refs = [n for n in doctree.findall(nodes.inline) if "theory_section" in n]
    if not refs:
        return
    sections = _theory_sections(app.env)
    uri = app.builder.get_relative_uri(docname, "theory")
    for node in refs:
        number = node["theory_section"]
        if number not in sections:
            _logger.warning(f"docs/theory.md has no section §{number}", location=node)
            node["classes"] = []  # docutils refuses to drop the attributes of a replaced node
            node.replace_self(nodes.Text(node.astext()))
            continue
        ref = nodes.reference("", "", internal=True, refuri=f"{uri}#{sections[number]}",
                              reftitle=f"docs/theory.md §{number}")
        ref += nodes.Text(node.astext())
        node.replace_self(ref)


def setup(app):
    _patch_sphinxarg()
    app.add_role("theory", _theory_role)
    app.connect("autodoc-process-docstring", _cite_theory)
    app.connect("autodoc-process-docstring", _escape_bars)
    app.connect("doctree-resolved", _resolve_theory_refs)
    # autosummary writes its stubs next to the sources (docs/api/generated, ignored by git); they
    # are written afresh at each build, so that a name dropped from the API pages leaves no orphan
    shutil.rmtree(DOCS / "api" / "generated", ignore_errors=True)
    os.makedirs(DOCS / "api" / "generated", exist_ok=True)
