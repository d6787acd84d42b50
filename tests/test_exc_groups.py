"""protocol/exc_groups.first_leaf, the one walk of exception groups that the Redis listener
(its stop, a cancellation in a group), the command line's start-up errors (a port in use inside
hypercorn's groups) and its Ctrl-C check share."""

from __future__ import annotations

import errno
import socket
from typing import TypeGuard

from scoped_a2a.cli.help import StartupError
from scoped_a2a.cli.interrupt import interrupted
from scoped_a2a.cli.startup import listen_error
from scoped_a2a.protocol.exc_groups import first_leaf


def _os(exc: BaseException) -> TypeGuard[OSError]:
    return isinstance(exc, OSError)


def test_first_match_depth_first_in_group_order() -> None:
    first, second = OSError(1, "first"), OSError(2, "second")
    tree = BaseExceptionGroup("outer", [
        ValueError("no"),
        BaseExceptionGroup("inner", [KeyError("no"), first]),
        second,
    ])
    assert first_leaf(tree, _os) is first
    assert first_leaf(second, _os) is second  # a bare exception is its own leaf
    assert first_leaf(BaseExceptionGroup("g", [ValueError("no")]), _os) is None


def test_a_group_may_match_as_a_whole() -> None:
    group = ExceptionGroup("g", [ValueError("a")])

    def is_group(exc: BaseException) -> TypeGuard[ExceptionGroup[ValueError]]:
        return isinstance(exc, ExceptionGroup)

    # (the outer group holds a KeyboardInterrupt, so it is not an ExceptionGroup itself)
    outer = BaseExceptionGroup("outer", [KeyboardInterrupt(), group])
    assert first_leaf(outer, is_group) is group


def test_listen_error_and_interrupted_use_it() -> None:
    in_use = OSError(errno.EADDRINUSE, "in use")
    lookup = socket.gaierror(-2, "Name or service not known")
    refused = OSError(errno.ECONNREFUSED, "refused")  # not a listening error
    nested = ExceptionGroup("serve", [refused, ExceptionGroup("bind", [in_use])])
    assert listen_error(nested) is in_use
    assert listen_error(ExceptionGroup("g", [lookup])) is lookup
    startup = StartupError("the store is out of reach")
    assert listen_error(BaseExceptionGroup("g", [KeyboardInterrupt(), startup])) is startup
    assert listen_error(refused) is None
    assert interrupted(BaseExceptionGroup("g", [ValueError(), BaseExceptionGroup(
        "h", [KeyboardInterrupt()])]))
    assert not interrupted(ExceptionGroup("g", [ValueError()]))
