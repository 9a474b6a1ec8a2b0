"""``python -m hipify SRC_DIR -o OUT_DIR [--check]``."""
from .cli import main

raise SystemExit(main())
