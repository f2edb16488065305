# mxlab's NumPy API against the command-line tool, bit for bit: the same engine entry points must give the same
# values, codes, metrics and messages. Also: arrays read in place, errors as exceptions, thread counts.
import math
import os
import threading
import time

import numpy as np
import pytest

import mxlab


def data(shape=(48, 96), seed=0, specials=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::37] *= 300  # outliers
    x.flat[5] = 0
    x.flat[7] = 1e-40  # a float32 subnormal
    if specials:
        x.flat[11] = np.nan
        x.flat[13] = np.inf
    return x


def bits(a):
    return a.view({4: np.uint32, 8: np.uint64, 2: np.uint16}[a.dtype.itemsize])


def cli_options(options):
    args = []
    for k, v in options.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return args


def bf16_bits(x32):
    """float32 values rounded to bfloat16 (nearest-even), as uint16 bit patterns."""
    u = x32.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x32), (u >> 16).astype(np.uint16) | 0x40, r)


# (spec, options) sampled for every run; FULL_SPECS under the slow marker.
SPECS = [
    ("mxfp4", {}),
    ("mxfp8_e4m3", {"profile": "microxcaling"}),
    ("nvfp4", {}),
    ("mxint8", {}),
    ("mxfp6_e2m3", {"round": "stochastic", "seed": 7}),
    ("mxfp8_e5m2@16", {"scale_rule": "rceil"}),
    ("mxsf@8x8", {}),
    ("e4m3:float32", {}),
    ("int8:float32_c0", {}),
    ("mxfp4", {"block_axis": 0}),
]
FULL_SPECS = [(s, {}) for s in ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4", "mxint8", "mxint4",
                                "mxint2", "nvfp4", "mxsf", "boost_e2m5", "mxfp4@16", "mxfp8_e4m3@32x32",
                                "e2m1:e8m0_t32", "e4m3:float32_t16_t16", "mxint8:e8m0_t16s2"]] + [
    ("mxfp8_e4m3", {"profile": p}) for p in ["microxcaling", "microxcaling-cuda", "torchao-floor", "torchao-ceil",
                                             "torchao-even", "torchao-rceil", "transformer-engine", "modelopt-mxfp8"]] + [
    ("nvfp4", {"profile": p}) for p in ["transformer-engine-nvfp4", "transformer-engine-nvfp4-4over6-mae", "modelopt"]] + [
    ("mxfp4", {"profile": "modelopt-mxfp4"})] + [
    ("mxfp4", {"scale_rule": r}) for r in ["ceil", "rceil", "even", "midmax"]] + [
    ("mxfp8_e4m3", {"round": r}) for r in ["nearest-away", "zero", "up", "down", "odd"]]


def check_fake(cli, spec, options, x, bf16=False):
    src = cli.save("x.npy", x)
    extra = ["--bf16"] if bf16 else []
    cli.run("quantize", spec, src, "--out", "q.npy", *extra, *cli_options(options))
    want = np.load(cli.path("q.npy"))
    got = mxlab.quantize(x, spec, bf16=bf16, **options)
    assert got.dtype == np.float32 and got.shape == x.shape
    if x.dtype == np.float32:
        assert np.array_equal(bits(got), bits(want))
    elif x.dtype == np.float64:
        assert np.array_equal(bits(got.astype(np.float64)), bits(want))
    elif x.dtype == np.float16:
        ours = got.astype(np.float16)
        assert np.array_equal(np.isnan(ours), np.isnan(want))
        assert np.array_equal(bits(ours)[~np.isnan(ours)], bits(want)[~np.isnan(want)])
    else:  # bfloat16 bit patterns
        assert np.array_equal(bf16_bits(got), want)


@pytest.mark.parametrize("spec,options", SPECS, ids=[f"{s}-{o}" for s, o in SPECS])
def test_quantize_matches_cli(cli, spec, options):
    check_fake(cli, spec, options, data(specials=spec == "mxfp4"))


@pytest.mark.slow
@pytest.mark.parametrize("spec,options", FULL_SPECS, ids=[f"{s}-{o}" for s, o in FULL_SPECS])
def test_quantize_matches_cli_full(cli, spec, options):
    check_fake(cli, spec, options, data((64, 128), seed=3, specials=True))


@pytest.mark.parametrize("dtype", ["float16", "float64", "bfloat16"])
def test_quantize_dtypes_match_cli(cli, dtype):
    x = data()
    if dtype == "bfloat16":
        check_fake(cli, "mxfp8_e4m3", {}, bf16_bits(x), bf16=True)
    else:
        check_fake(cli, "nvfp4", {}, x.astype(dtype))


def test_float64_values_float32_cannot_hold(cli):
    x = data().astype(np.float64) * (1 + 2.0**-40)
    check_fake(cli, "mxfp8_e4m3", {}, x)


@pytest.mark.parametrize("spec,options", [("mxfp4", {}), ("nvfp4", {}), ("mxint8:e8m0_t16s2", {}),
                                          ("mxint8", {"int_encoding": "sign-magnitude"}),
                                          ("mxfp4", {"nibble_order": "high-first"})])
def test_packed_and_dequantize_match_cli(cli, spec, options):
    x = data(specials=True)
    src = cli.save("x.npy", x)
    cli.run("quantize", spec, src, "--out", "w", "--packed", *cli_options(options))
    p = mxlab.quantize(x, spec, packed=True, **options)
    assert np.array_equal(p["elements"], np.load(cli.path("w.elements.npy")).ravel())
    assert np.array_equal(p["scales"], np.load(cli.path("w.scales.npy")).ravel())
    if p["tensor_scale"].size:
        assert np.array_equal(p["tensor_scale"], np.load(cli.path("w.tensor_scale.npy")).ravel())
    if p["subtile_offsets"].size:
        assert np.array_equal(p["subtile_offsets"], np.load(cli.path("w.subtiles.npy")).ravel())
    cli.run("dequantize", spec, "w", "--out", "d.npy")
    want = np.load(cli.path("d.npy"))
    assert np.array_equal(bits(mxlab.dequantize(p)), bits(want), equal_nan=False) or \
        np.array_equal(mxlab.dequantize(p), want, equal_nan=True)
    # the CLI's files read back through the package
    assert np.array_equal(mxlab.dequantize(cli.path("w"), spec), want, equal_nan=True)


def numeric_equal(text, value):
    if text in ("-", ""):
        return value is None
    want = float(text)
    return (math.isnan(want) and math.isnan(value)) or want == value


def test_analyze_matches_cli(cli):
    x = data((64, 128), specials=True)
    src = cli.save("x.npy", x)
    specs = ["mxfp4", "nvfp4", "mxfp8_e4m3", "mxsf", "mxint8", "mxfp8_e4m3@32x32"]
    rows = cli.csv("analyze", *specs, "--input", src)
    records = mxlab.analyze(x, *specs)
    assert [r["format"] for r in records] == specs
    for want, got in zip(rows, records):
        assert got["engine"] == want["engine"]
        for column, value in got.items():
            if column not in ("format", "engine"):
                assert numeric_equal(want[column], value), (got["format"], column, want[column], value)
    gaps = mxlab.analyze(x, "mxfp4", gaps=True)
    want_gaps = cli.csv("analyze", "mxfp4", "--input", src, "--gaps")
    assert [str(r["gap"]) for r in gaps] == [w["gap"] for w in want_gaps]
    assert all(numeric_equal(w["mse"], r["mse"]) for w, r in zip(want_gaps, gaps))


def test_gemm_is_the_cli_job_and_exact_under_the_exact_model(cli):
    """mxlab.gemm: C of every model and the error records of `mxlab gemm` on the same operands; under the exact
    model each entry is the exact sum of the quantized operands' products rounded once to float32."""
    from fractions import Fraction
    a, b = data((4, 96), seed=3), data((96, 3), seed=4)
    models = "exact;ocp-dot-fp32;tensorcore-trunc14"
    got = mxlab.gemm(a, b, "mxfp8_e4m3", "mxfp4", accumulate=models)
    want = cli.csv("gemm", "mxfp8_e4m3", "mxfp4", "--accumulate", models, "--shape", "4x96x3",
                   "--a", cli.save("a.npy", a), "--b", cli.save("b.npy", b))
    assert [(r["model"], r["reference"]) for r in got["errors"]] == [(w["model"], w["reference"]) for w in want]
    for w, r in zip(want, got["errors"]):
        for column in ("count", "nan_count", "max_rel_error", "mean_rel_error", "p99_rel_error", "sqnr_db"):
            assert numeric_equal(w[column], r[column]), (r["model"], column)
        assert r["format_a"] == "mxfp8_e4m3" and r["format_b"] == "mxfp4" and r["shape"] == "4x96x3"
    assert sorted(got["c"]) == ["exact", "ocp-dot-fp32", "tensorcore-trunc14"]
    c = got["c"]["exact"]
    assert c.shape == (4, 3) and c.dtype == np.float64
    # float64 operands are read as they are; spec_b defaults to spec_a; output= rounds C once to its format.
    same = mxlab.gemm(a.astype(np.float64), b, "mxfp4")["c"]["exact"]
    bf16 = mxlab.gemm(a, b, "mxfp8_e4m3", "mxfp4", output="bfloat16")["c"]["exact"]
    qa, qbt = mxlab.quantize(a, "mxfp8_e4m3"), mxlab.quantize(np.ascontiguousarray(b.T), "mxfp4")
    qa4 = mxlab.quantize(a, "mxfp4")

    def nearest(s, step):
        """The float32 nearest to the rational s among those whose bit patterns are multiples of step (1: every
        float32, 2^16: the bfloat16 values), ties to the even multiple."""
        if s == 0:
            return 0.0
        m = abs(s)
        f = int(np.array(np.float32(float(m))).view(np.uint32)) // step * step
        value = lambda bits: float(np.array(bits, dtype=np.uint32).view(np.float32))  # noqa: E731
        candidates = [f + d * step for d in (-1, 0, 1, 2) if 0 <= f + d * step < 0x7F800000]
        best = min(candidates, key=lambda bits: (abs(Fraction(value(bits)) - m), (bits // step) & 1))
        return value(best) if s > 0 else -value(best)

    for i in range(4):
        for j in range(3):
            s = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(qa[i], qbt[j]))
            assert c[i, j] == nearest(s, 1) and bf16[i, j] == nearest(s, 1 << 16)
            s4 = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(qa4[i], qbt[j]))
            assert same[i, j] == nearest(s4, 1)
    assert not np.array_equal(got["c"]["tensorcore-trunc14"], c)
    with pytest.raises(ValueError, match="a is 4 x 96 but b has 95 rows"):
        mxlab.gemm(a, b[:95], "mxfp8_e4m3")
    with pytest.raises(ValueError, match="model"):
        mxlab.gemm(a, b, "mxfp8_e4m3", accumulate="no-such-model")
    with pytest.raises(TypeError, match="float32 or float64"):
        mxlab.gemm(a.astype(np.int32), b, "mxfp8_e4m3")
    with pytest.raises(ValueError, match="2-D"):
        mxlab.gemm(a[0], b, "mxfp8_e4m3")


def test_analyze_layout_matches_cli(cli):
    w = data((3, 3, 40, 16))
    src = cli.save("w.npy", w)
    want = cli.csv("analyze", "mxfp8_e4m3", "--input", src, "--layout", "hwio")[0]
    got = mxlab.analyze(w, "mxfp8_e4m3", layout="hwio")[0]
    assert numeric_equal(want["mse"], got["mse"]) and numeric_equal(want["bits_per_element"], got["bits_per_element"])


def test_analyze_records_make_a_dataframe():
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(mxlab.analyze(data(), "mxfp4", "nvfp4", "mxint8"))
    assert list(frame["format"]) == ["mxfp4", "nvfp4", "mxint8"]
    assert frame["sqnr_db"].dtype == np.float64


@pytest.mark.parametrize("fmt", ["e4m3", "e2m1", "e8m0", "int8", "e3m2", "ue4m3", "e2m5b3", "mxfp4"])
def test_codepoints_match_cli(cli, fmt):
    rows = cli.csv("codepoints", fmt)
    cp = mxlab.codepoints(fmt)
    assert len(cp) == len(rows)
    for want, got in zip(rows, cp):
        assert int(want["code"]) == got["code"] and want["hex"] == got["hex"] and want["bits"] == got["bits"]
        assert want["class"] == got["class"] and want["exact"] == got["exact"]
        assert numeric_equal(want["value"], float(got["value"]))
        assert numeric_equal(want["gap_up"] or "nan", float(got["gap_up"]))


def test_codepoints_of_wide_formats_need_a_range():
    with pytest.raises(ValueError, match="4294967296 codes"):
        mxlab.codepoints("float32")
    cp = mxlab.codepoints("float32", 0x3F800000, 0x3F800003)
    assert cp["value"][0] == 1.0 and cp["exact"][1] == "1.00000011920928955078125"


CAST_VALUES = [1.1, 300, -0.0, 1e-9, 448, 464, 1e30, -math.inf, math.nan, 2.0**-10, 0.3, -17.25]


@pytest.mark.parametrize("fmt,options", [("e4m3", {}), ("e5m2", {"overflow": "saturate"}), ("e2m1", {"round": "up"}),
                                         ("int4", {}), ("bf16", {"round": "odd"}), ("e3m2", {"subnormals": "flush"}),
                                         ("e4m3", {"round": "stochastic", "seed": 3, "random_bits": 5})])
def test_cast_matches_cli(cli, fmt, options):
    rows = cli.csv("cast", fmt, *[repr(v) for v in CAST_VALUES], *cli_options(options))
    values, codes = mxlab.cast(np.array(CAST_VALUES), fmt, codes=True, **options)
    assert [int(r["code"]) for r in rows] == list(codes)
    assert all(numeric_equal(r["value"], v) for r, v in zip(rows, values))


def test_formats_match_cli(cli):
    rows = cli.csv("formats")
    records = mxlab.formats()
    assert [r["name"] for r in rows] == [r["name"] for r in records]
    for want, got in zip(rows, records):
        assert numeric_equal(want["max_finite"], got["max_finite"]) and str(got["bits"]) == want["bits"]
    assert {r["name"] for r in mxlab.formats("block")} >= {"mxfp4", "nvfp4", "mxfp8_e4m3"}


def test_bounds_match_cli(cli):
    rows = cli.csv("bounds", "mxint8", "boost_e2m5")
    records = mxlab.bounds("mxint8", "boost_e2m5")
    assert len(rows) == len(records)
    for want, got in zip(rows, records):
        assert want["max_abs_A"] == got["max_abs_A"] and numeric_equal(want["max_rel_B_f64"], got["max_rel_B_f64"])


# ---- arrays read in place, out=, threads, the GIL

@pytest.mark.parametrize("dtype,bf16", [("float32", False), ("float16", False), ("uint16", True), ("float64", False)])
def test_arrays_are_read_in_place(dtype, bf16):
    x = data().astype(dtype)
    assert mxlab._mxlab.source_address(x, bf16) == x.ctypes.data
    view = x[4:20]  # a C-contiguous slice: still its own memory
    assert mxlab._mxlab.source_address(view, bf16) == view.ctypes.data


@pytest.mark.parametrize("spec,options", [("mxfp4", {}), ("nvfp4", {}), ("mxfp8_e4m3", {"round": "stochastic", "seed": 3}),
                                          ("mxint8", {"block_axis": 0}), ("e4m3:float32", {}), ("mxsf@8x8", {})])
@pytest.mark.parametrize("exact", [True, False], ids=["float32-values", "float64-values"])
def test_float64_read_in_place_gives_the_cli_values(cli, spec, options, exact):
    # float64 values float32 holds (the kernels, fed float32 a few blocks at a time) and values it does not (the
    # reference on the doubles). The CLI reads x.npy in place as well, and x.npy.gz (compressed, not mappable)
    # through its float64 tensor copy: all three give the same bits.
    x = data((64, 96), seed=5, specials=True).astype(np.float64)
    if not exact:
        x *= 1 + 2.0**-40
    assert mxlab._mxlab.source_address(x, False) == x.ctypes.data
    got = mxlab.quantize(x, spec, **options)
    src = cli.save("x.npy", x)
    import gzip
    with open(src, "rb") as f, gzip.open(cli.path("x.npy.gz"), "wb") as g:
        g.write(f.read())
    for name in ("x.npy", "x.npy.gz"):
        cli.run("quantize", spec, name, "--out", "q.npy", *cli_options(options))
        want = np.load(cli.path("q.npy"))
        assert want.dtype == np.float64 and np.array_equal(bits(got.astype(np.float64)), bits(want)), name
    cli.run("quantize", spec, "x.npy.gz", "--out", "w", "--packed", *cli_options(options))
    packed = mxlab.quantize(x, spec, packed=True, **options)
    assert np.array_equal(packed["elements"], np.load(cli.path("w.elements.npy")).ravel())
    assert np.array_equal(packed["scales"], np.load(cli.path("w.scales.npy")).ravel())
    want, = cli.csv("analyze", spec, "x.npy.gz", *cli_options(options))
    got, = mxlab.analyze(x, spec, **options)
    for column in ("mse", "sqnr_db", "max_abs_error", "underflow_ratio", "engine"):
        assert numeric_equal(want[column], got[column]) if column != "engine" else want[column] == got[column]


# A fresh process quantizes 4 M float64 values (32 MiB) after a float16 array has been through the same streamed
# path (its chunk buffers made once), and prints how far the call raised the process's peak memory (KiB).
PEAK_GROWTH = """
import resource, sys
import numpy as np
import mxlab
n = 1 << 22
x = np.empty(n)
rng = np.random.default_rng(0)
for i in range(0, n, 1 << 16):  # filled in small pieces: no temporary raises the peak
    x[i:i + (1 << 16)] = rng.standard_normal(1 << 16, dtype=np.float32)
out = np.full(n, 1, np.float32)  # every page written: the call adds none of its own
warm = np.ones(1 << 21, np.float16)
mxlab.quantize(warm, sys.argv[1], out=out[:warm.size])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
mxlab.quantize(x, sys.argv[1], out=out)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.skipif(bool(os.environ.get("MXLAB_SANITIZED")),
                    reason="AddressSanitizer's quarantine keeps freed memory from reuse and its shadow memory grows "
                           "with every first read, so the peak does not measure copies there")
@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4"])
def test_float64_quantization_makes_no_copy_of_the_array(spec):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", PEAK_GROWTH, spec], capture_output=True, text=True, check=True)
    # A copy of the values (the engine's float64 tensor: the doubles and their float32 roundings) would raise the
    # peak by 48 MiB; the per-thread buffers take kilobytes. 16 MiB leaves room for the allocator's own growth.
    assert int(r.stdout) < 16 * 1024


@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4", "mxfp8_e4m3@16", "mxint8:e8m0_t16s2", "mxfp6_e2m3"])
def test_float64_holding_float32_values_quantizes_as_their_float32(spec):
    # Rows of 1031 (a partial block at each row's end) over more than one chunk of the engine's streamed pass:
    # the kernels narrow the doubles a few blocks at a time per thread, at every range boundary.
    x32 = data((1100, 1031), seed=9, specials=True)
    x64 = x32.astype(np.float64)
    for threads in (1, 2):
        assert np.array_equal(bits(mxlab.quantize(x64, spec, threads=threads)), bits(mxlab.quantize(x32, spec)))
        p64, p32 = mxlab.quantize(x64, spec, packed=True, threads=threads), mxlab.quantize(x32, spec, packed=True)
        for key in ("elements", "scales", "tensor_scale", "subtile_offsets"):
            assert np.array_equal(p64[key], p32[key]), key
        a64, = mxlab.analyze(x64, spec, threads=threads)
        a32, = mxlab.analyze(x32, spec)
        assert a64 == a32


def test_large_results_reuse_the_memory_of_freed_results():
    # A new result array of 1 MiB or more takes the memory of one freed before it (pages already mapped), never
    # that of a live array.
    x = data((512, 512), seed=11)
    want = mxlab.quantize(x, "mxfp4", out=np.empty_like(x))
    a = mxlab.quantize(x, "mxfp4")
    b = mxlab.quantize(x, "mxfp8_e4m3")
    assert a.ctypes.data != b.ctypes.data and a.flags.writeable
    address = a.ctypes.data
    del a
    c = mxlab.quantize(x, "mxfp4")
    assert c.ctypes.data == address and np.array_equal(bits(c), bits(want))
    assert mxlab.quantize(x[:100], "mxfp4").ctypes.data != address  # a small result: NumPy's own memory


def test_out_is_written_in_place():
    x = data()
    out = np.empty_like(x)
    got = mxlab.quantize(x, "mxfp4", out=out)
    assert got.ctypes.data == out.ctypes.data
    assert np.array_equal(out, mxlab.quantize(x, "mxfp4"))
    q = mxlab.Quantizer("mxfp4")
    out2 = np.empty_like(x)
    assert q(x, out=out2).ctypes.data == out2.ctypes.data and np.array_equal(out2, out)


def test_non_contiguous_input_gives_the_same_values():
    x = data((96, 48)).T  # Fortran order
    assert np.array_equal(mxlab.quantize(x, "mxfp4"), mxlab.quantize(np.ascontiguousarray(x), "mxfp4"))


@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4", "mxfp8_e4m3@32x32", "e4m3:float32"])
def test_threads_give_identical_results(spec):
    x = data((256, 512), seed=5, specials=True)
    one = mxlab.quantize(x, spec, threads=1)
    for t in (2, 3, 8):
        assert np.array_equal(bits(mxlab.quantize(x, spec, threads=t)), bits(one))
    a1 = mxlab.analyze(x, spec, threads=1)
    a4 = mxlab.analyze(x, spec, threads=4)
    assert a1 == a4 or all((v == a4[0][k]) or (v != v and a4[0][k] != a4[0][k]) for k, v in a1[0].items())
    p1, p4 = mxlab.quantize(x, spec, packed=True, threads=1), mxlab.quantize(x, spec, packed=True, threads=4)
    assert np.array_equal(p1["elements"], p4["elements"]) and np.array_equal(p1["scales"], p4["scales"])


def test_quantizer_columns_equal_axis_zero():
    x = data((64, 96))
    q = mxlab.Quantizer("mxfp8_e4m3")
    assert np.array_equal(bits(q.columns(x)), bits(mxlab.quantize(x, "mxfp8_e4m3", axis=0)))
    rows, cols = q.rows_and_columns(x, q)
    assert np.array_equal(bits(rows), bits(q(x))) and np.array_equal(bits(cols), bits(q.columns(x)))


def test_the_gil_is_released_while_the_engine_runs():
    x = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.02)
        start = time.perf_counter()
        c0 = count[0]
        for _ in range(3):
            mxlab.quantize(x, "nvfp4", threads=1)
        busy = time.perf_counter() - start
        during = count[0] - c0
        c1 = count[0]
        time.sleep(busy)
        alone = count[0] - c1
    finally:
        stop.set()
        t.join()
    # With the GIL held the counter would only move at the switch interval's boundaries.
    assert during > 0.2 * alone, (during, alone, busy)


# ---- errors: exceptions with the CLI's messages; nothing crashes

def python_message(cli_message):
    """The CLI's message as the package words it: options by their keyword names."""
    import re
    return re.sub(r"option '--([a-z0-9-]+)'", lambda m: "option '" + m.group(1).replace("-", "_") + "'", cli_message)


@pytest.mark.parametrize("spec,options,cli_args", [
    ("mxfp5", {}, []),
    ("mxfp4", {"round": "sideways"}, ["--round", "sideways"]),
    ("mxfp4", {"scale_rule": "sometimes"}, ["--scale-rule", "sometimes"]),
    ("nvfp4", {"profile": "microxcaling"}, ["--profile", "microxcaling"]),
    ("mxfp4", {"block_axis": 7}, ["--block-axis", "7"]),
    ("e2m1:e8m0_t32x", {}, []),
    ("mxfp4", {"min_block_scale": "-1"}, ["--min-block-scale", "-1"]),
])
def test_bad_input_raises_the_cli_message(cli, spec, options, cli_args):
    x = data()
    src = cli.save("x.npy", x)
    want = cli.error("quantize", spec, src, "--out", "q.npy", *cli_args)
    with pytest.raises(ValueError) as e:
        mxlab.quantize(x, spec, **options)
    assert str(e.value) == python_message(want)


@pytest.mark.parametrize("call,error", [
    (lambda: mxlab.quantize(np.arange(10, dtype=np.int32), "mxfp4"), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, dtype=np.uint16), "mxfp4"), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, dtype=np.float32), "mxfp4", bf16=True), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, dtype=">f4"), "mxfp4"), TypeError),
    (lambda: mxlab.quantize("x.npy", "mxfp4"), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, np.float32), 4), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, np.float32), "mxfp4", round=True), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, np.float32), "mxfp4", out=np.zeros(9, np.float32)), ValueError),
    (lambda: mxlab.quantize(np.zeros(10, np.float32), "mxfp4", out=np.zeros(10, np.float64)), TypeError),
    (lambda: mxlab.quantize(np.zeros(10, np.float32), "mxfp4", threads=0), ValueError),
    (lambda: mxlab.cast([1.0], "e99m9"), ValueError),
    (lambda: mxlab.cast([1.0], "e4m3", overflow="inf"), ValueError),
    (lambda: mxlab.analyze(np.zeros(10, np.float32)), ValueError),
    (lambda: mxlab.analyze(np.zeros((3, 3)), "mxfp4", layout="hwio"), ValueError),
    (lambda: mxlab.bounds("mxfp4", "mxfp5"), ValueError),
    (lambda: mxlab.dequantize({"format": "mxfp4", "shape": [64], "elements": np.zeros(3, np.uint8),
                               "scale_grid": [2], "scales": np.zeros(2, np.uint8), "tensor_scale": np.zeros(0, np.uint8),
                               "subtile_grid": [], "subtile_offsets": np.zeros(0, np.uint8), "packing": []}), ValueError),
    (lambda: mxlab.load_recipe("no-such-recipe"), ValueError),
])
def test_bad_arguments_raise(call, error):
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("x", [np.zeros(0, np.float32), np.float32(3.5) * np.ones((), np.float32),
                               np.full((5, 7), np.nan, np.float32), np.full(33, np.inf, np.float32),
                               np.full((2, 0, 3), 1, np.float32), np.full(100, 3e38, np.float32)])
@pytest.mark.parametrize("spec", ["mxfp4", "nvfp4", "mxfp8_e4m3@32x32", "int8:float32_c0"])
def test_edge_shapes_and_values_do_not_crash(x, spec):
    for call in (lambda: mxlab.quantize(x, spec), lambda: mxlab.analyze(x, spec),
                 lambda: mxlab.dequantize(mxlab.quantize(x, spec, packed=True))):
        try:
            call()
        except ValueError:
            pass


def test_import_is_quick():
    import subprocess
    import sys
    code = "import time; t = time.perf_counter(); import mxlab; print(time.perf_counter() - t)"
    seconds = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert seconds < 0.3 * (10 if os.environ.get("MXLAB_SANITIZED") else 1)  # the sanitizers slow everything
