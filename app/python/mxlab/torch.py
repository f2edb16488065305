"""mxlab for PyTorch: fake quantization of CPU tensors and drop-in quantized layers (docs/python.md).

- ``fake_quantize(t, spec, ...)``: the values of ``mxlab.quantize`` as a tensor of t's dtype; float32 tensors
  are read and written in place of a copy.
- ``fake_quantize_ste(t, spec, ...)``: the same with the straight-through gradient (identity).
- ``Linear`` and ``Conv2d``: drop-ins for ``torch.nn.Linear`` / ``torch.nn.Conv2d`` whose GEMM operands are
  quantized per role as ``mxlab train`` quantizes them (docs/training.md): forward Y = X W^T takes X as ``a``
  and W as ``w``, blocks along the input features; backward dX = dY W takes dY as ``g`` and W as ``w_bp``,
  blocks along the output features; dW = dY^T X takes dY as ``g`` and X as ``a_bp``, blocks along the batch.
  Delayed scaling (fp8_delayed) keeps an amax history per operand; ``update_scaling(model)`` ends a step.
- ``convert(model, recipe)``: replaces a model's Linear and Conv2d layers in place, formats per layer name
  from the same recipe names and files as ``mxlab train --recipe``; a recipe's ``nongemm`` format rounds the
  outputs and input gradients of activation, pooling and normalisation layers.
- ``analyze_parameters(state, *specs)``: ``mxlab.analyze`` of every floating-point tensor of a state dict
  (``torch.load``) or a module, blocks along each weight's reduction axis, without writing files.
- ``capture(model, path, ...)``: activations (forward hooks) and gradients (full backward hooks) of chosen
  layers written as a capture folder, tokens x hidden float32, which ``mxlab analyze``, ``mxlab.analyze``,
  experiment files and the GUI read as an input.
"""

import fnmatch
import functools
import json
import os
import shutil
import sys
import uuid
import weakref
import zlib

import numpy as _np
import torch as _torch
import torch.nn.functional as _F

import mxlab as _mx

__all__ = ["fake_quantize", "fake_quantize_ste", "Linear", "Conv2d", "convert", "layer_quantizers", "layer_scaling",
           "update_scaling", "analyze_parameters", "capture", "tokens_hidden", "sample_rows"]


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

def _recipe(recipe):
    return recipe if isinstance(recipe, _mx.Recipe) else _mx.load_recipe(recipe)


def _layer_setup(recipe, layer):
    """(quantizer per role, delayed-scaling history per role) of a layer, as mxlab train prepares them."""
    quantizers, scaling = {}, {}
    for role, f in _mx.layer_formats(recipe, layer).items():
        delayed = None if f is None else _mx._mxlab.delayed_operand(recipe, f)
        if delayed is not None:
            f, scaling[role] = delayed
        else:
            scaling[role] = None
        quantizers[role] = None if f is None else _mx.Quantizer(f)
    return quantizers, scaling


def layer_quantizers(recipe, layer):
    """The prepared quantizer of each role (w, a, g, w_bp, a_bp) of a layer under a recipe (a preset name,
    a recipe file or an mxlab.Recipe); None where the role stays FP32. Under delayed scaling (fp8_delayed) the
    element casts saturate, as in ``mxlab train``; their scales are ``layer_scaling``'s."""
    return _layer_setup(_recipe(recipe), layer)[0]


def layer_scaling(recipe, layer):
    """A new delayed-scaling state (mxlab.AmaxHistory: scale, scale_inv, history, update()) of each role of a
    layer whose operand has one under the recipe (fp8_delayed: the element-format roles); None elsewhere."""
    return _layer_setup(_recipe(recipe), layer)[1]


def _run(q, x, h=None, record=False, columns=False):
    """q along the rows (or down the columns) of a float32 matrix, under the delayed scale h when it has one;
    x itself where q is None."""
    if q is None:
        return x
    if h is not None:
        return _torch.from_numpy(q.delayed(x.numpy(), h, record=record, columns=columns)[0])
    out = _torch.empty_like(x)
    (q.columns if columns else q)(x.numpy(), out=out.numpy())
    return out


def _product(model, a, qa, bt, qb, ta=False, tb=False):
    """A B^T of quantized float32 matrices, A = a (a^T when ta) and B^T = bt (bt^T when tb): float32 matmul, or
    under the recipe's accumulation model the engine's product of `mxlab train` (each operand's values with its
    role's block starts along the reduction axis, qa and qb its quantizers or None)."""
    if model is None:
        return (a.t() if ta else a) @ (bt if tb else bt.t())
    return _torch.from_numpy(_mx._mxlab.values_product(
        model, a.contiguous().numpy(), None if qa is None else qa.format, ta,
        bt.contiguous().numpy(), None if qb is None else qb.format, tb, 0))


class _QuantizedGemm(_torch.autograd.Function):
    """Y = X W^T (+ b) with X [N, I] and W [O, I], every operand quantized per role (docs/training.md)."""

    @staticmethod
    def forward(ctx, x, weight, bias, qs, hs, record, model):
        """qs: the quantizer of each role; hs: the delayed-scaling history of each role (None: none); record:
        whether the forward casts record their amax (training); model: the recipe's accumulation model (None:
        float32 products)."""
        x = x.detach().contiguous()
        w = weight.detach().contiguous()
        ctx.save_for_backward(x, w)
        ctx.qs, ctx.hs, ctx.has_bias, ctx.model = qs, hs, bias is not None, model
        y = _product(model, _run(qs["a"], x, hs["a"], record), qs["a"], _run(qs["w"], w, hs["w"], record), qs["w"])
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        qs, hs = ctx.qs, ctx.hs
        gy = gy.detach().float().contiguous()
        gx = gw = gb = None
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        g, hg = qs["g"], hs["g"]
        if g is not None and hg is None and need_x and need_w:
            g_rows, g_cols = (_torch.from_numpy(v) for v in g.rows_and_columns(gy.numpy(), g))
        else:  # a delayed scale: two casts, both recording dY's amax (mxlab train's quantize_rows_and_columns)
            g_rows = _run(g, gy, hg, True) if need_x else None
            g_cols = _run(g, gy, hg, True, columns=True) if need_w else None
        model = ctx.model
        if need_x:  # dX = dY W: reduction over the output features (W down its columns)
            gx = _product(model, g_rows, g, _run(qs["w_bp"], w, hs["w_bp"], True, columns=True), qs["w_bp"], tb=True)
        if need_w:  # dW = dY^T X: reduction over the batch (both down their columns)
            gw = _product(model, g_cols, g, _run(qs["a_bp"], x, hs["a_bp"], True, columns=True), qs["a_bp"], True, True)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = gy.sum(0)
        return gx, gw, gb, None, None, None, None


def _float(t):
    return t if t.dtype == _torch.float32 else t.float()


class _DelayedState:
    """The delayed-scaling state of a drop-in layer in its state_dict: for each role with a history,
    ``mx_amax_history.<role>`` (its float32 history, ``AmaxHistory.history``'s layout) and ``mx_scale.<role>`` (the
    scale of the next step), so that a checkpoint resumes with the same scales, as ``mxlab train``'s checkpoints do.
    Loading restores them; a state_dict without them (a model saved before conversion, or under a recipe without
    delayed scaling) leaves the layer's histories as they are, and a history whose length is not the recipe's is an
    error (``load_state_dict`` raises)."""

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for role, h in self.mx_scaling.items():
            if h is not None:
                destination[f"{prefix}mx_amax_history.{role}"] = _torch.tensor(h.history, dtype=_torch.float32)
                destination[f"{prefix}mx_scale.{role}"] = _torch.tensor(h.scale, dtype=_torch.float32)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        restored = set()
        for role, h in self.mx_scaling.items():
            keys = f"{prefix}mx_amax_history.{role}", f"{prefix}mx_scale.{role}"
            present = [k in state_dict for k in keys]
            if h is None or not any(present):
                continue
            restored.update(keys)
            if not all(present):
                error_msgs.append(f"{keys[present.index(False)]}: missing beside {keys[present.index(True)]} "
                                  "(a delayed-scaling state needs both)")
                continue
            history = state_dict[keys[0]].detach().float().reshape(-1).tolist()
            scale = float(state_dict[keys[1]])
            if len(history) != len(h.history):
                error_msgs.append(f"{keys[0]}: {len(history)} values, but the recipe's amax history holds "
                                  f"{len(h.history)}")
            elif not h.restore(history, scale):
                error_msgs.append(f"{keys[1]}: {scale}, not a positive finite scale")
        unexpected_keys[:] = [k for k in unexpected_keys if k not in restored]


class Linear(_DelayedState, _torch.nn.Linear):
    """torch.nn.Linear whose GEMMs run on operands fake-quantized per role under a recipe (float32 math).

    recipe: a preset name ("mxfp8", "mxfp4", "nvfp4", ...), a recipe file, a block format for every role, or an
    mxlab.Recipe; name: the layer's name for the recipe's per-layer overrides.
    """

    def __init__(self, in_features, out_features, bias=True, recipe="mxfp8", name="", device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.set_recipe(recipe, name)

    def set_recipe(self, recipe, name=""):
        """Sets the recipe and the layer's name (for the recipe's per-layer overrides); delayed-scaling histories
        start anew."""
        recipe = _recipe(recipe)
        self.mx_name = name
        self.mx_quantizers, self.mx_scaling = _layer_setup(recipe, name)
        self.mx_accumulate = recipe.accumulate

    def update_scaling(self):
        """Ends a step of delayed scaling: each history takes the step's amax and computes the next scale (what
        ``mxlab train`` does after every optimizer step). Nothing to do without delayed scaling."""
        for h in self.mx_scaling.values():
            if h is not None:
                h.update()

    def forward(self, x):
        _check_cpu(x)
        shape = x.shape
        y = _QuantizedGemm.apply(_float(x).reshape(-1, self.in_features), _float(self.weight),
                                 None if self.bias is None else _float(self.bias), self.mx_quantizers,
                                 self.mx_scaling, self.training, self.mx_accumulate)
        return y.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self):
        return super().extra_repr() + f", mxlab={self.mx_name or 'layer'}"


class Conv2d(_DelayedState, _torch.nn.Conv2d):
    """torch.nn.Conv2d as an im2col GEMM on quantized operands, as ``mxlab train``'s CNN: each output pixel's
    window is a row of kh x kw x C values (channels fastest, the NHWC order), so 1-D blocks run along the
    input channels of each kernel position; W is [O, kh x kw x C] in the same order. With groups > 1 each group
    is its own GEMM of the same kind: rows of kh x kw x C/groups values, its O/groups filters (a depthwise
    convolution's blocks run along the kh x kw taps)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", recipe="mxfp8", name="", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError("mxlab.torch.Conv2d supports padding_mode='zeros' only")
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, dilation=dilation,
                         groups=groups, bias=bias, padding_mode=padding_mode, device=device, dtype=dtype)
        self.set_recipe(recipe, name)

    set_recipe = Linear.set_recipe
    update_scaling = Linear.update_scaling

    def forward(self, x):
        _check_cpu(x)
        n, c, h, w = x.shape
        kh, kw = self.kernel_size
        g = self.groups
        padding = self.padding
        if isinstance(padding, str):
            if padding == "valid":
                padding = (0, 0)
            else:  # "same" (stride 1): PyTorch's split, the extra pixel after
                raise ValueError("mxlab.torch.Conv2d: give padding as numbers")
        cols = _F.unfold(_float(x), (kh, kw), dilation=self.dilation, padding=padding, stride=self.stride)
        length = cols.shape[-1]
        # [N, C*kh*kw, L] -> per group [N*L, kh*kw*C/g]: rows are output pixels, channels fastest.
        cg, og = c // g, self.out_channels // g
        cols = cols.reshape(n, g, cg, kh * kw, length)
        weight = _float(self.weight)
        bias = None if self.bias is None else _float(self.bias)
        ys = []
        for j in range(g):
            rows = cols[:, j].permute(0, 3, 2, 1).reshape(n * length, kh * kw * cg)
            wmat = weight[j * og:(j + 1) * og].permute(0, 2, 3, 1).reshape(og, kh * kw * cg)
            ys.append(_QuantizedGemm.apply(rows, wmat, None if bias is None else bias[j * og:(j + 1) * og],
                                           self.mx_quantizers, self.mx_scaling, self.training, self.mx_accumulate))
        y = ys[0] if g == 1 else _torch.cat(ys, 1)
        oh = (h + 2 * padding[0] - self.dilation[0] * (kh - 1) - 1) // self.stride[0] + 1
        ow = (w + 2 * padding[1] - self.dilation[1] * (kw - 1) - 1) // self.stride[1] + 1
        return y.reshape(n, oh, ow, self.out_channels).permute(0, 3, 1, 2).to(x.dtype)

    def extra_repr(self):
        return super().extra_repr() + f", mxlab={self.mx_name or 'layer'}"


# The non-GEMM layers whose outputs (forward) and input gradients (backward) a recipe's nongemm format rounds, as
# mxlab train rounds its activations, pooling and normalisation layers (the loss and residual sums stay FP32).
_NONGEMM = (_torch.nn.ReLU, _torch.nn.ReLU6, _torch.nn.GELU, _torch.nn.SiLU, _torch.nn.Tanh, _torch.nn.Sigmoid,
            _torch.nn.LeakyReLU, _torch.nn.ELU, _torch.nn.Hardswish, _torch.nn.Hardsigmoid, _torch.nn.Mish,
            _torch.nn.Softmax, _torch.nn.LogSoftmax, _torch.nn.LayerNorm, _torch.nn.GroupNorm,
            _torch.nn.modules.batchnorm._BatchNorm, _torch.nn.modules.instancenorm._InstanceNorm,
            _torch.nn.modules.pooling._MaxPoolNd, _torch.nn.modules.pooling._AvgPoolNd,
            _torch.nn.modules.pooling._AdaptiveAvgPoolNd, _torch.nn.modules.pooling._AdaptiveMaxPoolNd)


class _RoundValues(_torch.autograd.Function):
    """Forward: the values rounded with q; backward: the gradient unchanged."""

    @staticmethod
    def forward(ctx, t, q):
        return _apply(q, t.detach())

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _RoundGradient(_torch.autograd.Function):
    """Forward: the values unchanged (a copy, which a later in-place layer may change); backward: the gradient
    rounded with q."""

    @staticmethod
    def forward(ctx, t, q):
        ctx.q = q
        return t.detach().clone()

    @staticmethod
    def backward(ctx, grad):
        return _apply(ctx.q, grad.contiguous()), None


def _round_floats(values, function, q):
    if isinstance(values, _torch.Tensor):
        return function.apply(values, q) if values.is_floating_point() else values
    if isinstance(values, tuple):
        return tuple(_round_floats(v, function, q) for v in values)
    return values


def _set_nongemm(module, q):
    """Hooks that round the module's outputs and input gradients with q (none: removes them)."""
    for handle in module.__dict__.pop("_mxlab_nongemm", ()):
        handle.remove()
    if q is not None:
        module.__dict__["_mxlab_nongemm"] = (
            module.register_forward_pre_hook(lambda m, args: _round_floats(args, _RoundGradient, q)),
            module.register_forward_hook(lambda m, args, out: _round_floats(out, _RoundValues, q)))


def convert(model, recipe="mxfp8", inplace=True):
    """Replaces every torch.nn.Linear and torch.nn.Conv2d (zero padding given as numbers) of a model by the mxlab
    drop-in with the same parameters (shared, not copied), each quantizing per role under the recipe with its
    qualified name (``features.0``, ``classifier.2``) for the recipe's per-layer overrides. Returns the model.

    The recipe's formats and delayed scaling apply (``update_scaling(model)`` after each optimizer step), and
    its ``nongemm`` format rounds the outputs and input gradients of the activation, pooling and normalisation
    layers (hooks); its loss scaling is the training loop's to apply (``recipe.loss_scaling``).
    """
    if not inplace:
        import copy
        model = copy.deepcopy(model)
    recipe = _recipe(recipe)
    nongemm = _mx._mxlab.nongemm_format(recipe)
    nongemm = None if nongemm is None else _mx.Quantizer(nongemm)
    for module in model.modules():
        if isinstance(module, _NONGEMM):
            _set_nongemm(module, nongemm)
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            new = None
            if type(child) is _torch.nn.Linear:
                new = Linear.__new__(Linear)
            elif type(child) is _torch.nn.Conv2d and child.padding_mode == "zeros" and not isinstance(child.padding, str):
                new = Conv2d.__new__(Conv2d)
            if new is None:
                continue
            new.__dict__ = child.__dict__  # parameters, buffers and hooks stay the same objects
            new.set_recipe(recipe, full)
            setattr(module, child_name, new)
    return model


def update_scaling(model):
    """Ends a step of delayed scaling in every drop-in layer of the model (``Linear.update_scaling``): call it
    after each optimizer step, as ``mxlab train`` updates its histories. Nothing to do without delayed scaling."""
    for module in model.modules():
        if isinstance(module, (Linear, Conv2d)):
            module.update_scaling()


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


# ---- capture of activations and gradients

# Modules whose tensors are channels-first (N, C, ...): their hidden axis is the channel axis 1.
_CHANNELS_FIRST = (_torch.nn.modules.conv._ConvNd, _torch.nn.modules.batchnorm._BatchNorm,
                   _torch.nn.modules.instancenorm._InstanceNorm, _torch.nn.GroupNorm,
                   _torch.nn.modules.pooling._MaxPoolNd, _torch.nn.modules.pooling._AvgPoolNd,
                   _torch.nn.modules.pooling._AdaptiveAvgPoolNd, _torch.nn.modules.pooling._AdaptiveMaxPoolNd)
_SITES = ("input", "output")
_MANIFEST = "capture.json"


def tokens_hidden(t, hidden_axis=-1):
    """t as a 2-D [tokens, hidden] tensor: the hidden axis moved last and the other axes flattened in their order
    (a view where torch can make one). A 1-D tensor is one token."""
    if t.dim() == 0:
        raise ValueError("a scalar has no hidden axis")
    if t.dim() == 1:
        return t.reshape(1, -1)
    return t.movedim(hidden_axis, -1).reshape(-1, t.shape[hidden_axis])


def sample_rows(rows, max_tokens, seed, name):
    """The rows ``capture(..., sample="random")`` keeps of the tensor NAME when it has more than max_tokens:
    max_tokens distinct rows drawn uniformly by NumPy's default generator seeded with (seed, CRC-32 of the
    name), in increasing order. The same seed and name give the same rows in any process."""
    rng = _np.random.default_rng([int(seed), zlib.crc32(name.encode())])
    return _np.sort(rng.choice(int(rows), size=int(max_tokens), replace=False))


def _site_list(value, what):
    if value is None:
        return ()
    sites = (value,) if isinstance(value, str) else tuple(value)
    for v in sites:
        if v not in _SITES:
            raise ValueError(f"{what}={value!r}: expected 'input', 'output', both or None")
    return sites


def _count(value, what):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, _np.integer)) or int(value) < 1:
        raise ValueError(f"{what}={value!r}: expected a positive integer or None")
    return int(value)


class capture:
    """Activations and gradients of chosen layers of a model, written as a capture folder at ``path``.

    Used as a context manager (or with ``start()`` and ``close()``)::

        with mt.capture(model, "run1", types=(torch.nn.Linear,), steps=2) as cap:
            loss = loss_fn(model(x), y)
            loss.backward()
        mxlab.analyze("run1", "mxfp4", "mxint8")

    - Layers: every module that is an instance of one of ``types`` (default Linear and the convolutions) and,
      when ``names`` is given (a glob or a list of globs over qualified names such as ``"features.*"``), whose
      name matches one of them.
    - ``activations``: the inputs and/or outputs of each layer (forward hooks); ``gradients``: the gradients of
      the loss with respect to them (full backward hooks: "output" is dL/d(output), "input" dL/d(input), which
      exists only when the input requires a gradient). ``None`` captures none.
    - ``steps``: how many calls of each layer are captured (forward calls for activations, backward calls for
      gradients; None: every call). ``max_tokens``: rows kept per tensor (None: all): the first rows, or with
      ``sample="random"`` rows drawn with ``seed`` (``sample_rows``).
    - Each tensor is flattened to [tokens, hidden] (``tokens_hidden``): hidden is the last axis, or the channel
      axis 1 for the channels-first tensors (rank 3 and more) of convolutions, batch, instance and group norms
      and pooling layers; ``hidden_axis=`` sets it for every layer. Values are written as float32 (float16 and
      bfloat16 exactly; float64 rounded to nearest-even; NaN and infinities as they are).

    Each tensor is written to its file when its hook runs, so memory stays bounded by one tensor; the folder
    is built under a temporary name beside ``path`` (``.NAME.HEX.partial``) and renamed to it by ``close()``
    (or the end of the ``with`` block), after the manifest. An exception inside the block, a failed or
    interrupted write in a hook and the interpreter's exit with the capture open remove it; a killed process
    leaves it, which readers of ``path`` skip with a note. A crash never leaves a half-written capture at
    ``path``. An existing ``path`` is refused unless ``overwrite=True``.
    Tensor names are ``LAYER/ROLE/SITE/STEP`` (``fc1/activation/input/0``, ``fc1/gradient/output/1``; a second
    input or output of a layer is ``input1``, ``output1``).
    """

    def __init__(self, model, path, types=(_torch.nn.Linear, _torch.nn.modules.conv._ConvNd), names=None,
                 activations=("input", "output"), gradients=("output",), steps=1, max_tokens=4096, sample="first",
                 seed=0, hidden_axis=None, overwrite=False):
        if not isinstance(model, _torch.nn.Module):
            raise TypeError(f"expected a torch.nn.Module, not {type(model).__name__}")
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a folder name, not {type(path).__name__}")
        types = (types,) if isinstance(types, type) else tuple(types)
        if not types or not all(isinstance(t, type) for t in types):
            raise TypeError("types= must be a module class or a tuple of them")
        patterns = None if names is None else ((names,) if isinstance(names, str) else tuple(names))
        if sample not in ("first", "random"):
            raise ValueError(f"sample={sample!r}: expected 'first' or 'random'")
        if isinstance(seed, bool) or not isinstance(seed, (int, _np.integer)) or int(seed) < 0:
            raise ValueError(f"seed={seed!r}: expected a non-negative integer")
        if hidden_axis is not None and (isinstance(hidden_axis, bool) or not isinstance(hidden_axis, (int, _np.integer))):
            raise TypeError(f"hidden_axis={hidden_axis!r}: expected an integer or None")
        self.path = os.fspath(path)
        self.activations = _site_list(activations, "activations")
        self.gradients = _site_list(gradients, "gradients")
        if not self.activations and not self.gradients:
            raise ValueError("nothing to capture: activations= and gradients= are both empty")
        self.steps = _count(steps, "steps")
        self.max_tokens = _count(max_tokens, "max_tokens")
        self.sample, self.seed, self.hidden_axis, self.overwrite = sample, int(seed), hidden_axis, overwrite
        self.layers = [(name or type(model).__name__, m) for name, m in model.named_modules()
                       if isinstance(m, types) and (patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns))]
        if not self.layers:
            raise ValueError("no module of the model is one of types= " + ", ".join(t.__name__ for t in types)
                             + ("" if patterns is None else " with a name matching " + ", ".join(patterns)))
        self.entries = []
        self._hooks, self._calls, self._temp = [], {}, None

    @property
    def names(self):
        """The names of the tensors captured so far, in capture order."""
        return [e["name"] for e in self.entries]

    def start(self):
        """Registers the hooks and creates the temporary folder."""
        if self._temp is not None:
            raise RuntimeError("this capture has started already")
        if os.path.lexists(self.path) and not self.overwrite:
            raise FileExistsError(f"capture folder '{self.path}' exists (overwrite=True replaces it)")
        parent = os.path.dirname(os.path.abspath(self.path))
        # A new hidden name beside path (os.mkdir, unlike tempfile.mkdtemp, gives the folder the umask's mode).
        temp = os.path.join(parent, f".{os.path.basename(os.path.abspath(self.path))}.{uuid.uuid4().hex}.partial")
        os.mkdir(temp)
        self._temp = temp
        # Removes the temporary if the capture is never closed: at garbage collection, or when the interpreter
        # exits on an exception or KeyboardInterrupt outside a with block. Only a killed process leaves it.
        self._cleanup = weakref.finalize(self, shutil.rmtree, temp, ignore_errors=True)
        for name, module in self.layers:
            if self.activations:
                self._hooks.append(module.register_forward_hook(functools.partial(self._forward, name)))
            if self.gradients:
                self._hooks.append(module.register_full_backward_hook(functools.partial(self._backward, name)))
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, kind, value, traceback):
        if kind is not None:
            self.abort()
            return False
        self.close()
        return False

    def _step(self, name, role):
        step = self._calls.get((name, role), 0)
        if self.steps is not None and step >= self.steps:
            return None
        self._calls[(name, role)] = step + 1
        return step

    def _forward(self, name, module, inputs, output):
        step = self._step(name, "activation")
        if step is not None:
            self._write_all(name, module, "activation", step, inputs, output, self.activations)

    def _backward(self, name, module, grad_input, grad_output):
        step = self._step(name, "gradient")
        if step is not None:
            self._write_all(name, module, "gradient", step, grad_input, grad_output, self.gradients)

    def _write_all(self, name, module, role, step, inputs, outputs, sites):
        for site in sites:
            values = inputs if site == "input" else outputs
            values = values if isinstance(values, (tuple, list)) else (values,)
            for k, t in enumerate(values):
                if isinstance(t, _torch.Tensor) and t.is_floating_point() and t.dim() >= 1 and t.numel() > 0:
                    self._write(name, module, role, site, k, step, t)

    def _write(self, layer, module, role, site, index, step, t):
        try:
            self._write_tensor(layer, module, role, site, index, step, t)
        except BaseException:  # a failed or interrupted write (KeyboardInterrupt, a full disk) ends the capture
            self.abort()
            raise

    def _write_tensor(self, layer, module, role, site, index, step, t):
        x = t.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if self.hidden_axis is not None:
            axis = self.hidden_axis
        else:
            axis = 1 if isinstance(module, _CHANNELS_FIRST) and x.dim() >= 3 else -1
        m = tokens_hidden(x, axis)
        name = f"{layer}/{role}/{site}{index or ''}/{step}"
        rows, how = m.shape[0], "all"
        if self.max_tokens is not None and rows > self.max_tokens:
            if self.sample == "first":
                m, how = m[:self.max_tokens], "first"
            else:
                m = m[_torch.from_numpy(sample_rows(rows, self.max_tokens, self.seed, name))]
                how = "random"
        values = m.to(_torch.float32).contiguous().numpy()
        if sys.byteorder != "little":
            values = values.astype("<f4")
        file = f"{len(self.entries):06d}.f32"
        values.tofile(os.path.join(self._temp, file))
        self.entries.append({
            "name": name, "file": file, "layer": layer, "module": type(module).__name__, "role": role, "site": site,
            "index": index, "step": step, "shape": list(values.shape), "dtype": "float32", "layout": "tokens x hidden",
            "source_shape": list(x.shape), "source_dtype": str(x.dtype).replace("torch.", ""),
            "hidden_axis": axis if axis >= 0 else axis + x.dim(), "rows_of": rows, "sample": how})

    def _remove_hooks(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def abort(self):
        """Removes the hooks and the temporary folder: nothing is written at path."""
        self._remove_hooks()
        if self._temp is not None:
            self._cleanup()  # shutil.rmtree of the temporary, once
            self._temp = None

    def close(self):
        """Removes the hooks, writes the manifest and renames the folder to path. Returns path."""
        if self._temp is None:
            raise RuntimeError("this capture has not started (or has been closed)")
        self._remove_hooks()
        try:
            manifest = {"format": "mxlab-capture", "version": 1,
                        "producer": f"mxlab {_mx.__version__}, torch {_torch.__version__}", "seed": self.seed,
                        "tensors": self.entries}
            with open(os.path.join(self._temp, _MANIFEST), "w") as f:
                json.dump(manifest, f, indent=1)
            old = None
            if os.path.lexists(self.path):
                if not self.overwrite:
                    raise FileExistsError(f"capture folder '{self.path}' appeared while capturing")
                old = self._temp + ".old"
                os.rename(self.path, old)
            os.rename(self._temp, self.path)
            self._cleanup.detach()
            self._temp = None
            if old is not None:
                shutil.rmtree(old) if os.path.isdir(old) and not os.path.islink(old) else os.remove(old)
        except BaseException:
            self.abort()
            raise
        return self.path
