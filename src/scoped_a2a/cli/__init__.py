"""The command line (``scoped-a2a``, ``python -m scoped_a2a``), on top of every other layer:
nothing below it imports it (tests/test_layering.py).

=====================  ============================================================
module                 its job
=====================  ============================================================
``main``               the entry point: dispatch, one-line errors, Ctrl-C at any time
``parser``             the parser's frame: the program and its commands
``help``               help formatting, one-line errors with a suggestion
``interrupt``          telling a Ctrl-C apart (alone or in an exception group)
``arg_types``          the option value types (seconds, sizes, ports...)
``serve``              the ``serve`` command
``serve_options``      ``serve``'s option groups (listening, agent, runs, limits...)
``auth_options``       authentication options, and what they build
``observe_options``    logs, metrics, tracing options
``signals``            SIGINT/SIGTERM shutdown, SIGHUP reload
``startup``            running a server command; its start-up failures in one line
``stores``             ``--store``: scheme -> store module; the stores' options
``store_memory``       ``--store memory``
``store_sqlite``       ``--store sqlite:PATH``
``store_redis``        ``--store redis://...`` (coredis imported only here)
``worker``             the ``worker`` command (Redis)
``client_common``      what the client commands share: options, exit statuses, failures
``send``               the ``send`` command
``tasks``              ``get``, ``list``, ``cancel``, ``subscribe``
``format``             how the client commands print tasks and events
=====================  ============================================================
"""

from .main import main

__all__ = ["main"]
