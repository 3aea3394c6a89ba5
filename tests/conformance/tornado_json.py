"""Run Tornado's own test runner (tornado.test.runtests: its warning
filters, its log checks) on the named test modules, and also write each
test's outcome to a JSON file, for the conformance lane
(tests/integration/test_conformance.py).

usage: python3 tornado_json.py OUT.json MODULE...

OUT.json holds {"TEST ID": ["pass"|"fail"|"skip", "traceback or reason"]};
the exit status is runtests' (non-zero also when a test logged at info
level or above, which runtests counts as a failure of the run).
"""
import json
import sys
import unittest

import tornado.test.runtests as runtests

OUT = sys.argv[1]
RESULTS = {}


class Result(unittest.TextTestResult):
    def addSuccess(self, test):
        super().addSuccess(test)
        RESULTS[test.id()] = ["pass", ""]

    def addFailure(self, test, err):
        super().addFailure(test, err)
        RESULTS[test.id()] = ["fail", self.failures[-1][1]]

    def addError(self, test, err):
        super().addError(test, err)
        RESULTS[test.id()] = ["fail", self.errors[-1][1]]

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        RESULTS[test.id()] = ["skip", reason]

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        RESULTS[test.id()] = ["skip", "expected failure"]

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        RESULTS[test.id()] = ["fail", "unexpected success"]


_factory = runtests.test_runner_factory


def test_runner_factory(stderr):
    base = _factory(stderr)

    class Runner(base):
        resultclass = Result

        def run(self, test):
            try:
                return super().run(test)
            finally:
                with open(OUT, "w") as f:
                    json.dump(RESULTS, f, indent=0)

    return Runner


runtests.test_runner_factory = test_runner_factory
sys.argv = [sys.argv[0], "--verbose"] + sys.argv[2:]
runtests.main()
