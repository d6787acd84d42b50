"""``python -m scoped_a2a``; the ``scoped-a2a`` script calls :func:`main` from here too."""

import sys

from .cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
