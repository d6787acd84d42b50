"""The command line: ``scoped-a2a`` / ``python -m scoped_a2a`` (:func:`main`)."""

from .serve import _parser, main

__all__ = ["_parser", "main"]
