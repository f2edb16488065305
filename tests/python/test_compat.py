# mxlab.compat.microxcaling: microxcaling's signatures on mxlab's microxcaling profile. microxcaling's own tests
# run against it with scripts/microxcaling_tests.py when a checkout is at hand (MXLAB_MICROXCALING=DIR).
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import mxlab  # noqa: E402
from mxlab.compat import microxcaling as mx  # noqa: E402


def test_quantize_mx_is_the_profile():
    x = torch.randn(8, 96, generator=torch.Generator().manual_seed(0))
    y = mx._quantize_mx(x, 8, "fp8_e4m3", axes=[-1], block_size=32, round="nearest")
    want = mxlab.quantize(x.numpy(), "mxfp8_e4m3@32", profile="microxcaling")
    assert np.array_equal(y.numpy().view(np.uint32), want.view(np.uint32))
    whole = mx._quantize_mx(x, 8, "int8", axes=0, block_size=0, round="even", flush_fp32_subnorms=True)
    assert torch.equal(whole, torch.from_numpy(mxlab.quantize(x.numpy(), "mxint8@8", axis=0, profile="microxcaling",
                                                              round="nearest-even", amax_subnormal="flush")))
    specs = {"block_size": 16, "scale_bits": 8, "shared_exp_method": "max", "mx_flush_fp32_subnorms": False}
    assert torch.equal(mx.quantize_mx_op(x, specs, "fp4_e2m1", axes=-1),
                       mx._quantize_mx(x, 8, "fp4_e2m1", axes=-1, block_size=16))


@pytest.mark.parametrize("call", [
    lambda x: mx._quantize_mx(x, 5, "fp8_e4m3", axes=[-1], block_size=32),
    lambda x: mx._quantize_mx(x, 8, "fp8_e4m3", axes=[-1], block_size=32, round="dither"),
    lambda x: mx._quantize_mx(x, 8, "fp8_e4m3", axes=[0, 1], block_size=0),
    lambda x: mx._quantize_mx(x, 8, "fp7", axes=[-1], block_size=32),
])
def test_what_is_not_covered_is_refused(call):
    with pytest.raises(ValueError):
        call(torch.ones(4, 32))


def test_elementwise():
    x = torch.tensor([1.0, 1.00390625, 70000.0, 1e-41, -3.0])
    y = mx.quantize_elemwise_op(x, {"bfloat": 16, "fp": 0, "round": "even", "bfloat_subnorms": True})
    assert torch.equal(y, x.to(torch.bfloat16).float())
    h = mx._quantize_fp(x, exp_bits=5, mantissa_bits=10, round="floor")
    assert h[2].item() == float("inf") and h[1].item() == 1.00390625 and h[0].item() == 1.0
    assert mx._quantize_fp(torch.tensor([1.0009765]), exp_bits=5, mantissa_bits=10, round="floor").item() == 1.0


@pytest.mark.skipif(not os.environ.get("MXLAB_MICROXCALING"), reason="MXLAB_MICROXCALING names no microxcaling checkout")
def test_microxcalings_own_tests():
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "microxcaling_tests.py")
    out = subprocess.run([sys.executable, script, os.environ["MXLAB_MICROXCALING"]], capture_output=True, text=True).stdout
    failures = [line for line in out.splitlines() if line.startswith("failed:")]
    assert all("scale_bits=5" in f or "saturate_normals=False" in f for f in failures), failures
