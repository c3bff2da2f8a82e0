"""checks.py - the check/report harness of the Python tests (the C tests' TU_CHECK):
check(cond, what) counts and reports a failure; report() prints the totals and exits."""
import sys

_counts = {"passed": 0, "failed": 0}


def check(cond, what):
    _counts["passed" if cond else "failed"] += 1
    if not cond:
        print("FAIL:", what, file=sys.stderr)


def report():
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)
