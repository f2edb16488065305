"""mxlab for PyTorch: fake quantization of CPU tensors and drop-in quantized layers (docs/python.md).

- ``fake_quantize(t, spec, ...)``: the values of ``mxlab.quantize`` as a tensor of t's dtype; float32 tensors
  are read and written in place of a copy.
- ``fake_quantize_ste(t, spec, ...)``: the same with the straight-through gradient (identity).
- ``Linear`` and ``Conv2d``: drop-ins for ``torch.nn.Linear`` / ``torch.nn.Conv2d`` whose GEMM operands are
  quantized per role as ``mxlab train`` quantizes them (docs/training.md): forward Y = X W^T takes X as ``a``
  and W as ``w``, blocks along the input features; backward dX = dY W takes dY as ``g`` and W as ``w_bp``,
  blocks along the output features; dW = dY^T X takes dY as ``g`` and X as ``a_bp``, blocks along the batch.
- ``convert(model, recipe)``: replaces a model's Linear and Conv2d layers in place, formats per layer name
  from the same recipe names and files as ``mxlab train --recipe``.
- ``analyze_parameters(state, *specs)``: ``mxlab.analyze`` of every floating-point tensor of a state dict
  (``torch.load``) or a module, blocks along each weight's reduction axis, without writing files.
"""

import functools
import warnings

import numpy as _np
import torch as _torch
import torch.nn.functional as _F

import mxlab as _mx

__all__ = ["fake_quantize", "fake_quantize_ste", "Linear", "Conv2d", "convert", "layer_quantizers", "analyze_parameters"]


def _check_cpu(t):
    if not isinstance(t, _torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise TypeError(f"mxlab.torch works on CPU tensors; this one is on {t.device} (move it with .cpu())")


def _numpy(t):
    """A CPU tensor's values as a NumPy array of the same memory, and whether it holds bfloat16 bits."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == _torch.bfloat16:
        return t.view(_torch.int16).numpy().view(_np.uint16), True
    if t.dtype in (_torch.float32, _torch.float16, _torch.float64):
        return t.numpy(), False
    raise TypeError(f"expected a floating-point tensor (float32, float16, bfloat16, float64), not {t.dtype}")


@functools.lru_cache(maxsize=256)
def _cached_quantizer(spec, profile, axis, options):
    return _mx.Quantizer(spec, profile, **({"block_axis": axis} if axis not in (None, -1) else {}), **dict(options))


def _quantizer(spec, profile=None, axis=-1, **options):
    if isinstance(spec, _mx.Quantizer):
        return spec
    if isinstance(spec, _mx.BlockFormat):
        spec = spec.name if not options and profile is None else spec
    try:
        return _cached_quantizer(spec, profile, axis, tuple(sorted(options.items())))
    except TypeError:  # an unhashable option value: no cache
        return _mx.Quantizer(spec, profile, **options)


def _apply(q, t, threads=None):
    """q's fake quantization of a CPU tensor, as a tensor of t's dtype and shape."""
    _check_cpu(t)
    x, bf16 = _numpy(t)
    out = _torch.empty(t.shape, dtype=_torch.float32)
    q(x, out=out.numpy(), bf16=bf16, threads=threads)
    return out if t.dtype == _torch.float32 else out.to(t.dtype)


def fake_quantize(t, spec, axis=-1, profile=None, threads=None, **options):
    """The dequantized values of t quantized with SPEC (blocks along `axis`), as a tensor of t's dtype.

    Options are those of ``mxlab.quantize`` (round=, scale_rule=, ...). Gradients do not flow through this
    function; ``fake_quantize_ste`` passes them straight through.
    """
    return _apply(_quantizer(spec, profile, axis, **options), t, threads)


class _STE(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, q, grad_q, threads):
        ctx.grad_q, ctx.threads = grad_q, threads
        return _apply(q, t, threads)

    @staticmethod
    def backward(ctx, grad):
        if ctx.grad_q is not None:
            grad = _apply(ctx.grad_q, grad.contiguous(), ctx.threads)
        return grad, None, None, None


def fake_quantize_ste(t, spec, axis=-1, profile=None, grad_spec=None, threads=None, **options):
    """fake_quantize with the straight-through gradient: the gradient passes unchanged (or fake-quantized
    with grad_spec, blocks along the same axis, when given)."""
    q = _quantizer(spec, profile, axis, **options)
    gq = None if grad_spec is None else _quantizer(grad_spec, profile, axis, **options)
    return _STE.apply(t, q, gq, threads)


# ---- layers

def layer_quantizers(recipe, layer):
    """The prepared quantizer of each role (w, a, g, w_bp, a_bp) of a layer under a recipe (a preset name,
    a recipe file or an mxlab.Recipe); None where the role stays FP32."""
    if not isinstance(recipe, _mx.Recipe):
        recipe = _mx.load_recipe(recipe)
    if recipe.delayed_scaling:
        raise ValueError(f"recipe '{recipe.name}': delayed scaling keeps an amax history per operand across "
                         "steps, which mxlab.torch does not run; use a current-scaling recipe (fp8_current)")
    return {role: None if f is None else _mx.Quantizer(f) for role, f in _mx.layer_formats(recipe, layer).items()}


def _run(q, x):
    """q along the rows of a float32 matrix (x itself where q is None)."""
    if q is None:
        return x
    out = _torch.empty_like(x)
    q(x.numpy(), out=out.numpy())
    return out


def _run_columns(q, x):
    if q is None:
        return x
    out = _torch.empty_like(x)
    q.columns(x.numpy(), out=out.numpy())
    return out


class _QuantizedGemm(_torch.autograd.Function):
    """Y = X W^T (+ b) with X [N, I] and W [O, I], every operand quantized per role (docs/training.md)."""

    @staticmethod
    def forward(ctx, x, weight, bias, qs):
        x = x.detach().contiguous()
        w = weight.detach().contiguous()
        ctx.save_for_backward(x, w)
        ctx.qs, ctx.has_bias = qs, bias is not None
        y = _run(qs["a"], x) @ _run(qs["w"], w).t()
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        qs = ctx.qs
        gy = gy.detach().float().contiguous()
        gx = gw = gb = None
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        g = qs["g"]
        if g is not None and need_x and need_w:
            g_rows, g_cols = (_torch.from_numpy(v) for v in g.rows_and_columns(gy.numpy(), g))
        else:
            g_rows = _run(g, gy) if need_x else None
            g_cols = _run_columns(g, gy) if need_w else None
        if need_x:  # dX = dY W: reduction over the output features (W down its columns)
            gx = g_rows @ _run_columns(qs["w_bp"], w)
        if need_w:  # dW = dY^T X: reduction over the batch (both down their columns)
            gw = g_cols.t() @ _run_columns(qs["a_bp"], x)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = gy.sum(0)
        return gx, gw, gb, None


def _float(t):
    return t if t.dtype == _torch.float32 else t.float()


class Linear(_torch.nn.Linear):
    """torch.nn.Linear whose GEMMs run on operands fake-quantized per role under a recipe (float32 math).

    recipe: a preset name ("mxfp8", "mxfp4", "nvfp4", ...), a recipe file, a block format for every role, or an
    mxlab.Recipe; name: the layer's name for the recipe's per-layer overrides.
    """

    def __init__(self, in_features, out_features, bias=True, recipe="mxfp8", name="", device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.set_recipe(recipe, name)

    def set_recipe(self, recipe, name=""):
        self.mx_name = name
        self.mx_quantizers = layer_quantizers(recipe, name)

    def forward(self, x):
        _check_cpu(x)
        shape = x.shape
        y = _QuantizedGemm.apply(_float(x).reshape(-1, self.in_features), _float(self.weight),
                                 None if self.bias is None else _float(self.bias), self.mx_quantizers)
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self):
        return super().extra_repr() + f", mxlab={self.mx_name or 'layer'}"


class Conv2d(_torch.nn.Conv2d):
    """torch.nn.Conv2d as an im2col GEMM on quantized operands, as ``mxlab train``'s CNN: each output pixel's
    window is a row of kh x kw x C values (channels fastest, the NHWC order), so 1-D blocks run along the
    input channels of each kernel position; W is [O, kh x kw x C] in the same order. groups=1 only."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", recipe="mxfp8", name="", device=None, dtype=None):
        if groups != 1:
            raise ValueError("mxlab.torch.Conv2d supports groups=1 only")
        if padding_mode != "zeros":
            raise ValueError("mxlab.torch.Conv2d supports padding_mode='zeros' only")
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation,
                         groups=groups, bias=bias, padding_mode=padding_mode, device=device, dtype=dtype)
        self.set_recipe(recipe, name)

    set_recipe = Linear.set_recipe

    def forward(self, x):
        _check_cpu(x)
        n, c, h, w = x.shape
        kh, kw = self.kernel_size
        padding = self.padding
        if isinstance(padding, str):
            if padding == "valid":
                padding = (0, 0)
            else:  # "same" (stride 1): PyTorch's split, the extra pixel after
                raise ValueError("mxlab.torch.Conv2d: give padding as numbers")
        cols = _F.unfold(_float(x), (kh, kw), dilation=self.dilation, padding=padding, stride=self.stride)
        length = cols.shape[-1]
        # [N, C*kh*kw, L] -> [N*L, kh*kw*C]: rows are output pixels, channels fastest.
        rows = cols.reshape(n, c, kh * kw, length).permute(0, 3, 2, 1).reshape(n * length, kh * kw * c)
        wmat = _float(self.weight).permute(0, 2, 3, 1).reshape(self.out_channels, kh * kw * c)
        y = _QuantizedGemm.apply(rows, wmat, None if self.bias is None else _float(self.bias), self.mx_quantizers)
        oh = (h + 2 * padding[0] - self.dilation[0] * (kh - 1) - 1) // self.stride[0] + 1
        ow = (w + 2 * padding[1] - self.dilation[1] * (kw - 1) - 1) // self.stride[1] + 1
        return y.reshape(n, oh, ow, self.out_channels).permute(0, 3, 1, 2).to(x.dtype)

    def extra_repr(self):
        return super().extra_repr() + f", mxlab={self.mx_name or 'layer'}"


def convert(model, recipe="mxfp8", inplace=True):
    """Replaces every torch.nn.Linear and torch.nn.Conv2d (groups=1) of a model by the mxlab drop-in with the
    same parameters (shared, not copied), each quantizing per role under the recipe with its qualified
    name (``features.0``, ``classifier.2``) for the recipe's per-layer overrides. Returns the model.

    The recipe's formats apply; its loss scaling is the training loop's to apply (``recipe.loss_scaling``),
    and its non-GEMM rounding (``nongemm``) is not simulated.
    """
    if not inplace:
        import copy
        model = copy.deepcopy(model)
    if not isinstance(recipe, _mx.Recipe):
        recipe = _mx.load_recipe(recipe)
    if recipe.nongemm not in ("", "fp32"):
        warnings.warn(f"recipe '{recipe.name}': nongemm = {recipe.nongemm} is not simulated by mxlab.torch")
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            new = None
            if type(child) is _torch.nn.Linear:
                new = Linear.__new__(Linear)
            elif type(child) is _torch.nn.Conv2d and child.groups == 1 and child.padding_mode == "zeros" \
                    and not isinstance(child.padding, str):
                new = Conv2d.__new__(Conv2d)
            if new is None:
                continue
            new.__dict__ = child.__dict__  # parameters, buffers and hooks stay the same objects
            new.set_recipe(recipe, full)
            setattr(module, child_name, new)
    return model


def analyze_parameters(state, *specs, threads=None, **options):
    """Error records (``mxlab.analyze``) of every floating-point tensor of a state dict (``torch.load``) or of a
    module's ``state_dict()``, each record led by the tensor's name and shape. Blocks run along the reduction
    axis of a weight: the input features of a Linear weight [O, I] (its last axis) and the input channels of a
    convolution weight [O, I, kh, kw] (layout ``oihw``); other tensors along their last axis. Tensors are read
    in place (CPU, contiguous)."""
    items = state.state_dict().items() if isinstance(state, _torch.nn.Module) else state.items()
    records = []
    for name, t in items:
        if not isinstance(t, _torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            continue
        x, bf16 = _numpy(t.cpu())
        layout = "oihw" if t.dim() == 4 else None
        for r in _mx.analyze(x, *specs, layout=layout, bf16=bf16, threads=threads, **options):
            records.append({"tensor": name, "shape": tuple(t.shape), **r})
    return records
