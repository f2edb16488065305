#!/usr/bin/python3
"""Runs microxcaling's own quantization tests against mxlab.compat.microxcaling, on the CPU.

    PYTHONPATH=build/release/app/python scripts/microxcaling_tests.py DIR   # DIR: a checkout of microsoft/microxcaling

microxcaling's tests compare its CPU Python path (custom_cuda=False) with its C++/CUDA extension
(custom_cuda=True). Here every call with custom_cuda=True goes to the drop-in instead, so each test compares
microxcaling's Python path with mxlab, and the CUDA cases (no GPU) are left out. Prints the counts, and
each failure's test id with its first message line.
"""
import os
import sys

import pytest

FILES = ["test_quantize_mx.py", "test_corners_mx.py", "test_quantize_elemwise.py", "test_corners_elemwise.py"]
PATCHED = ["_quantize_mx", "_quantize_elemwise", "_quantize_bfloat", "_quantize_fp"]


class DropIn:
    def __init__(self):
        self.passed, self.failed, self.skipped = [], [], []

    def pytest_collection_modifyitems(self, items):
        import mxlab.compat.microxcaling as ours
        keep = []
        for item in items:
            if "cuda" in item.nodeid.split("[", 1)[-1] or "cuda" in item.originalname or \
                    "empty_quantization" in item.name:
                continue  # the GPU's cases (a CUDA device, or CPU against CUDA)
            module = item.module
            for name in PATCHED:
                original = getattr(module, name, None)
                if original is None or getattr(original, "_mxlab", False):
                    continue

                def routed(*args, _original=original, _ours=getattr(ours, name), **kwargs):
                    if kwargs.get("custom_cuda"):
                        return _ours(*args, **kwargs)
                    return _original(*args, **kwargs)
                routed._mxlab = True
                setattr(module, name, routed)
            keep.append(item)
        items[:] = keep

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            getattr(self, report.outcome).append(report)


def main():
    root = sys.argv[1]
    sys.path.insert(0, root)
    plugin = DropIn()
    args = [os.path.join(root, "mx", "tests", f) for f in FILES] + ["-q", "-rN", "-p", "no:cacheprovider",
                                                                   "--rootdir", root, "-o", "addopts="]
    pytest.main(args, plugins=[plugin])
    total = len(plugin.passed) + len(plugin.failed)
    print(f"\nmicroxcaling's tests against mxlab.compat.microxcaling: {len(plugin.passed)} of {total} passed, "
          f"{len(plugin.failed)} failed, {len(plugin.skipped)} skipped")
    for r in plugin.failed:
        crash = getattr(r.longrepr, "reprcrash", None)
        line = crash.message.splitlines()[0] if crash else str(r.longrepr).strip().splitlines()[-1]
        print("failed:", r.nodeid.split("::", 1)[-1], "-", line[:160])


if __name__ == "__main__":
    main()
