"""`python -m tinylm.train`: run the command line (`tinylm.train.cli.main`)."""

from .cli import main

raise SystemExit(main())
