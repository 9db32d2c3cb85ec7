#!/usr/bin/env python3
"""Parameters saved by pstrain, loaded into real PyTorch as docs/models.md shows, give the test
accuracy of pstrain's own --evaluate, and the probabilities of --predict.

Trains an MLP and a CNN on synthetic IDX data with pstrain-worker (one worker, --mode allreduce:
no parameter server), then builds each model in torch from DIR/model.json and loads the .npy
files. Exits 77 (ctest's skip) where torch or numpy is not installed. The binaries: environment
PSTRAIN_WORKER_BIN, else build/pstrain-worker beside the source tree.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # Debian 12 has no torch package
    print(f"SKIP: {e}")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.environ.get("PSTRAIN_WORKER_BIN", os.path.join(ROOT, "build", "pstrain-worker"))


def write_idx(directory, split, n, seed, templates):
    """A learnable 10-class set of 8x8 images: each class a binary template plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    images = np.clip(templates[labels] * 96 + rng.integers(0, 160, (n, 8, 8)), 0, 255).astype(np.uint8)
    with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + images.tobytes())
    with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels.tobytes())
    return images, labels


def torch_model(description, params_dir):
    """The model of DIR/model.json with DIR's parameters (docs/models.md, "Loading into PyTorch")."""
    layers, p, shape = [], 0, list(description["input_shape"])
    for layer in description["layers"]:
        kind, args, options = layer["kind"], layer["args"], layer["options"]
        if kind in ("dense", "conv"):
            weight = torch.from_numpy(np.load(os.path.join(params_dir, f"layer{p}.weight.npy")))
            bias = torch.from_numpy(np.load(os.path.join(params_dir, f"layer{p}.bias.npy")))
            p += 1
        if kind == "dense":
            if len(shape) > 1:
                layers.append(torch.nn.Flatten())
                shape = [int(np.prod(shape))]
            m = torch.nn.Linear(shape[0], int(args[0]))
            m.weight.data.copy_(weight.T)  # pstrain's dense weight is [in, out]
            m.bias.data.copy_(bias)
            shape = [int(args[0])]
        elif kind == "conv":
            k, stride, pad = int(args[1]), options.get("stride", 1), options.get("pad", 0)
            m = torch.nn.Conv2d(shape[0], int(args[0]), k, stride=stride, padding=pad)
            m.weight.data.copy_(weight)  # [out, in, k, k], as PyTorch's
            m.bias.data.copy_(bias)
            shape = [int(args[0]), (shape[1] + 2 * pad - k) // stride + 1, (shape[2] + 2 * pad - k) // stride + 1]
        elif kind in ("maxpool", "avgpool"):
            k = int(args[0])
            stride = options.get("stride", k)
            m = (torch.nn.MaxPool2d if kind == "maxpool" else torch.nn.AvgPool2d)(k, stride=stride)
            shape = [shape[0], (shape[1] - k) // stride + 1, (shape[2] - k) // stride + 1]
        elif kind == "flatten":
            m = torch.nn.Flatten()
            shape = [int(np.prod(shape))]
        elif kind == "relu":
            m = torch.nn.ReLU()
        elif kind == "tanh":
            m = torch.nn.Tanh()
        elif kind == "dropout":
            m = torch.nn.Dropout(args[0])
        else:
            raise ValueError(f"unknown layer {kind}")
        layers.append(m)
    return torch.nn.Sequential(*layers).eval()


def run(args):
    result = subprocess.run([WORKER] + args, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def check(directory, name, model_flags, images, labels):
    params = os.path.join(directory, name)
    data = ["--data-dir", directory, "--cache-dir", directory]
    run(data + ["--mode", "allreduce", "--batch-size", "16", "--steps", "60", "--optimizer", "sgd", "--lr", "0.1",
                "--metrics-file", "none", "--tensorboard-dir", "none", "--save-params", params] + model_flags)
    log = run(data + ["--evaluate", "--init-params", params])
    pstrain_accuracy = float(re.search(r"test_accuracy=([0-9.]+)", log).group(1))
    predictions = os.path.join(directory, name + ".npy")
    test_set = f"{directory}/t10k-images-idx3-ubyte,{directory}/t10k-labels-idx1-ubyte"
    run(data + ["--init-params", params, "--predict", test_set, "--predictions", predictions])

    with open(os.path.join(params, "model.json")) as f:
        description = json.load(f)
    model = torch_model(description, params)
    x = torch.from_numpy(images.astype(np.float32) * np.float32(1 / 255)).reshape(-1, *description["input_shape"])
    with torch.no_grad():
        probabilities = torch.softmax(model(x), dim=1).numpy()
    correct = int((probabilities.argmax(axis=1) == labels).sum())
    torch_accuracy = round(correct / len(labels), 4)
    print(f"{name}: pstrain --evaluate {pstrain_accuracy:.4f}, torch {torch_accuracy:.4f} ({correct}/{len(labels)})")
    assert f"{torch_accuracy:.4f}" == f"{pstrain_accuracy:.4f}", (torch_accuracy, pstrain_accuracy)
    assert pstrain_accuracy > 0.3, pstrain_accuracy  # it learnt (chance: 0.1)
    np.testing.assert_allclose(np.load(predictions), probabilities, atol=1e-5)


def main():
    if not os.access(WORKER, os.X_OK):
        print(f"FAIL: no pstrain-worker at {WORKER} (set PSTRAIN_WORKER_BIN)")
        return 1
    with tempfile.TemporaryDirectory(prefix="pstrain-torch-") as directory:
        templates = np.random.default_rng(7).integers(0, 2, (10, 8, 8))
        write_idx(directory, "train", 480, 1, templates)
        images, labels = write_idx(directory, "t10k", 200, 2, templates)
        check(directory, "mlp", ["--hidden", "32,16"], images, labels)
        check(directory, "cnn", ["--model", "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 16, relu, "
                                            "dropout 0.2, dense 10"], images, labels)
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
