# mxlab.torch: fake quantization of tensors (the NumPy API's values, read in place), the straight-through
# gradient, and the Linear / Conv2d drop-ins' operands and gradients per recipe role.
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import mxlab  # noqa: E402
import mxlab.torch as mt  # noqa: E402


def tensor(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def same_bits(a, b):
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_fake_quantize_equals_numpy_and_reads_in_place():
    t = tensor(32, 64)
    assert mxlab._mxlab.source_address(t.numpy(), False) == t.data_ptr()
    q = mt.fake_quantize(t, "mxfp4", scale_rule="rceil")
    assert q.dtype == torch.float32 and q.shape == t.shape
    assert np.array_equal(q.numpy(), mxlab.quantize(t.numpy(), "mxfp4", scale_rule="rceil"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_fake_quantize_keeps_the_dtype(dtype):
    t = tensor(8, 64).to(dtype)
    q = mt.fake_quantize(t, "mxfp8_e4m3")
    assert q.dtype == dtype
    want = mxlab.quantize(t.float().numpy(), "mxfp8_e4m3")  # bf16 and f16 values are float32 values
    if dtype == torch.float64:
        want = mxlab.quantize(t.numpy(), "mxfp8_e4m3")
    assert torch.equal(q, torch.from_numpy(want).to(dtype))
    if dtype == torch.bfloat16:
        bits = t.view(torch.int16).numpy().view(np.uint16)
        assert mxlab._mxlab.source_address(bits, True) == t.data_ptr()


def test_fake_quantize_axis_and_errors():
    t = tensor(64, 16)
    assert torch.equal(mt.fake_quantize(t, "mxfp4", axis=0), mt.fake_quantize(t.t().contiguous(), "mxfp4").t())
    with pytest.raises(TypeError):
        mt.fake_quantize(torch.arange(10), "mxfp4")
    with pytest.raises(ValueError):
        mt.fake_quantize(t, "mxfp4", round="sideways")


def test_straight_through_gradient():
    x = tensor(4, 64).requires_grad_()
    y = mt.fake_quantize_ste(x, "mxfp4")
    assert torch.equal(y.detach(), mt.fake_quantize(x.detach(), "mxfp4"))
    w = tensor(4, 64, seed=1)
    (y * w).sum().backward()
    assert torch.equal(x.grad, w)  # identity
    x.grad = None
    mt.fake_quantize_ste(x, "mxfp4", grad_spec="mxfp8_e5m2").mul(w).sum().backward()
    assert torch.equal(x.grad, mt.fake_quantize(w, "mxfp8_e5m2"))


def columns(t, spec):
    """t quantized with the blocks down its columns."""
    return torch.from_numpy(mxlab.quantize(t.contiguous().numpy(), spec, axis=0))


def rows(t, spec):
    return torch.from_numpy(mxlab.quantize(t.contiguous().numpy(), spec))


def test_linear_operands_and_gradients_per_role(tmp_path):
    recipe = tmp_path / "r.txt"
    recipe.write_text("w = mxfp4\na = mxfp8_e4m3\ng = mxfp8_e5m2\nw_bp = mxint8\na_bp = nvfp4\n")
    torch.manual_seed(0)
    layer = mt.Linear(64, 32, recipe=str(recipe), name="fc1")
    x = tensor(48, 64, seed=2).requires_grad_()
    y = layer(x)
    w, b = layer.weight.detach(), layer.bias.detach()
    want = rows(x.detach(), "mxfp8_e4m3") @ rows(w, "mxfp4").t() + b
    assert torch.equal(y.detach(), want)
    gy = tensor(48, 32, seed=3)
    y.backward(gy)
    assert torch.equal(x.grad, rows(gy, "mxfp8_e5m2") @ columns(w, "mxint8"))
    assert torch.equal(layer.weight.grad, columns(gy, "mxfp8_e5m2").t() @ columns(x.detach(), "nvfp4"))
    assert torch.equal(layer.bias.grad, gy.sum(0))


def test_fp32_recipe_is_torch_linear_and_conv():
    torch.manual_seed(1)
    ref = torch.nn.Linear(20, 7)
    ours = mt.Linear(20, 7, recipe="fp32")
    ours.load_state_dict(ref.state_dict())
    x = tensor(5, 3, 20)
    assert torch.allclose(ours(x), ref(x), atol=1e-6)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
    mconv = mt.Conv2d(3, 8, 3, padding=1, stride=2, recipe="fp32")
    mconv.load_state_dict(conv.state_dict())
    img = tensor(2, 3, 9, 11).requires_grad_()
    img2 = img.detach().clone().requires_grad_()
    assert torch.allclose(mconv(img), conv(img2), atol=1e-5)
    mconv(img).square().sum().backward()
    conv(img2).square().sum().backward()
    assert torch.allclose(img.grad, img2.grad, atol=1e-4)
    assert torch.allclose(mconv.weight.grad, conv.weight.grad, atol=1e-3)


def test_conv_blocks_run_along_channels_of_each_kernel_position():
    torch.manual_seed(2)
    conv = mt.Conv2d(32, 4, 3, padding=1, recipe="mxfp8_e4m3")
    x = tensor(1, 32, 5, 5)
    y = conv(x)
    cols = torch.nn.functional.unfold(x, 3, padding=1).reshape(1, 32, 9, 25).permute(0, 3, 2, 1).reshape(25, 9 * 32)
    wmat = conv.weight.detach().permute(0, 2, 3, 1).reshape(4, 9 * 32)
    want = rows(cols, "mxfp8_e4m3") @ rows(wmat, "mxfp8_e4m3").t() + conv.bias.detach()
    assert torch.equal(y.detach(), want.reshape(1, 5, 5, 4).permute(0, 3, 1, 2))


def group_gemms(x, weight, bias, groups, spec, padding=1):
    """A grouped convolution as one im2col GEMM per group on operands quantized with spec along their rows."""
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    og = o // groups
    cols = torch.nn.functional.unfold(x, (kh, kw), padding=padding)
    length = cols.shape[-1]
    cols = cols.reshape(n, groups, cg, kh * kw, length)
    ys = []
    for j in range(groups):
        a = cols[:, j].permute(0, 3, 2, 1).reshape(n * length, kh * kw * cg)
        wm = weight[j * og:(j + 1) * og].permute(0, 2, 3, 1).reshape(og, kh * kw * cg)
        ys.append(rows(a, spec) @ rows(wm, spec).t() + bias[j * og:(j + 1) * og])
    return torch.cat(ys, 1).reshape(n, h, w, o).permute(0, 3, 1, 2)


@pytest.mark.parametrize("channels,out,groups", [(8, 12, 4), (6, 6, 6)], ids=["grouped", "depthwise"])
def test_grouped_conv_is_a_gemm_per_group(channels, out, groups):
    torch.manual_seed(3)
    conv = mt.Conv2d(channels, out, 3, padding=1, groups=groups, recipe="mxfp8_e4m3")
    x = tensor(2, channels, 5, 6, seed=6)
    y = conv(x)
    assert torch.equal(y.detach(), group_gemms(x, conv.weight.detach(), conv.bias.detach(), groups, "mxfp8_e4m3"))
    model = mt.convert(torch.nn.Sequential(torch.nn.Conv2d(channels, out, 3, padding=1, groups=groups)), "mxfp8_e4m3")
    assert isinstance(model[0], mt.Conv2d)
    model[0].load_state_dict(conv.state_dict())
    assert torch.equal(model(x), y)
    # FP32 operands: torch's own grouped convolution, up to the order of the float32 sums (im2col GEMMs against
    # torch's convolution kernel), hence the tolerance.
    ref = torch.nn.Conv2d(channels, out, 3, padding=1, groups=groups)
    ours = mt.Conv2d(channels, out, 3, padding=1, groups=groups, recipe="fp32")
    ours.load_state_dict(ref.state_dict())
    xr = x.clone().requires_grad_()
    xo = x.clone().requires_grad_()
    assert torch.allclose(ours(xo), ref(xr), atol=1e-5)
    ours(xo).square().sum().backward()
    ref(xr).square().sum().backward()
    assert torch.allclose(xo.grad, xr.grad, atol=1e-4) and torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-3)


def f32(x):
    return np.float32(x)


def test_delayed_scaling_over_steps_is_transformer_engines_rule():
    # fp8_delayed: E4M3 w, a, w_bp, a_bp and E5M2 g, each with an amax history (Transformer Engine's
    # DelayedScaling: history 1024, max, margin 0). The oracle is the rule written out in float32 (docs/training.md):
    # each step casts fl32(x * scale) with saturation and multiplies by fl32(1 / scale); the step's amax enters
    # the history at update, and the next scale is fl32(fp8_max / max(history)).
    recipe = mxlab.load_recipe("fp8_delayed")
    assert recipe.delayed_scaling and recipe.amax_history_len == 1024 and recipe.margin == 0
    torch.manual_seed(4)
    layer = mt.Linear(64, 32, recipe=recipe, name="fc")
    w = layer.weight.detach()
    fp8_max = {"w": 448.0, "a": 448.0, "g": 57344.0, "w_bp": 448.0, "a_bp": 448.0}
    amaxes = {role: [] for role in fp8_max}
    scale = {role: f32(1) for role in fp8_max}  # the first step's scale
    for step in range(4):
        x = (tensor(48, 64, seed=10 + step) * 2.0**(3 * step - 4)).requires_grad_()
        gy = tensor(48, 32, seed=20 + step) * 2.0**(-2 * step)
        for role in fp8_max:
            assert layer.mx_scaling[role].scale == scale[role] and layer.mx_scaling[role].fp8_max == fp8_max[role]

        def cast(t, role, down_columns=False):
            s = scale[role]
            q = layer.mx_quantizers[role]
            v = (t.detach().contiguous().numpy() * s).astype(np.float32)
            v = q.columns(v) if down_columns else q(v)
            return torch.from_numpy(v * (f32(1) / s))

        y = layer(x)
        assert torch.equal(y.detach(), cast(x, "a") @ cast(w, "w").t() + layer.bias.detach())
        y.backward(gy)
        assert torch.equal(x.grad, cast(gy, "g") @ cast(w, "w_bp", True))
        assert torch.equal(layer.weight.grad, cast(gy, "g", True).t() @ cast(x, "a_bp", True))
        mt.update_scaling(layer)
        for role, t in [("w", w), ("a", x), ("g", gy), ("w_bp", w), ("a_bp", x)]:
            amaxes[role].append(f32(t.detach().abs().max()))
            scale[role] = f32(f32(fp8_max[role]) / max(amaxes[role]))
            history = layer.mx_scaling[role].history
            assert len(history) == 1024 and history[0] == 0
            assert history[1024 - len(amaxes[role]):] == amaxes[role] and not any(history[1:1024 - len(amaxes[role])])
        layer.weight.grad = None
    # Evaluation casts with the scales and records nothing.
    layer.eval()
    before = [list(h.history) for h in layer.mx_scaling.values()]
    layer(tensor(8, 64) * 1000)
    mt.update_scaling(layer)
    assert [h.history[1:] for h in layer.mx_scaling.values()] == [b[2:] + [0.0] for b in before]


def test_delayed_scaling_histories_are_in_the_state_dict(tmp_path):
    """A checkpoint of an fp8_delayed layer resumes with the same histories and scales (the next step's values bit
    for bit); plain checkpoints load as before; mismatched or partial states are load_state_dict errors."""
    roles = ["w", "a", "g", "w_bp", "a_bp"]

    def train(layer, steps, seed):
        for step in range(steps):
            x = (tensor(24, 16, seed=seed + step) * 2.0**(2 * step - 3)).requires_grad_()
            layer(x).backward(tensor(24, 8, seed=seed + 50 + step))
            mt.update_scaling(layer)

    torch.manual_seed(6)
    layer = mt.Linear(16, 8, recipe="fp8_delayed", name="fc")
    train(layer, 3, 30)
    state = layer.state_dict()
    assert sorted(k for k in state if k.startswith("mx_")) == sorted(
        [f"mx_amax_history.{r}" for r in roles] + [f"mx_scale.{r}" for r in roles])
    torch.save(state, tmp_path / "fc.pt")
    resumed = mt.Linear(16, 8, recipe="fp8_delayed", name="fc")
    fresh = mt.Linear(16, 8, recipe="fp8_delayed", name="fc")
    resumed.load_state_dict(torch.load(tmp_path / "fc.pt"))
    fresh.load_state_dict({"weight": state["weight"], "bias": state["bias"]})  # a plain checkpoint: fresh histories
    for r in roles:
        assert resumed.mx_scaling[r].history == layer.mx_scaling[r].history
        assert resumed.mx_scaling[r].scale == layer.mx_scaling[r].scale != 1.0
        assert fresh.mx_scaling[r].scale == 1.0 and not any(fresh.mx_scaling[r].history)
    x = tensor(24, 16, seed=99) * 8.0
    y = layer(x).detach()
    assert same_bits(resumed(x).detach(), y)
    assert not torch.equal(fresh(x).detach(), y)
    # An MX layer has no histories: the keys are unexpected (strict) or ignored.
    mx = mt.Linear(16, 8, recipe="mxfp8")
    with pytest.raises(RuntimeError, match="Unexpected key.*mx_amax_history"):
        mx.load_state_dict(state)
    mx.load_state_dict(state, strict=False)
    # A history of another length, or half a state, is an error naming the key.
    recipe = tmp_path / "short.toml"
    recipe.write_text('preset = "fp8_delayed"\namax_history_len = 16\n')
    with pytest.raises(RuntimeError, match=r"mx_amax_history\.w: 1024 values, but the recipe's amax history holds 16"):
        mt.Linear(16, 8, recipe=str(recipe)).load_state_dict(state)
    half = {k: v for k, v in state.items() if k != "mx_scale.g"}
    with pytest.raises(RuntimeError, match=r"mx_scale\.g: missing beside mx_amax_history\.g"):
        mt.Linear(16, 8, recipe="fp8_delayed").load_state_dict(half)
    # Inside a converted model the keys take the layer's prefix.
    model = mt.convert(torch.nn.Sequential(torch.nn.Linear(16, 8)), "fp8_delayed")
    assert "0.mx_scale.a" in model.state_dict()


def round_to_f32(q):
    """The float32 nearest to the rational q, ties to the even significand."""
    from fractions import Fraction
    f = np.float32(float(q))
    candidates = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(candidates, key=lambda c: (abs(Fraction(float(c)) - q), int(np.array(c).view(np.int32)) & 1))


def exact_product(a, b):
    """a @ b of float32 matrices, every entry the exact sum rounded once to float32."""
    from fractions import Fraction
    fa = [[Fraction(float(v)) for v in row] for row in a.tolist()]
    fb = [[Fraction(float(v)) for v in col] for col in b.t().tolist()]
    return torch.tensor([[float(round_to_f32(sum(x * y for x, y in zip(r, c)))) for c in fb] for r in fa],
                        dtype=torch.float32)


def test_an_accumulation_model_runs_every_product_of_the_layers(tmp_path):
    """A recipe's accumulate (docs/gemm.md) runs the forward and both backward products of the drop-ins through the
    engine's product of mxlab train: under the exact model each entry is the exact sum of the quantized operands'
    products rounded once, which float32 matmul is not."""
    recipe = tmp_path / "exact.toml"
    recipe.write_text('preset = "mxfp8"\naccumulate = "exact"\n')
    assert mxlab.load_recipe(str(recipe)).accumulate == "exact" and mxlab.load_recipe("mxfp8").accumulate is None
    torch.manual_seed(7)
    layer = mt.Linear(64, 8, recipe=str(recipe), name="fc")
    q = layer.mx_quantizers
    x = (tensor(16, 64, seed=40) * 3.0).requires_grad_()
    gy = tensor(16, 8, seed=41)
    y = layer(x)
    y.backward(gy)
    w = layer.weight.detach()

    def rows(role, t):
        return torch.from_numpy(q[role](t.detach().contiguous().numpy()))

    def cols(role, t):
        return torch.from_numpy(q[role].columns(t.detach().contiguous().numpy()))

    want_y = exact_product(rows("a", x), rows("w", w).t())
    assert same_bits(y.detach(), want_y + layer.bias.detach())
    assert same_bits(x.grad, exact_product(rows("g", gy), cols("w_bp", w)))
    assert same_bits(layer.weight.grad, exact_product(cols("g", gy).t(), cols("a_bp", x)))
    assert not torch.equal(want_y, rows("a", x) @ rows("w", w).t())  # float32 sums differ somewhere
    # OCP Dot per pair of MX blocks exact, added across blocks in float32: the operands' blocks along K (32 of
    # the 64 input features) reach the model.
    from fractions import Fraction
    ocp = tmp_path / "ocp.toml"
    ocp.write_text('preset = "mxfp8"\naccumulate = "ocp-dot-fp32"\n')
    blocks = mt.Linear(64, 8, recipe=str(ocp), name="fc")
    blocks.load_state_dict(layer.state_dict())
    qa, qw = rows("a", x).tolist(), rows("w", w).tolist()
    want = []
    for r in qa:
        out = []
        for c in qw:
            acc = np.float32(0)
            for k0 in (0, 32):
                block = sum(Fraction(r[k]) * Fraction(c[k]) for k in range(k0, k0 + 32))
                acc = round_to_f32(Fraction(float(acc)) + block)
            out.append(float(acc))
        want.append(out)
    got = blocks(x).detach() - layer.bias.detach()
    assert same_bits(blocks(x).detach(), torch.tensor(want, dtype=torch.float32) + layer.bias.detach())
    assert not torch.equal(got, want_y)
    # Another model, another product; a convolution takes the recipe's model too.
    trunc = tmp_path / "trunc.toml"
    trunc.write_text('preset = "mxfp8"\naccumulate = "tensorcore-trunc14"\n')
    other = mt.Linear(64, 8, recipe=str(trunc), name="fc")
    other.load_state_dict(layer.state_dict())
    assert not torch.equal(other(x).detach(), y.detach())
    conv = mt.Conv2d(4, 8, 3, padding=1, recipe=str(trunc))
    plain = mt.Conv2d(4, 8, 3, padding=1, recipe="mxfp8")
    plain.load_state_dict(conv.state_dict())
    image = tensor(2, 4, 6, 6, seed=42) * 4.0
    assert conv.mx_accumulate == "tensorcore-trunc14" and plain.mx_accumulate is None
    assert not torch.equal(conv(image), plain(image))


def test_nongemm_rounds_the_outputs_and_input_gradients_of_non_gemm_layers(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text('preset = "mxfp8"\nnongemm = "bf16"\n')
    torch.manual_seed(5)
    model = mt.convert(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8)),
                       str(recipe))
    h = tensor(6, 32, seed=7).requires_grad_()
    out = model[1](h)
    h_ref = h.detach().clone().requires_grad_()
    ref = torch.nn.functional.gelu(h_ref)
    # The oracle: PyTorch's own bfloat16 rounding (nearest-even) of the FP32 results.
    assert torch.equal(out.detach(), ref.detach().to(torch.bfloat16).float())
    gy = tensor(6, 32, seed=8)
    out.backward(gy)
    ref.backward(gy)
    assert torch.equal(h.grad, h_ref.grad.to(torch.bfloat16).float())
    assert not torch.equal(h.grad, h_ref.grad)  # the rounding changed something
    mt.convert(model, "mxfp8")  # no nongemm: the hooks go
    assert torch.equal(model[1](h).detach(), torch.nn.functional.gelu(h.detach()))


def small_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def test_convert_shares_parameters_and_names_layers(tmp_path):
    model = small_model()
    weight = model[0].weight
    recipe = tmp_path / "r.txt"
    recipe.write_text("preset = mxfp8\nlayer 6 w = mxfp4\n")
    mt.convert(model, str(recipe))
    assert isinstance(model[0], mt.Conv2d) and isinstance(model[4], mt.Linear) and model[0].weight is weight
    assert model[6].mx_quantizers["w"].format.name == "mxfp4" and model[4].mx_quantizers["w"].format.name == "mxfp8_e4m3"
    assert model[4].mx_quantizers["g"].format.name == "mxfp8_e5m2"


def test_a_converted_model_trains():
    torch.manual_seed(0)
    model = mt.convert(small_model(), "mxfp8")
    x = tensor(64, 1, 28, 28, seed=4)
    labels = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(5))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_analyze_parameters_of_a_state_dict(tmp_path):
    model = small_model()
    torch.save(model.state_dict(), tmp_path / "m.pt")
    records = mt.analyze_parameters(torch.load(tmp_path / "m.pt"), "mxfp4", "nvfp4")
    assert [r["tensor"] for r in records][:2] == ["0.weight", "0.weight"]
    fc = [r for r in records if r["tensor"] == "4.weight" and r["format"] == "mxfp4"][0]
    assert fc == {"tensor": "4.weight", "shape": (32, 8 * 14 * 14),
                  **mxlab.analyze(model[4].weight.detach().numpy(), "mxfp4")[0]}
    conv = [r for r in records if r["tensor"] == "0.weight" and r["format"] == "nvfp4"][0]
    assert conv["mse"] == mxlab.analyze(model[0].weight.detach().numpy(), "nvfp4", layout="oihw")[0]["mse"]
    assert len(mt.analyze_parameters(model, "mxfp8_e4m3")) == 6
