"""A drop-in for microxcaling's quantization functions (microsoft/microxcaling, ``mx/mx_ops.py`` and
``mx/elemwise_ops.py``), computed by mxlab with the ``microxcaling`` profile (docs/profiles.md): the same
arguments, torch tensors out, bit-identical to microxcaling's CPU Python path (``custom_cuda=False``).

    from mxlab.compat.microxcaling import _quantize_mx, quantize_mx_op, quantize_elemwise_op

What is not covered raises ``ValueError`` naming it: ``round="dither"`` (microxcaling draws torch random
numbers), ``scale_bits`` other than 8, shared exponents over more than one axis, sparse tensors.
docs/profiles.md lists the cases where results differ and why.
"""

import numpy as _np
import torch as _torch

import mxlab as _mx

__all__ = ["_quantize_mx", "quantize_mx_op", "_quantize_elemwise", "_quantize_bfloat", "_quantize_fp",
           "quantize_elemwise_op"]

# microxcaling's element formats (mx.formats.ElemFormat names) -> mxlab's MX block format of that element.
_BLOCK = {"int8": "mxint8", "int4": "mxint4", "int2": "mxint2", "fp8_e5m2": "mxfp8_e5m2",
          "fp8_e4m3": "mxfp8_e4m3", "fp6_e3m2": "mxfp6_e3m2", "fp6_e2m3": "mxfp6_e2m3", "fp4": "mxfp4",
          "fp4_e2m1": "mxfp4"}
# ... and the element formats of elementwise quantization.
_ELEMENT = {"int8": "mxint8", "int4": "mxint4", "int2": "mxint2", "fp8_e5m2": "e5m2", "fp8_e4m3": "e4m3",
            "fp6_e3m2": "e3m2", "fp6_e2m3": "e2m3", "fp4": "e2m1", "fp4_e2m1": "e2m1", "float16": "e5m10",
            "fp16": "e5m10ieee", "bfloat16": "e8m7ieee", "bf16": "e8m7ieee"}
# microxcaling's rounding names -> mxlab's (its float32 add-half arithmetic is the profile's nearest_arith).
_ROUND = {"nearest": "nearest-away", "even": "nearest-even", "floor": "zero"}


def _name(elem_format):
    name = getattr(elem_format, "name", elem_format)
    if not isinstance(name, str):
        raise ValueError(f"elem_format {elem_format!r}: expected a microxcaling ElemFormat or its name")
    return name.lower()


def _round(round):
    if round not in _ROUND:
        raise ValueError(f"round='{round}': mxlab reproduces microxcaling's nearest, even and floor "
                         "(dither draws torch random numbers)")
    return _ROUND[round]


def _to_torch(values, like):
    out = _torch.from_numpy(values).to(like.dtype)
    return out.to(like.device) if like.device.type != "cpu" else out


def _float32(A):
    if A.is_sparse:
        raise ValueError("sparse tensors are not supported")
    t = A.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.float().contiguous()


def _quantize_mx(A, scale_bits, elem_format, shared_exp_method="max", axes=None, block_size=0, round="nearest",
                 flush_fp32_subnorms=False, custom_cuda=False):
    """microxcaling's mx_ops._quantize_mx: MX quantization of A along `axes` (one axis) in blocks of
    `block_size` (0: the whole axis), E8M0 scales (scale_bits 8)."""
    if elem_format is None:
        return A
    name = _name(elem_format)
    if name not in _BLOCK:
        raise ValueError(f"elem_format '{name}': expected one of {', '.join(sorted(_BLOCK))}")
    if scale_bits != 8:
        raise ValueError(f"scale_bits={scale_bits}: mxlab's microxcaling profile has E8M0 scales (scale_bits 8)")
    axes = [axes] if isinstance(axes, int) else list(axes if axes is not None else [-1])
    if len(axes) != 1:
        raise ValueError(f"axes={axes}: shared exponents over one axis only")
    if shared_exp_method not in ("max", "none"):
        raise ValueError(f"shared_exp_method='{shared_exp_method}': expected max or none")
    x = _float32(A)
    if x.numel() == 0:
        return A.clone()
    axis = axes[0] + x.dim() if axes[0] < 0 else axes[0]
    size = 1 if shared_exp_method == "none" else block_size if block_size > 0 else x.shape[axis]
    options = {"round": _round(round)}
    if flush_fp32_subnorms:
        options["amax_subnormal"] = "flush"
    values = _mx.quantize(x.numpy(), f"{_BLOCK[name]}@{size}", axis=axis if x.dim() > 1 else -1,
                          profile="microxcaling", **options)
    return _to_torch(values, A)


def quantize_mx_op(A, mx_specs, elem_format=None, block_size=None, axes=None, round="nearest",
                   expand_and_reshape=False):
    """microxcaling's mx_ops.quantize_mx_op: _quantize_mx with scale bits, shared exponent method and
    subnormal flushing from mx_specs."""
    if elem_format is None:
        return A
    if block_size is None:
        block_size = mx_specs["block_size"]
    scale_bits = mx_specs["scale_bits"] or 8
    return _quantize_mx(A, scale_bits, elem_format, shared_exp_method=mx_specs["shared_exp_method"], axes=axes,
                        block_size=block_size, round=round, flush_fp32_subnorms=mx_specs["mx_flush_fp32_subnorms"])


def _cast(A, fmt, round, saturate_normals, allow_denorm):
    x = _float32(A)
    if x.numel() == 0:
        return A.clone()
    if not saturate_normals and not fmt.startswith("mxint") and not fmt.endswith("ieee") and fmt != "e5m2":
        raise ValueError(f"saturate_normals=False on {fmt}: microxcaling writes Inf where the format has none")
    integer = fmt.startswith("mxint")
    overflow = "saturate" if saturate_normals or integer else "inf"
    a = x.numpy()
    ebits = 0 if integer else int(fmt[1:fmt.index("m")])
    if not allow_denorm and not integer:
        # microxcaling flushes the inputs below the smallest normal (x * 0, keeping the sign) before rounding
        a = _np.where(_np.abs(a) >= _np.float32(2.0 ** (2 - 2 ** (ebits - 1))), a, a * _np.float32(0))
    values = _mx.cast(a, fmt, round=_round(round), overflow=overflow).astype(_np.float32)
    if overflow == "inf":
        # ... and sends every value whose rounded magnitude passes the largest normal to Inf, whatever the
        # rounding mode (IEEE's toward-zero rounding would keep the largest finite value)
        beyond = _np.abs(a.astype(_np.float64)) >= 2.0 ** (2 ** (ebits - 1))
        values = _np.where(beyond, _np.copysign(_np.float32(_np.inf), a), values)
    return _to_torch(values, A)


def _quantize_elemwise(A, elem_format, round="nearest", custom_cuda=False, saturate_normals=False, allow_denorm=True):
    """microxcaling's elemwise_ops._quantize_elemwise: each element cast to elem_format."""
    if elem_format is None:
        return A
    name = _name(elem_format)
    if name not in _ELEMENT:
        raise ValueError(f"elem_format '{name}': expected one of {', '.join(sorted(_ELEMENT))}")
    return _cast(A, _ELEMENT[name], round, saturate_normals, allow_denorm)


def _quantize_bfloat(A, bfloat, round="nearest", custom_cuda=False, allow_denorm=True):
    """microxcaling's _quantize_bfloat: bfloat<bfloat> (8 exponent bits, bfloat - 9 mantissa bits)."""
    if bfloat in (0, 32):
        return A
    return _cast(A, f"e8m{bfloat - 9}ieee", round, False, allow_denorm)


def _quantize_fp(A, exp_bits=None, mantissa_bits=None, round="nearest", custom_cuda=False, allow_denorm=True):
    """microxcaling's _quantize_fp: an IEEE-style float with exp_bits and mantissa_bits."""
    if exp_bits is None or mantissa_bits is None:
        return A
    return _cast(A, f"e{exp_bits}m{mantissa_bits}ieee", round, False, allow_denorm)


def quantize_elemwise_op(A, mx_specs, round=None):
    """microxcaling's elemwise_ops.quantize_elemwise_op: bfloat or fp elementwise quantization from mx_specs."""
    if mx_specs is None:
        return A
    round = mx_specs["round"] if round is None else round
    if mx_specs["bfloat"] > 0 and mx_specs["fp"] > 0:
        raise ValueError("Cannot set both [bfloat] and [fp] in mx_specs.")
    if mx_specs["bfloat"] > 9:
        return _quantize_bfloat(A, mx_specs["bfloat"], round=round, allow_denorm=mx_specs["bfloat_subnorms"])
    if 0 < mx_specs["bfloat"] <= 9:
        raise ValueError("Cannot set [bfloat] <= 9 in mx_specs.")
    if mx_specs["fp"] > 6:
        return _quantize_fp(A, exp_bits=5, mantissa_bits=mx_specs["fp"] - 6, round=round,
                            allow_denorm=mx_specs["bfloat_subnorms"])
    if 0 < mx_specs["fp"] <= 6:
        raise ValueError("Cannot set [fp] <= 6 in mx_specs.")
    return A
