"""`ledgerlake`, the one console script: its parser and commands (`commands`), their help
(`help`), the reference written from them (`reference`, docs/cli.md), and the commands big
enough for a module of their own: `sql`, `report`, `demo` (with `dev`)."""

from .commands import build_parser, main

__all__ = ["build_parser", "main"]
