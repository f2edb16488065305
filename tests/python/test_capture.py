# mxlab.torch.capture: activations and gradients of a small CNN on Fashion-MNIST written as a capture folder,
# read back by the engine bit for bit as the tensors the hooks saw (dL/d(output) kept by retain_grad), and
# analysed per layer by `mxlab analyze` and mxlab.analyze with the same figures as the arrays themselves;
# the folder appears whole or not at all; sampling, step limits and bad folders.
import csv
import gzip
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import mxlab  # noqa: E402
import mxlab.torch as mt  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist/"


def fashion_images(count):
    """The first `count` test images of Debian's dataset-fashion-mnist, as float32 [count, 1, 28, 28] in [0, 1]."""
    path = FASHION + "t10k-images-idx3-ubyte.gz"
    if not os.path.exists(path):
        pytest.skip("Debian's dataset-fashion-mnist is not installed")
    with gzip.open(path) as f:
        data = f.read(16 + 784 * count)
    images = np.frombuffer(data, np.uint8, offset=16).reshape(count, 1, 28, 28)
    labels_path = FASHION + "t10k-labels-idx1-ubyte.gz"
    with gzip.open(labels_path) as f:
        labels = np.frombuffer(f.read(8 + count), np.uint8, offset=8)
    return torch.from_numpy(images / np.float32(255)), torch.from_numpy(labels.astype(np.int64))


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 7 * 7, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def same_bits(a, b):
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.int32), b.view(np.int32))


class Seen:
    """The torch tensors each chosen layer takes and gives (its own hooks, beside capture's), with their gradients."""

    def __init__(self, model, types):
        self.inputs, self.outputs, self.hooks = {}, {}, []
        for name, m in model.named_modules():
            if isinstance(m, types):
                self.hooks.append(m.register_forward_hook(self.hook(name)))

    def hook(self, name):
        def keep(module, inputs, output):
            self.inputs[name] = inputs[0].detach().clone()
            output.retain_grad()
            self.outputs[name] = output
        return keep


def test_capture_of_a_cnn_on_fashion_mnist_reads_back_bit_for_bit_and_analyses_per_layer(tmp_path, cli):
    images, labels = fashion_images(96)
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):  # a few real steps, so the layers are not at their initial values
        batch = slice(16 * step, 16 * step + 16)
        loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    types = (torch.nn.Linear, torch.nn.Conv2d)
    seen = Seen(model, types)
    path = tmp_path / "cap"
    with mt.capture(model, path, types=types, max_tokens=None) as cap:
        out = model(images[64:96])
        loss = torch.nn.functional.cross_entropy(out, labels[64:96])
        loss.backward()
    layers = ["0", "3", "7", "9"]
    assert sorted(cap.names) == sorted([f"{l}/activation/{s}/0" for l in layers for s in ("input", "output")] +
                                       [f"{l}/gradient/output/0" for l in layers])
    assert sorted(os.listdir(tmp_path)) == ["cap"]  # no temporary folder left beside it
    manifest = json.load(open(path / "capture.json"))
    assert manifest["format"] == "mxlab-capture" and manifest["version"] == 1
    by_name = {e["name"]: e for e in manifest["tensors"]}
    conv_out = by_name["3/activation/output/0"]
    assert conv_out["source_shape"] == [32, 16, 14, 14] and conv_out["shape"] == [32 * 14 * 14, 16]
    assert conv_out["hidden_axis"] == 1 and conv_out["module"] == "Conv2d" and conv_out["layout"] == "tokens x hidden"
    assert conv_out["rows_of"] == 32 * 14 * 14 and conv_out["sample"] == "all"
    assert by_name["7/activation/input/0"]["shape"] == [32, 784] and by_name["7/activation/input/0"]["hidden_axis"] == 1

    def expected(layer, role, site):
        module = dict(model.named_modules())[layer]
        axis = 1 if isinstance(module, torch.nn.Conv2d) else -1
        t = seen.inputs[layer] if site == "input" else seen.outputs[layer]
        t = t.grad if role == "gradient" else t.detach()
        return mt.tokens_hidden(t, axis).numpy()

    arrays = {}
    for w in mxlab.weights(path):
        layer, role, site, step = w["name"].split("/")
        want = expected(layer, role, site)
        got = mxlab.read_weight(path, w["name"])  # the engine's reader: what every analysis sees
        assert w["layout"] == "tokens x hidden" and w["reduction_axes"] == (1,)
        assert same_bits(got, want), w["name"]
        assert np.abs(want).max() > 0, w["name"]  # real values, not zeros
        arrays[w["name"]] = want

    specs = ("mxfp4", "mxint8")
    from_python = mxlab.analyze(path, *specs)
    from_cli = cli.csv("analyze", *specs, "--input", path)
    assert len(from_python) == len(from_cli) == 2 * len(arrays)
    for p, c in zip(from_python, from_cli):
        direct = next(r for r in mxlab.analyze(arrays[p["tensor"]], p["format"]))
        assert c["tensor"] == p["tensor"] and c["format"] == p["format"]
        assert c["shape"] == "x".join(map(str, p["shape"])) and c["layout"] == p["layout"]
        for key in ("elements", "mse", "sqnr_db", "max_abs_error", "max_rel_error", "underflow_ratio", "saturation_ratio"):
            assert float(c[key]) == p[key] == direct[key], (p["tensor"], p["format"], key)  # 17 digits: exact

    # An experiment file takes the folder as a weights input: a point per tensor, the same figures.
    (tmp_path / "capture.toml").write_text('name = "capture"\n[inputs.acts]\nweights = "cap"\nselect = "*/activation/*"\n'
                                           '[sweep]\nformat = ["mxfp4", "mxint8"]\ninput = ["acts"]\n')
    cli.run("run", tmp_path / "capture.toml", "--out", tmp_path / "out")
    with open(tmp_path / "out" / "results" / "metrics.csv") as f:
        points = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert len(points) == 2 * 8
    for point in points:
        p = next(r for r in from_python if r["tensor"] == point["layer"] and r["format"] == point["format"])
        assert point["blocks"] == "tokens x hidden: blocks along hidden"
        assert float(point["mse"]) == p["mse"] and float(point["sqnr_db"]) == p["sqnr_db"]

    # The outlier-channel question per captured tensor: how far the largest channel stands above the typical
    # one, and what that costs MXFP4 against MXINT8 with blocks along hidden.
    table = {}
    for r in from_python:
        x = arrays[r["tensor"]]
        channel_amax = np.abs(x).max(axis=0)
        outlier = float(channel_amax.max() / np.median(channel_amax[channel_amax > 0]))
        table.setdefault(r["tensor"], {"outlier": outlier})[r["format"]] = r["sqnr_db"]
    for name, row in sorted(table.items()):
        print(f"{name:<24} outlier x{row['outlier']:8.2f}  mxfp4 {row['mxfp4']:6.2f} dB  mxint8 {row['mxint8']:6.2f} dB")
        assert row["mxint8"] > row["mxfp4"], name  # 8-bit integers beat 4-bit floats on every captured tensor
    assert max(row["outlier"] for row in table.values()) > 2


def test_capture_conv_gradients_and_inputs_are_channels_last(tmp_path):
    conv = torch.nn.Conv2d(3, 5, 3)
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    with mt.capture(conv, tmp_path / "c", activations="input", gradients=("input", "output")):
        y = conv(x)
        y.retain_grad()
        (y * y).sum().backward()
    names = [w["name"] for w in mxlab.weights(tmp_path / "c")]
    assert names == ["Conv2d/activation/input/0", "Conv2d/gradient/input/0", "Conv2d/gradient/output/0"]
    assert same_bits(mxlab.read_weight(tmp_path / "c", names[0]), x.detach().permute(0, 2, 3, 1).reshape(-1, 3).numpy())
    assert same_bits(mxlab.read_weight(tmp_path / "c", names[1]), x.grad.permute(0, 2, 3, 1).reshape(-1, 3).numpy())
    assert same_bits(mxlab.read_weight(tmp_path / "c", names[2]), y.grad.permute(0, 2, 3, 1).reshape(-1, 5).numpy())


def test_capture_limits_steps_and_tokens_with_a_seeded_sample(tmp_path):
    lin = torch.nn.Linear(16, 8)
    xs = [torch.randn(4, 10, 16, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    with mt.capture(lin, tmp_path / "first", gradients=None, steps=2, max_tokens=7):
        for x in xs:
            lin(x)
    names = [w["name"] for w in mxlab.weights(tmp_path / "first")]
    assert names == ["Linear/activation/input/0", "Linear/activation/output/0",
                     "Linear/activation/input/1", "Linear/activation/output/1"]
    assert same_bits(mxlab.read_weight(tmp_path / "first", names[2]), xs[1].reshape(40, 16)[:7].numpy())
    with mt.capture(lin, tmp_path / "random", activations="input", gradients=None, max_tokens=7, sample="random",
                    seed=5) as cap:
        lin(xs[0])
    rows = mt.sample_rows(40, 7, 5, "Linear/activation/input/0")
    assert len(set(rows.tolist())) == 7 and list(rows) == sorted(rows)
    got = mxlab.read_weight(tmp_path / "random", "Linear/activation/input/0")
    assert same_bits(got, xs[0].reshape(40, 16).numpy()[rows])
    entry = cap.entries[0]
    assert entry["rows_of"] == 40 and entry["sample"] == "random"
    assert json.load(open(tmp_path / "random" / "capture.json"))["seed"] == 5
    assert not np.array_equal(rows, mt.sample_rows(40, 7, 6, "Linear/activation/input/0"))  # the seed matters


def test_capture_is_whole_or_absent(tmp_path):
    lin = torch.nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="interrupted"):
        with mt.capture(lin, tmp_path / "cap"):
            lin(torch.ones(2, 4))
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []  # neither the folder nor its temporary
    with mt.capture(lin, tmp_path / "cap", gradients=None):
        lin(torch.ones(2, 4))
    with pytest.raises(FileExistsError):
        mt.capture(lin, tmp_path / "cap").start()
    with mt.capture(lin, tmp_path / "cap", gradients=None, overwrite=True):
        lin(torch.full((3, 4), 2.0))
    assert mxlab.weights(tmp_path / "cap")[0]["shape"] == (3, 4)
    assert sorted(os.listdir(tmp_path)) == ["cap"]
    assert len(lin._forward_hooks) == 0 and len(lin._backward_hooks) == 0  # hooks removed


def test_capture_refuses_bad_arguments(tmp_path):
    lin = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="no module"):
        mt.capture(lin, tmp_path / "a", types=torch.nn.Conv2d)
    with pytest.raises(ValueError, match="no module"):
        mt.capture(torch.nn.Sequential(lin), tmp_path / "a", names="encoder.*")
    with pytest.raises(ValueError, match="sample"):
        mt.capture(lin, tmp_path / "a", sample="every")
    with pytest.raises(ValueError, match="activations"):
        mt.capture(lin, tmp_path / "a", activations="middle")
    with pytest.raises(ValueError, match="max_tokens"):
        mt.capture(lin, tmp_path / "a", max_tokens=0)
    with pytest.raises(ValueError, match="nothing to capture"):
        mt.capture(lin, tmp_path / "a", activations=None, gradients=None)
    with pytest.raises(TypeError):
        mt.capture(lin.weight, tmp_path / "a")


def test_bad_capture_folders_raise_with_the_engine_message(tmp_path, cli):
    lin = torch.nn.Linear(4, 4)
    with mt.capture(lin, tmp_path / "cap", gradients=None):
        lin(torch.ones(2, 4))
    (tmp_path / "cap" / "000000.f32").write_bytes(b"\0" * 4)
    with pytest.raises(ValueError, match=r"capture\.json.*holds 4 bytes; shape \[2, 4\] of float32 needs 32"):
        mxlab.analyze(tmp_path / "cap", "mxfp4")
    assert "holds 4 bytes" in cli.error("analyze", "mxfp4", "--input", tmp_path / "cap")
    with pytest.raises(ValueError, match="select="):
        mxlab.analyze(np.ones(4, np.float32), "mxfp4", select="*")
    with pytest.raises(ValueError, match="per_block"):
        mxlab.analyze(tmp_path / "cap", "mxfp4", per_block=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_capture_writes_float32_of_every_dtype(tmp_path, dtype):
    layer = torch.nn.Identity()  # runs on CPU in every dtype (PyTorch 1.13 has no half-precision Linear there)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(3)).mul(2).to(dtype)
    if dtype == torch.float64:
        x[0, 0] = 1 + 2**-40  # rounded to nearest float32: 1.0
    with mt.capture(layer, tmp_path / "c", types=torch.nn.Identity, gradients=None):
        y = layer(x)
    got = mxlab.read_weight(tmp_path / "c", "Identity/activation/input/0")
    assert same_bits(got, x.float().numpy())  # bfloat16 and float16 exactly; float64 rounded to nearest even
    assert got[0, 0] == 1.0 or dtype != torch.float64
    assert same_bits(mxlab.read_weight(tmp_path / "c", "Identity/activation/output/0"), y.float().numpy())
    entry = json.load(open(tmp_path / "c" / "capture.json"))["tensors"][0]
    assert entry["source_dtype"] == str(dtype).replace("torch.", "") and entry["dtype"] == "float32"


# A capture whose process dies: the script starts a capture over an existing folder (overwrite=True), writes one
# tensor, says so and waits to be killed.
KILLED_CAPTURE = """
import sys, time, torch, mxlab.torch as mt
lin = torch.nn.Linear(4, 4)
cap = mt.capture(lin, sys.argv[1], gradients=None, overwrite=True).start()
lin(torch.ones(5, 4))
print("written", flush=True)
time.sleep(60)
"""


def test_a_killed_capture_leaves_its_temporary_which_readers_note_and_skip(tmp_path, cli):
    import signal
    import subprocess
    import sys
    lin = torch.nn.Linear(4, 4)
    with mt.capture(lin, tmp_path / "cap", gradients=None):
        lin(torch.ones(2, 4))
    p = subprocess.Popen([sys.executable, "-c", KILLED_CAPTURE, str(tmp_path / "cap")], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "written"
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    assert p.returncode == -signal.SIGKILL
    partial = [n for n in os.listdir(tmp_path) if n != "cap"]
    assert len(partial) == 1 and partial[0].startswith(".cap.") and partial[0].endswith(".partial")
    # the input and output written before the kill, no manifest
    assert sorted(os.listdir(tmp_path / partial[0])) == ["000000.f32", "000001.f32"]
    # The folder still holds the first capture; the unfinished one is named in a note, not read, not an error.
    with pytest.warns(UserWarning, match=f"'{partial[0]}' beside 'cap' is a capture that did not finish"):
        listed = mxlab.weights(tmp_path / "cap")
    assert [w["shape"] for w in listed] == [(2, 4), (2, 4)]  # the input and output of the first capture
    out = cli.run("data", "weights", tmp_path / "cap").stdout
    assert f"note: '{partial[0]}' beside 'cap' is a capture that did not finish" in out
    assert len(mxlab.analyze(tmp_path / "cap", "mxfp4")) == 2
    with pytest.raises(ValueError, match="temporary folder of a capture that did not finish"):
        mxlab.weights(tmp_path / partial[0])


def test_an_interrupted_write_removes_the_temporary(tmp_path, monkeypatch):
    lin = torch.nn.Linear(4, 4)
    cap = mt.capture(lin, tmp_path / "cap", gradients=None).start()  # no with block: the writer cleans up itself

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(mt, "tokens_hidden", interrupted)
    with pytest.raises(KeyboardInterrupt):
        lin(torch.ones(2, 4))
    assert os.listdir(tmp_path) == [] and len(lin._forward_hooks) == 0
    with pytest.raises(RuntimeError, match="not started"):
        cap.close()


def test_a_capture_never_closed_is_removed_when_the_interpreter_exits(tmp_path):
    import subprocess
    import sys
    script = ("import sys, torch, mxlab.torch as mt\n"
              "lin = torch.nn.Linear(4, 4)\n"
              "cap = mt.capture(lin, sys.argv[1], gradients=None).start()\n"
              "lin(torch.ones(2, 4))\n"
              "raise SystemExit('stopped with the capture open')\n")
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "cap")], capture_output=True, text=True)
    assert r.returncode == 1 and "stopped with the capture open" in r.stderr
    assert os.listdir(tmp_path) == []
