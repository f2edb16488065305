"""mxlab for NumPy: exact and fast low-precision number formats (docs/python.md).

The vocabulary is the command line's: ``formats``, ``codepoints``, ``cast``, ``quantize``, ``dequantize``,
``analyze``, ``bounds``, with the same format strings and options (``round="nearest-away"``,
``scale_rule="rceil"``, ``profile="microxcaling"``: a keyword is the CLI's option with ``_`` for ``-``).
Every call runs the engine's entry points (the SIMD kernels where they cover the request, else the exact
reference, bit for bit the same), reads C-contiguous float32, float16 and bfloat16 (uint16 bit patterns with
``bf16=True``) arrays where they lie, releases the GIL while it works, and raises ``ValueError`` (bad
format, option or value: the engine's message) or ``TypeError`` (an argument of the wrong kind).
``mxlab.torch`` (imported on its own) adds PyTorch fake quantization and drop-in modules.
"""

import os as _os
import warnings as _warnings

import numpy as _np

from . import _mxlab

__all__ = ["formats", "codepoints", "cast", "quantize", "dequantize", "analyze", "bounds", "gemm", "Quantizer",
           "block_format", "load_recipe", "recipe_presets", "simd_target", "weights", "read_weight", "__version__"]

__version__ = _mxlab.version()
BlockFormat = _mxlab.BlockFormat
Recipe = _mxlab.Recipe


def simd_target():
    """The SIMD target the kernels run on here ("AVX3", "AVX2", ...)."""
    return _mxlab.simd_target()


# ---- options and arguments

def _option_text(name, value):
    if isinstance(value, bool) or value is None:
        raise TypeError(f"option '{name}': expected a string or a number, not {value!r}")
    if isinstance(value, str):
        return value
    if isinstance(value, (int, _np.integer)):
        return str(int(value))
    if isinstance(value, (float, _np.floating)):
        f = float(value)
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else f.hex()
    raise TypeError(f"option '{name}': expected a string or a number, not {type(value).__name__}")


def _options(profile=None, axis=None, **options):
    """The engine's (name, value) option pairs: profile first, then the keywords in order."""
    pairs = []
    if profile is not None:
        pairs.append(("profile", _option_text("profile", profile)))
    if axis is not None and axis != -1:
        if "block_axis" in options:
            raise ValueError("give the block axis once: axis= or block_axis=")
        pairs.append(("block-axis", _option_text("axis", axis)))
    for name, value in options.items():
        pairs.append((name.replace("_", "-"), _option_text(name, value)))
    return pairs


def block_format(spec, profile=None, axis=None, **options):
    """The block format SPEC with options (a BlockFormat: name, element, options, engine)."""
    if isinstance(spec, BlockFormat):
        if profile is None and axis in (None, -1) and not options:
            return spec
        spec = spec.name
    if not isinstance(spec, str):
        raise TypeError(f"SPEC must be a string such as 'mxfp4', not {type(spec).__name__}")
    return _mxlab.block_format(spec, _options(profile, axis, **options))


def _threads(threads):
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, (int, _np.integer)):
        raise TypeError(f"threads= must be an integer, not {type(threads).__name__}")
    if not 1 <= int(threads) <= 1024:
        raise ValueError(f"option 'threads={threads}': expected a whole number from 1 to 1024")
    return int(threads)


def _array(x):
    """x as an ndarray without copying arrays (lists and scalars become float64 arrays)."""
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        return _np.asarray(x)
    if isinstance(x, (list, tuple, float, int)) and not isinstance(x, bool):
        return _np.asarray(x, dtype=_np.float64)
    raise TypeError(f"expected a NumPy array, not {type(x).__name__}")


def _contiguous(a):
    return a if a.flags.c_contiguous else _np.ascontiguousarray(a)


def _cell(text, numeric):
    if not numeric:
        return {"true": True, "false": False}.get(text, text)
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _records(table):
    columns, numeric, rows = table
    return [{c: _cell(v, n) for c, n, v in zip(columns, numeric, row)} for row in rows]


# ---- the catalogue

def formats(kind="element"):
    """The catalogue as records (a list of dicts: ``pandas.DataFrame(mxlab.formats())``).

    kind="element": every named element format with its derived properties (the table of ``mxlab formats``);
    kind="block": the named block formats (element, scale, block, rule, bits per element).
    """
    if kind == "element":
        return _records(_mxlab.format_table())
    if kind == "block":
        return _records(_mxlab.block_format_table())
    raise ValueError(f"kind='{kind}': expected element or block")


_MAX_CODEPOINTS = 1 << 24


def codepoints(fmt, first=0, last=None):
    """Every code of an element format (codes first..last) as a NumPy structured array.

    Fields: code (uint32), hex, bits (grouped by field), sign, exponent, mantissa (-1 for non-float formats),
    class, value (float64: every value of a format is a double exactly; NaN for NaN codes), exact (the exact
    decimal), gap_up (distance to the next larger value; NaN for the largest and for non-finite codes).
    Formats of more than 16 bits need last= (at most 2^24 codes per call), as ``mxlab codepoints --range``.
    """
    count = _mxlab.codepoint_count(fmt)
    if last is None:
        if count > (1 << 16):
            raise ValueError(f"format '{fmt}' has {count} codes; give first= and last=")
        last = count - 1
    if last - first + 1 > _MAX_CODEPOINTS:
        raise ValueError(f"codes {first}..{last}: at most {_MAX_CODEPOINTS} codes per call")
    columns, _, rows = _mxlab.codepoint_table(fmt, int(first), int(last))
    cols = list(zip(*rows)) if rows else [()] * len(columns)
    data = dict(zip(columns, cols))

    def width(name):
        return max([len(s) for s in data[name]] + [1])

    dtype = [("code", "u4"), ("hex", f"U{width('hex')}"), ("bits", f"U{width('bits')}"), ("sign", "u1"),
             ("exponent", "i4"), ("mantissa", "i8"), ("class", f"U{width('class')}"), ("value", "f8"),
             ("exact", f"U{width('exact')}"), ("gap_up", "f8")]
    out = _np.empty(len(rows), dtype=dtype)
    out["code"] = [int(s) for s in data["code"]]
    out["hex"] = data["hex"]
    out["bits"] = data["bits"]
    out["sign"] = [int(s) for s in data["sign"]]
    out["exponent"] = [int(s) if s else -1 for s in data["exponent"]]
    out["mantissa"] = [int(s) if s else -1 for s in data["mantissa"]]
    out["class"] = data["class"]
    out["value"] = [float(s) for s in data["value"]]
    out["exact"] = data["exact"]
    out["gap_up"] = [float(s) if s else _np.nan for s in data["gap_up"]]
    return out


# ---- casts and block quantization

_SOURCE = {"float32": "f32", "float16": "f16", "float64": "f64"}


def cast(x, fmt, round="nearest-even", overflow="default", subnormals="keep", seed=0, random_bits=32, bf16=False,
         codes=False, threads=None):
    """Each element of x cast to the element format fmt, as ``mxlab cast`` casts it (docs/casting.md).

    Returns the exact values as float64 (and the codes as uint32 when codes=True). overflow="default" is Inf
    for formats with infinity and saturation otherwise; stochastic rounding gives element i (row-major) the
    random word of (seed, i). Subnormal inputs are those of x's dtype (flush-input).
    """
    a = _contiguous(_array(x))
    source = "bf16" if bf16 else _SOURCE.get(a.dtype.name, "f64")
    f = _mxlab.cast_format(fmt, round, overflow, subnormals, int(seed), int(random_bits), source)
    packed = _mxlab.quantize_packed(f, a, bf16, _threads(threads))
    values = _mxlab.dequantize(f, packed, _threads(threads))
    if not codes:
        return values
    return values, _unpack_codes(packed["elements"], f.element_bits, a.size).reshape(a.shape)


def _unpack_codes(packed_bytes, bits, count):
    """Codes of a low-first little-endian bit stream of `count` codes of `bits` bits."""
    stream = _np.unpackbits(packed_bytes, bitorder="little")[: count * bits].reshape(count, bits)
    return (stream.astype(_np.uint64) << _np.arange(bits, dtype=_np.uint64)).sum(axis=1).astype(_np.uint32)


def quantize(x, spec, axis=-1, profile=None, packed=False, out=None, bf16=False, threads=None, **options):
    """Block quantization of x with SPEC (``mxfp4``, ``nvfp4``, ``mxfp8_e4m3@16``, ``e2m1:e8m0_t32``, ...).

    packed=False: the dequantized (fake-quantized) values as float32 with x's shape (exact, except beyond the
    float32 range), written into out= (a float32 array of x's size) when given. Blocks run along `axis`
    (1-D blocks; 2-D tiles take the last two axes). packed=True: a dict of the packed form
    (docs/quantization.md "Packed form"): format, shape, elements (bit-packed codes, uint8), scale_grid,
    scales (each scale code in ceil(bits/8) little-endian bytes, block-grid order), tensor_scale,
    subtile_grid, subtile_offsets, packing and engine; ``dequantize`` reads it back.
    """
    f = block_format(spec, profile, axis, **options)
    a = _contiguous(_array(x))
    if packed:
        if out is not None:
            raise TypeError("out= is for fake quantization (packed=False)")
        return _mxlab.quantize_packed(f, a, bf16, _threads(threads))
    values, _ = _mxlab.quantize_fake(f, a, out, bf16, _threads(threads))
    return values


def dequantize(packed, spec=None, threads=None, **options):
    """The exact values (float64) of a packed tensor: the dict of ``quantize(..., packed=True)``, or the base
    name of the files of ``mxlab quantize --packed`` (then SPEC is required, as on the command line)."""
    if isinstance(packed, str):
        if spec is None:
            raise ValueError("dequantize of files needs SPEC (e.g. mxlab.dequantize('w', 'mxfp4'))")
        f, packed = _mxlab.read_packed(block_format(spec, **options), packed)
        return _mxlab.dequantize(f, packed, _threads(threads))
    if not isinstance(packed, dict):
        raise TypeError("expected the dict of quantize(..., packed=True) or a file base name")
    if spec is None:
        f = _mxlab.block_format(packed["format"], [(k, v) for k, v in packed["packing"]]
                                + _options(**options))
    else:
        f = block_format(spec, **options)
    return _mxlab.dequantize(f, packed, _threads(threads))


_LAYOUTS = {"hwio": (4, [2]), "hwio-depthwise": (4, [0, 1]), "io": (2, [0]), "oi": (2, [1]), "oihw": (4, [1])}


def analyze(x, *specs, gaps=False, per_block=False, layout=None, reduction_axes=None, profile=None, bf16=False,
            threads=None, select=None, **options):
    """Error metrics of x quantized with each SPEC, as records (``pandas.DataFrame(mxlab.analyze(x, 'mxfp4'))``).

    One record per format (per exponent gap with gaps=True, per block with per_block=True), with the columns of
    ``mxlab analyze``: format, elements, bits_per_element, mse, rmse, sqnr_db, bias, max_abs_error,
    max_rel_error, underflow_ratio, saturation_ratio (None per gap on the kernels), nan_count, engine.
    layout= (hwio, hwio-depthwise, io, oi, oihw) or reduction_axes= put blocks along a weight's reduction axes.

    x may also be the path of a capture folder (``mxlab.torch.capture``) or a weight file (safetensors, tfjs,
    GGUF, gnubg), as for ``mxlab analyze --input``: every float tensor whose name matches select= (a glob, or
    're:' and a regular expression; default all) is analyzed with blocks along its reduction axes (hidden,
    the last axis, for activations and gradients), and each record is led by tensor, shape and layout.
    """
    if not specs:
        raise ValueError("missing SPEC (e.g. mxlab.analyze(x, 'mxfp4', 'nvfp4'))")
    if isinstance(x, (str, _os.PathLike)):
        if per_block or layout is not None or reduction_axes is not None or bf16:
            raise ValueError("per_block=, layout=, reduction_axes= and bf16= take an array; a weight file's or capture "
                             "folder's tensors have their layout in the file")
        fs = [block_format(s, profile, **options) for s in specs]
        return _mxlab.analyze_weights(fs, _os.fspath(x), _select(select), gaps, _threads(threads))
    if select is not None:
        raise ValueError("select= takes a weight file or capture folder, not an array")
    a = _contiguous(_array(x))
    if layout is not None and reduction_axes is not None:
        raise ValueError("choose one of layout=, reduction_axes=")
    axes = []
    if layout is not None:
        if layout not in _LAYOUTS:
            raise ValueError(f"option 'layout={layout}': expected hwio, hwio-depthwise, io, oi or oihw")
        rank, axes = _LAYOUTS[layout]
        if a.ndim != rank:
            raise ValueError(f"option 'layout={layout}' needs a {rank}-D tensor; the input has shape "
                             + "x".join(str(d) for d in a.shape))
    elif reduction_axes is not None:
        axes = [int(reduction_axes)] if isinstance(reduction_axes, (int, _np.integer)) else [int(v) for v in reduction_axes]
    fs = [block_format(s, profile, **options) for s in specs]
    return _mxlab.analyze(fs, a, bf16, gaps, per_block, axes, _threads(threads))


def _select(select):
    if select is None:
        return "*"
    if not isinstance(select, str):
        raise TypeError(f"select= must be a name pattern (a string), not {type(select).__name__}")
    return select


def weights(path, select=None):
    """The tensors of a capture folder or weight file as the engine lists them (``mxlab data weights``): records
    of name, shape, dtype, elements, layout, reduction_axes, op (the module of a captured tensor) and readable."""
    if not isinstance(path, (str, _os.PathLike)):
        raise TypeError(f"expected the path of a capture folder or weight file, not {type(path).__name__}")
    return _mxlab.weight_list(_os.fspath(path), _select(select))


def read_weight(path, name):
    """One tensor of a capture folder or weight file as the engine reads it (the values every analysis sees), in
    its stored shape: float32 (float64 for a float64 tensor)."""
    if not isinstance(path, (str, _os.PathLike)):
        raise TypeError(f"expected the path of a capture folder or weight file, not {type(path).__name__}")
    return _mxlab.read_weight(_os.fspath(path), str(name))


def bounds(a, b, max_gap=None, **options):
    """The largest absolute and relative error of formats A and B at each exponent gap, analytic and
    enumerated (``mxlab bounds``), as records."""
    fa, fb = block_format(a, **options), block_format(b, **options)
    return _records(_mxlab.bounds_table(fa, fb, -1 if max_gap is None else int(max_gap)))


def gemm(a, b, spec_a, spec_b=None, accumulate="exact", output=None, profile=None, threads=None, **options):
    """C = a @ b of quantized operands under accumulation models, as ``mxlab gemm`` computes it (docs/gemm.md).

    a: an M x K float array quantized with spec_a along its rows; b: a K x N float array, its transpose
    quantized with spec_b (default spec_a) along K, as a PyTorch Linear weight [out, in] is; float32 or float64
    values, read exactly. accumulate: accumulation models separated by ';' (presets such as "ocp-dot-fp32",
    "tensorcore-trunc14", "safe-mac", or key=value settings); output: C's element format (default float32); the
    options (``profile``, ``scale_rule=``, ...) apply to both formats. Returns a dict: ``"c"`` maps each model's
    name to C (M x N float64 array of output-format values), ``"errors"`` holds the records of ``mxlab gemm``'s
    table: the exact product of the quantized operands against the float32 one, then each model against the
    exact product (the accumulation's error) and against the float32 one. Bad shapes, formats or models raise
    ValueError or TypeError naming the argument."""
    fa = block_format(spec_a, profile, **options)
    fb = block_format(spec_a if spec_b is None else spec_b, profile, **options)
    if not isinstance(accumulate, str):
        raise TypeError(f"accumulate= must be a string of models separated by ';', not {type(accumulate).__name__}")
    if output is not None and not isinstance(output, str):
        raise TypeError(f"output= must be an element format name, not {type(output).__name__}")
    table, c = _mxlab.gemm(_contiguous(_array(a)), _contiguous(_array(b)), fa, fb, accumulate, output,
                           _threads(threads))
    return {"c": c, "errors": _records(table)}


class Quantizer:
    """A block format made ready once for many fake quantizations of float32 arrays (a training loop's
    operands): ``q(x)`` equals ``quantize(x, spec, ...)`` bit for bit without preparing the kernel again."""

    def __init__(self, spec, profile=None, **options):
        self.format = block_format(spec, profile, **options)
        self._q = _mxlab.Quantizer(self.format)

    def __repr__(self):
        return f"Quantizer({self.format.name!r})"

    def __call__(self, x, out=None, bf16=False, threads=None):
        """Fake quantization along the last axis (2-D tiles: the last two), float32 out."""
        return self._q.run(_contiguous(_array(x)), out, bf16, _threads(threads))

    def columns(self, x, out=None, threads=None):
        """A float32 matrix quantized with the blocks down its columns, the values in x's layout."""
        return self._q.run_columns(_contiguous(_array(x)), out, _threads(threads))

    def rows_and_columns(self, x, columns, threads=None):
        """(self(x), columns.columns(x)) of a float32 matrix in one pass over it."""
        return self._q.run_rows_and_columns(_contiguous(_array(x)), columns._q, _threads(threads))

    def delayed(self, x, history, record=True, columns=False, threads=None):
        """A float32 matrix cast under a delayed per-tensor scale as ``mxlab train`` casts it (docs/training.md):
        fl32(x * scale) through this quantizer (down the columns with columns=True), times fl32(1 / scale);
        with record=True the input's amax enters the history's current step. history: an AmaxHistory
        (``mxlab.torch.layer_scaling``). Returns (values, saturated: inputs clipped by the cast)."""
        return self._q.run_delayed(_contiguous(_array(x)), history, bool(record), bool(columns), _threads(threads))


def load_recipe(name_or_path):
    """A training recipe as ``mxlab train --recipe`` reads it: a preset name, a recipe file, or a block format
    for every role (docs/training.md). A recipe file in the old ``key = value`` lines gives the
    DeprecationWarning that ``mxlab train`` prints."""
    recipe, warning = _mxlab.load_recipe(str(name_or_path))
    if warning is not None:
        _warnings.warn(warning, DeprecationWarning, stacklevel=2)
    return recipe


def recipe_presets():
    """The names of the preset recipes."""
    return _mxlab.recipe_presets()


ROLES = ("w", "a", "g", "w_bp", "a_bp")


def layer_formats(recipe, layer):
    """The block format of each role of a layer under the recipe (its overrides applied): a dict role ->
    BlockFormat, or None for FP32."""
    if isinstance(recipe, str):
        recipe = load_recipe(recipe)
    return dict(zip(ROLES, _mxlab.layer_formats(recipe, layer)))
