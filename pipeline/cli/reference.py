"""docs/cli.md, the command-line reference, written from the parser itself
(`pipeline.cli.build_parser`): every command with its usage, description, arguments (help,
default, choices) and epilog. tests/test_docs.py fails when the page and the parser differ.

    .venv/bin/python -m pipeline.cli.reference            # or: make docs
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMAND = "make docs"  # what a stale page asks for
WIDTH = 88  # usage lines wrap here, whatever the terminal


def _commands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """Each documented command: its one-line help and its parser, in the parser's order."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return {name: (helps.get(name, ""), p) for name, p in sub.choices.items()}


def _links(text: str) -> str:
    """docs/x.md and bench/README.md as links from docs/, where this page lives."""
    return re.sub(r"\b(docs/([\w-]+\.md)|bench/README\.md)\b",
                  lambda m: f"[{m[1]}]({m[2] or '../' + m[1]})", text)


def _prose(text: str | None) -> list[str]:
    """A description or epilog as Markdown: its paragraphs, and its indented blocks of
    examples as code."""
    out: list[str] = []
    for block in (text or "").split("\n\n"):
        if not block.strip():
            continue
        if block.startswith("    "):
            out += ["```sh", *(line.removeprefix("    ") for line in block.splitlines()), "```", ""]
        else:
            out += [_links(" ".join(block.split())), ""]
    return out


def _cell(text: str) -> str:
    return _links(" ".join(text.split()).replace("|", "\\|"))


def _default(action: argparse.Action) -> str | None:
    if action.help and "%(default)" in action.help:
        return None  # the help says it
    return None if action.default in (None, False, [], argparse.SUPPRESS) else str(action.default)


def _arguments(command: argparse.ArgumentParser) -> list[str]:
    formatter = argparse.HelpFormatter(command.prog, width=WIDTH)
    rows = []
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = (formatter._format_action_invocation(action) if action.option_strings
                else action.metavar or action.dest)
        meaning = formatter._expand_help(action) if action.help else ""
        extra = []
        if action.choices is not None:
            extra.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if (default := _default(action)) is not None:
            extra.append(f"default `{default}`")
        if action.required and action.option_strings:
            extra.append("required")
        meaning = "; ".join(x for x in [meaning, *extra] if x)
        rows.append(f"| `{name}` | {_cell(meaning)} |")
    return ["| argument | meaning |", "|---|---|", *rows, ""] if rows else []


def _usage(command: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(command.prog, width=WIDTH)
    formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups,
                        prefix="")
    return formatter.format_help().strip()


def markdown() -> str:
    from .commands import build_parser

    parser = build_parser()
    commands = _commands(parser)
    lines = [
        "# The command line",
        "",
        f"Generated from the parser (`pipeline/cli/commands.py`, its prose in `pipeline/cli/help.md`) by "
        f"`{COMMAND}`; a test fails when this page and the parser differ. "
        "`ledgerlake COMMAND --help` prints the same. The console script is `.venv/bin/ledgerlake`.",
        "",
        *_prose(parser.description),
        "| command | what it does |",
        "|---|---|",
        *(f"| [`{name}`](#ledgerlake-{name}) | {_cell(help)} |"
          for name, (help, _) in commands.items()),
        "",
        *_prose(parser.epilog),
    ]
    for name, (help, command) in commands.items():
        lines += [f"## `ledgerlake {name}`", "", "```", _usage(command), "```", "",
                  *_prose(command.description or help), *_arguments(command),
                  *_prose(command.epilog)]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = markdown()
    if argv == ["--check"]:
        if DOC.exists() and DOC.read_text() == text:
            return 0
        print(f"{DOC.relative_to(DOC.parents[1])} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
