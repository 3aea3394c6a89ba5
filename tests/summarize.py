#!/usr/bin/env python3
"""Sum the JUnit XML files of a test run and print one closing line.

usage: summarize.py RESULTS_DIR

RESULTS_DIR holds *.xml (pytest and cmocka write JUnit XML) and
stages.txt, one "STAGE pass|fail" line per stage that scripts/check ran.
A stage that passed counts as one passed test only when it left no XML (a
check such as style or the kernel-log verdict); a stage that failed counts
as one failed test when it left no XML or its XML shows no failure (the
failure happened outside the tests: a build error, a splat, a crash).
Exits 0 only when nothing failed and at least one test ran.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET

# Which XML files each stage writes.
STAGE_XML = {"unit": "cmocka-*.xml", "host": "host.xml", "vm-kernel": "vm.xml",
             "pair-kernel": "pair.xml", "debug-kernel": "debug.xml"}


def count(path):
    """(passed, failed, skipped) in one JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as err:
        print(f"summarize: cannot read {path}: {err}", file=sys.stderr)
        return 0, 1, 0
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    passed = failed = skipped = 0
    for s in suites:
        tests = int(s.get("tests", 0))
        bad = int(s.get("failures", 0)) + int(s.get("errors", 0))
        skip = int(s.get("skipped", 0))
        passed += tests - bad - skip
        failed += bad
        skipped += skip
    return passed, failed, skipped


def main():
    res = pathlib.Path(sys.argv[1])
    passed = failed = skipped = 0
    per_file = {}
    for xml in sorted(res.glob("*.xml")):
        per_file[xml.name] = count(xml)
        p, f, s = per_file[xml.name]
        passed, failed, skipped = passed + p, failed + f, skipped + s

    stages = res / "stages.txt"
    lines = stages.read_text().split("\n") if stages.exists() else []
    for line in filter(None, lines):
        stage, verdict = line.split()
        files = [n for n in per_file
                 if pathlib.PurePath(n).match(STAGE_XML.get(stage, "\0"))]
        if stage in ("vm-kernel", "pair-kernel", "debug-kernel"):
            # Always its own test: module loaded, unloaded, log clean.
            files = []
        if verdict == "pass":
            if not files:
                passed += 1
        elif not files or not any(per_file[n][1] for n in files):
            failed += 1
            print(f"summarize: stage {stage} failed", file=sys.stderr)

    tail = f", {skipped} skipped" if skipped else ""
    print(f"check: {passed} passed, {failed} failed{tail}")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
