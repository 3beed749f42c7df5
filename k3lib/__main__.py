"""`python -m k3lib` is the `k3` command."""

from .cli.main import main

raise SystemExit(main())
