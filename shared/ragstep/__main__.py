"""``python -m ragstep``: the command line, as the ``ragstep`` console script runs it."""

from ragstep.entry.cli.main import main

raise SystemExit(main())
