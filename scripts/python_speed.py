#!/usr/bin/python3
"""mxlab.quantize in-process against the kernels' own rate (`mxlab bench`), and optionally against
microxcaling's in-process _quantize_mx, on one 16 M-element float32 array; and the package's import time.

    PYTHONPATH=build/release/app/python scripts/python_speed.py --binary build/release/app/mxlab [--threads N]
        [--microxcaling DIR]    # DIR: a checkout of microsoft/microxcaling (its mx package is imported from it)

Prints one row per format: the bench's fake-quant rate at 64 MiB (16 M elements), mxlab.quantize's rate with a
reused out= array and with a new result array each call (made on the memory of the result freed before it), their
ratios to the bench; with --microxcaling, microxcaling's rate on the same array (CPU Python path,
custom_cuda=False), mxlab's with profile="microxcaling" (the same values), the speed-up and whether the two
outputs are the same bits.
"""
import argparse
import csv
import io
import subprocess
import sys
import time

import numpy as np

# microxcaling's element format names of mxlab's block formats (block 32, E8M0 scales).
MICROXCALING = {"mxfp8_e4m3": "fp8_e4m3", "mxfp8_e5m2": "fp8_e5m2", "mxfp6_e3m2": "fp6_e3m2",
                "mxfp6_e2m3": "fp6_e2m3", "mxfp4": "fp4_e2m1", "mxint8": "int8"}


def best_seconds(call, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best


def import_seconds(repeat=5):
    code = "import time; t = time.perf_counter(); import mxlab; print(time.perf_counter() - t)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(repeat)]
    return min(runs), sorted(runs)[len(runs) // 2]


def bench_rates(binary, threads, elements):
    """elements/s of the bench's 'block fake-quant' rows at the largest size."""
    mib = elements * 4 >> 20
    out = subprocess.run([binary, "bench", "--quick", "--max-mib", str(mib), "--threads", str(threads), "--csv"],
                         capture_output=True, text=True, check=True).stdout
    rates = {}
    for row in csv.DictReader(io.StringIO(out)):
        if row["kernel"] == "block fake-quant" and int(row["elements"]) == elements:
            rates[row["format"]] = float(row["elements_per_s"])
    return rates


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True, help="the mxlab binary of the same build")
    p.add_argument("--threads", type=int, default=0, help="worker threads (default: every hardware thread)")
    p.add_argument("--elements", type=int, default=1 << 24)
    p.add_argument("--formats", default="mxfp8_e4m3,mxfp4,nvfp4,mxint8")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--microxcaling", help="a checkout of microsoft/microxcaling to time _quantize_mx from")
    args = p.parse_args()

    import os
    threads = args.threads or os.cpu_count()
    first, median = import_seconds()
    print(f"import mxlab: {first * 1000:.1f} ms best, {median * 1000:.1f} ms median of 5 fresh interpreters")
    import mxlab

    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    out = np.empty_like(x)
    rates = bench_rates(args.binary, threads, args.elements)
    mx = None
    if args.microxcaling:
        sys.path.insert(0, args.microxcaling)
        import torch
        from mx import mx_ops as mx
        torch.set_num_threads(threads)
        xt = torch.from_numpy(x)
    print(f"{args.elements} float32 elements, {threads} threads, SIMD {mxlab.simd_target()}, best of {args.repeat}")
    print(f"{'format':<12}{'bench M/s':>11}{'out= M/s':>10}{'ratio':>7}{'new M/s':>9}{'ratio':>7}"
          + (f"{'microxcaling M/s':>18}{'profile M/s':>12}{'speed-up':>10}{'same':>6}" if mx else ""))
    for spec in args.formats.split(","):
        q = mxlab.Quantizer(spec)
        t_out = best_seconds(lambda: mxlab.quantize(x, spec, out=out, threads=threads), args.repeat)
        t_new = best_seconds(lambda: mxlab.quantize(x, spec, threads=threads), args.repeat)
        bench = rates.get(spec, float("nan"))
        rate_out, rate_new = args.elements / t_out, args.elements / t_new
        line = (f"{spec:<12}{bench / 1e6:>11.1f}{rate_out / 1e6:>10.1f}{rate_out / bench:>7.2f}"
                f"{rate_new / 1e6:>9.1f}{rate_new / bench:>7.2f}")
        if mx:
            if spec in MICROXCALING:
                fmt = MICROXCALING[spec]
                t_mx = best_seconds(lambda: mx._quantize_mx(xt, 8, fmt, shared_exp_method="max", axes=[-1],
                                                            block_size=32, round="nearest"), max(2, args.repeat // 3))
                # mxlab with microxcaling's arithmetic (the profile), checked bit for bit on the same array
                t_prof = best_seconds(lambda: mxlab.quantize(x, spec, profile="microxcaling", out=out,
                                                             threads=threads), args.repeat)
                theirs = mx._quantize_mx(xt, 8, fmt, shared_exp_method="max", axes=[-1], block_size=32,
                                         round="nearest").numpy()
                same = np.array_equal(out.view(np.uint32), theirs.view(np.uint32))
                line += (f"{args.elements / t_mx / 1e6:>18.1f}{args.elements / t_prof / 1e6:>12.1f}"
                         f"{t_mx / t_prof:>10.1f}{'yes' if same else 'NO':>6}")
            else:
                line += f"{'-':>18}{'-':>12}{'-':>10}{'-':>6}"
        print(line)
        del q


if __name__ == "__main__":
    main()
