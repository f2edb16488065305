# The examples of docs/python.md run as written (the training loop for 3 steps; all 300 under the slow marker).
import os
import re

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")
BLOCKS = re.findall(r"```python\n(.*?)```", open(DOC).read(), re.S)
FASHION = "/usr/share/datasets/fashion-mnist/"


def run(code):
    exec(compile(code, "docs/python.md", "exec"), {"__name__": "docs"})


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index):
    code = BLOCKS[index]
    if "pandas" in code:
        pytest.importorskip("pandas")
    if "torch" in code:
        pytest.importorskip("torch")
    if FASHION in code:
        if not os.path.isdir(FASHION):
            pytest.skip("Debian's dataset-fashion-mnist is not installed")
        code = code.replace("range(300)", "range(3)")
    run(code)


@pytest.mark.slow
def test_training_example_learns(capsys):
    code = next(b for b in BLOCKS if FASHION in b)
    if not os.path.isdir(FASHION):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    pytest.importorskip("torch")
    run(code)
    accuracy = float(capsys.readouterr().out.split("test accuracy ")[1])
    assert accuracy > 0.75
