"""The table of conformance-kit runs (a2a-tck 1.0-dev), read from each run's JUnit XML.

    python scripts/tck10_table.py OUTDIR/*.xml

One row per XML file (named SERVER-BACKEND-TRANSPORT-LEVEL.xml by scripts/run_tck10.sh):
passed / failed / xfailed / skipped test cases, then each failed or xfailed test with the first
line of its message. "xfailed" is how the kit reports a SHOULD requirement that is not met
(``pytest.xfail``, a ``<skipped type="pytest.xfail">`` in the XML): a failure, not a skip.

Why the XML and not the kit's own summary: the kit's console report counts a skipped
requirement as not passed (its "compatibility" percentage and per-requirement lines list skips
with the failures), while the XML says for each test case whether it passed, failed, errored
or was skipped (e.g. a gRPC test with no gRPC interface, or a capability the card does not
declare).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def counts(path: Path) -> tuple[dict[str, int], list[str]]:
    """Passed/failed/skipped counts of one JUnit file, and its failures (``test: message``)."""
    tally = {"passed": 0, "failed": 0, "xfailed": 0, "skipped": 0}
    failures: list[str] = []
    for case in ET.parse(path).iter("testcase"):
        outcome = "passed"
        for child in case:
            xfail = child.tag == "skipped" and child.get("type") == "pytest.xfail"
            if child.tag in ("failure", "error") or xfail:
                outcome = "xfailed" if xfail else "failed"
                test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
                message = ((child.get("message") or "").splitlines() or [""])[0][:300]
                failures.append(f"{test} ({outcome}): {message}")
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "skipped"
        tally[outcome] += 1
    return tally, failures


def main(paths: list[str]) -> None:
    print("| run | passed | failed | xfailed | skipped |")
    print("|---|---|---|---|---|")
    details = []
    for raw in sorted(paths):
        path = Path(raw)
        tally, failures = counts(path)
        name = path.name.removesuffix(".xml")
        print(f"| {name} | {tally['passed']} | {tally['failed']} | {tally['xfailed']} | "
              f"{tally['skipped']} |")
        details.append((name, failures))
    for name, failures in details:
        print(f"\n{name}: {len(failures)} failed or xfailed")
        for line in failures:
            print(f"  {line}")


if __name__ == "__main__":
    main(sys.argv[1:])
