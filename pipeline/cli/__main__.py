"""`python -m pipeline.cli`: how the servers a command starts are started."""

from .commands import main

raise SystemExit(main())
