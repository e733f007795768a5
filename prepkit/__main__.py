"""Allow ``python -m prepkit``."""

from prepkit.cli import main

main()
