"""``{symattn-commands}``: the table of the ``symattn`` commands, generated from the parser (issue 16).

``docs/cli.md`` explains the conventions of the command line; the list of its commands is not
typed there but read from ``symattn.cli.build_parser()`` at build time: one row per registered
sub-command, with its one-line help and a link to its section of the generated reference
(``docs/api/cli.md``, sphinx-argparse). A command registered later appears without an edit.
"""

from __future__ import annotations

from docutils import nodes
from docutils.parsers.rst import Directive


def commands() -> list[tuple[str, str]]:
    """(name, one-line help) of every sub-command of ``symattn``, in the parser's order."""
    from symattn.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return [(name, helps.get(name, "")) for name in sub.choices]


class SymattnCommands(Directive):
    has_content = False

    def run(self):
        env = self.state.document.settings.env
        table = nodes.table(classes=["symattn-commands"])
        group = nodes.tgroup(cols=2)
        table += group
        group += nodes.colspec(colwidth=1)
        group += nodes.colspec(colwidth=4)
        head = nodes.thead()
        group += head
        row = nodes.row()
        for title in ("command", "computes"):
            row += nodes.entry("", nodes.paragraph(text=title))
        head += row
        body = nodes.tbody()
        group += body
        uri = "api/cli"  # the generated reference, relative to the docs root
        for name, text in commands():
            row = nodes.row()
            ref = nodes.reference("", "", internal=True,
                                  refuri=env.app.builder.get_relative_uri(env.docname, uri) + f"#symattn-{name}")
            ref += nodes.literal(text=name)
            row += nodes.entry("", nodes.paragraph("", "", ref))
            row += nodes.entry("", nodes.paragraph(text=text))
            body += row
        return [table]


def setup(app):
    app.add_directive("symattn-commands", SymattnCommands)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
