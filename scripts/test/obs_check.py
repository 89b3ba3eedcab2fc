#!/usr/bin/env python3
"""Reads gossiptrain's observability outputs with the real readers, for the tests and by hand.

  obs_check.py tb DIR                  TensorBoard's EventAccumulator over DIR: {tag: [[step, value]...]}
  obs_check.py tensors FILE            the safetensors package: {"metadata", "tensors": {name: {shape, data}}}
  obs_check.py forward FILE DATA_DIR   a NumPy forward pass of FILE's model (PyTorch layout, NCHW)
                                       over the IDX test set in DATA_DIR: {"acc", "rows"}
Prints one JSON object on stdout. Run with the venv of scripts/test/obs-venv.sh.
"""
import gzip
import json
import os
import sys

import numpy as np


def tb(run_dir):
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["scalars"]:
        out[tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    return out


def tensors(path):
    from safetensors import safe_open

    out = {}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        for name in f.keys():
            t = f.get_tensor(name)
            out[name] = {"shape": list(t.shape), "dtype": str(t.dtype),
                         "data": [float(v) for v in t.reshape(-1)]}
    return {"metadata": meta, "tensors": out, "order": list(out.keys())}


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise SystemExit(f"no {stem}[.gz] in {data_dir}")


def parse_spec(spec):
    """The layer list of a gossiptrain model spec (core/model.hpp), for the forward pass."""
    kind, body = spec.split(":", 1)
    parts = body.split("-")
    if kind == "mlp":
        return (1, 1, int(parts[0])), ["f"] * (len(parts) - 2) + ["out"]
    h, w, c = (int(v) for v in parts[0].split("x"))
    layers = []
    for p in parts[1:-1]:
        if p[0] == "c":
            layers.append(("c", int(p[p.index("k") + 1:])))
        elif p[0] == "p":
            layers.append(("p", int(p[1:])))
        else:
            layers.append("f")
    return (h, w, c), layers + ["out"]


def conv2d_same(x, w, b):
    # x [N, C, H, W], w [O, C, K, K], stride 1, zero padding (K-1)/2: an im2col in NumPy.
    n, c, h, wd = x.shape
    o, _, k, _ = w.shape
    p = (k - 1) // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, k - 1 - p), (p, k - 1 - p)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))  # N C H W K K
    y = np.einsum("nchwij,ocij->nohw", cols, w, optimize=True)
    return y + b[None, :, None, None]


def maxpool(x, p):
    n, c, h, w = x.shape
    x = x[:, :, : h // p * p, : w // p * p]
    return x.reshape(n, c, h // p, p, w // p, p).max(axis=(3, 5))


def forward(path, data_dir):
    from safetensors.numpy import load_file
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        spec = f.metadata()["model"]
    t = load_file(path)
    (h, w, c), layers = parse_spec(spec)
    x_all = read_idx(find(data_dir, "t10k-images-idx3-ubyte")).reshape(-1, h * w * c)
    y_all = read_idx(find(data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64)
    correct = 0
    for s in range(0, len(y_all), 1000):
        x = x_all[s:s + 1000].astype(np.float32) / np.float32(255.0)
        # Rows are H x W x C (NHWC); PyTorch takes NCHW.
        a = x.reshape(-1, h, w, c).transpose(0, 3, 1, 2)
        n_fc = n_conv = 0
        for layer in layers:
            if layer[0] == "c":
                a = np.maximum(conv2d_same(a, t[f"conv{n_conv}.weight"], t[f"conv{n_conv}.bias"]), 0)
                n_conv += 1
            elif layer[0] == "p":
                a = maxpool(a, layer[1])
            else:
                a = a.reshape(a.shape[0], -1) @ t[f"fc{n_fc}.weight"].T + t[f"fc{n_fc}.bias"]
                n_fc += 1
                if layer != "out":
                    a = np.maximum(a, 0)
        correct += int((a.argmax(axis=1) == y_all[s:s + 1000]).sum())
    return {"acc": correct / len(y_all), "rows": len(y_all), "model": spec}


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    cmd = sys.argv[1]
    if cmd == "tb":
        out = tb(sys.argv[2])
    elif cmd == "tensors":
        out = tensors(sys.argv[2])
    elif cmd == "forward":
        out = forward(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
