"""``python -m hipify INPUT -o OUTPUT [--check] [--mode auto|project|user] [--explain] [-q]``."""
from .cli import main

raise SystemExit(main())
