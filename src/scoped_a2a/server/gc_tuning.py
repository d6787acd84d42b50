"""Garbage-collector settings for a long-running server, applied once it has started.

CPython's cyclic collector walks every tracked object of the generation it collects. A full
(oldest-generation) collection in a server therefore also walks everything imported at start-up
(modules, classes, functions: about 44,000 objects for ``serve``, ~30 ms a walk here), which
never becomes garbage, and does so more often the more requests allocate. Two settings remove
that cost without changing what is collected:

- ``gc.freeze()`` once start-up is over: what exists then moves to the permanent generation, which
  collections skip. Garbage is collected first, so only live objects are frozen. The cost: a
  frozen object that later becomes cyclic garbage is never freed (start-up state normally lives as
  long as the process).
- a higher youngest-generation threshold (``GEN0_THRESHOLD`` allocations instead of 700): fewer
  young collections, and short-lived request objects die before they are promoted, so older
  generations fill (and are walked) more slowly.

Ended tasks in the memory store are bytes objects, which the collector does not track at all, so
ten thousand of them add nothing to its walks either (docs/memory.md).

``apply`` does this at most once per process (a service that calls ``serve`` several times
freezes only its start-up state), and not at all when ``SCOPED_A2A_GC_TUNING`` is ``0``, ``off``,
``false`` or ``no``. It never raises.
"""

from __future__ import annotations

import gc
import logging
import os

log = logging.getLogger("scoped_a2a.serve")

ENV = "SCOPED_A2A_GC_TUNING"
"""Set to 0/off/false/no to leave the collector as Python configured it."""

GEN0_THRESHOLD = 20_000
"""Allocations (minus deallocations) of tracked objects between young collections (Python's
default is 700): a young collection still runs every few requests under load."""

_applied = False


def disabled_by_env() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no")


def apply() -> bool:
    """Collect, freeze what is alive, raise the young threshold; True if this call did it.

    False when already applied in this process or switched off by ``SCOPED_A2A_GC_TUNING``.
    """
    global _applied
    if _applied or disabled_by_env():
        return False
    _applied = True
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    if gen0:  # 0: the collector is switched off; leave it so
        gc.set_threshold(max(gen0, GEN0_THRESHOLD), gen1, gen2)
    log.debug("gc tuned: %d objects frozen, thresholds %s", gc.get_freeze_count(),
              gc.get_threshold())
    return True
