"""What `ledgerlake COMMAND --help` says beyond the options: each command's description and
epilog, read from help.md beside this file, and the formatter that keeps their paragraphs.
`pipeline.cli.build_parser` applies them; docs/cli.md is generated from the parser (`make
docs`), so help.md is the CLI reference's prose.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path

PROSE = Path(__file__).with_name("help.md")


def sections(path: Path = PROSE) -> dict[tuple[str, str], str]:
    """(command, "description" or "epilog") -> its text, from the `## COMMAND PART` sections."""
    out = {}
    for block in re.split(r"^## ", path.read_text(), flags=re.MULTILINE)[1:]:
        head, _, body = block.partition("\n")
        name, part = head.split()
        out[name, part] = body.strip("\n")
    return out


class Paragraphs(argparse.HelpFormatter):
    """Fills each paragraph of a description or epilog on its own, and prints example
    blocks as written (argparse's default runs every paragraph into one)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            textwrap.indent(block, indent) if block.startswith("    ") else
            textwrap.fill(" ".join(block.split()), width, initial_indent=indent,
                          subsequent_indent=indent)
            for block in text.split("\n\n"))


def explain(parser: argparse.ArgumentParser, commands: argparse._SubParsersAction) -> None:
    """Gives the parser and each command their prose and the formatter that keeps it."""
    prose = sections()
    if unknown := sorted({name for name, _ in prose} - {"ledgerlake", *commands.choices}):
        raise ValueError(f"{PROSE} has prose for no command: {', '.join(unknown)}")
    parser.epilog = prose.get(("ledgerlake", "epilog"))
    parser.formatter_class = Paragraphs
    for name, command in commands.choices.items():
        command.formatter_class = Paragraphs
        command.description = prose.get((name, "description"), command.description)
        command.epilog = prose.get((name, "epilog"), command.epilog)
