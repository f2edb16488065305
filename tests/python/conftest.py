# The mxlab package's tests compare it with the command-line tool: MXLAB_BINARY names the `mxlab` binary of the
# same build (ctest sets it, and PYTHONPATH to the package).
import os
import subprocess

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: the full versions of sampled tests (ctest label exhaustive)")


class Cli:
    def __init__(self, binary, folder):
        self.binary = binary
        self.folder = folder

    def run(self, *args, ok=True):
        r = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True, cwd=self.folder)
        if ok and r.returncode != 0:
            raise AssertionError(f"mxlab {' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
        return r

    def error(self, *args):
        """The message of a command that fails with bad input (exit 2), without the 'mxlab CMD: ' prefix."""
        r = self.run(*args, ok=False)
        assert r.returncode == 2, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        return line.split(": ", 1)[1]

    def csv(self, *args):
        """The rows of a --csv table as dicts of text."""
        lines = self.run(*args, "--csv").stdout.strip().splitlines()
        header = lines[0].split(",")
        import csv
        return [dict(zip(header, row)) for row in csv.reader(lines[1:])]

    def path(self, name):
        return os.path.join(self.folder, name)

    def save(self, name, array):
        p = self.path(name)
        np.save(p, array)
        return p


@pytest.fixture
def cli(tmp_path):
    binary = os.environ.get("MXLAB_BINARY")
    if not binary or not os.path.exists(binary):
        pytest.skip("MXLAB_BINARY does not name the mxlab binary")
    return Cli(binary, str(tmp_path))
