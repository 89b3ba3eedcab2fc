#!/usr/bin/env python3
"""PyTorch eager reference for `gossip-bench train`: the same MLP step (Linear-ReLU-Linear-ReLU-
Linear, cross-entropy, SGD momentum 0.9) on the GPU, timed the same way; prints one JSON object.
Modes: --precision fp32 (plain fp32 products), tf32 (allow_tf32), bf16 (autocast to bfloat16,
fp32 master weights); --no-upload keeps the batch on the GPU; --no-loss-read skips loss.item()."""
import argparse
import json
import statistics
import sys
import time


def parse_dims(spec):
    if not spec.startswith("mlp:"):
        raise ValueError(f"model must look like mlp:784-256-256-10, got {spec!r}")
    dims = [int(d) for d in spec[4:].split("-")]
    if len(dims) < 2 or min(dims) < 1:
        raise ValueError(f"bad layer sizes in {spec!r}")
    return dims


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="mlp:784-256-256-10")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=100, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds; the median is reported")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-upload", action="store_true",
                   help="keep the batch on the GPU (gossip-bench uploads it every step)")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                   help="fp32: plain fp32 products; tf32: TF32 tensor cores; bf16: autocast")
    p.add_argument("--no-loss-read", action="store_true",
                   help="do not read the loss back each step (gossip-bench does)")
    args = p.parse_args()
    try:
        dims = parse_dims(args.model)
    except ValueError as e:
        print(f"bench_torch_mlp: {e}", file=sys.stderr)
        return 2
    if args.batch < 1 or args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        print("bench_torch_mlp: --batch, --steps, --rounds must be >= 1", file=sys.stderr)
        return 2

    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print(f"bench_torch_mlp: PyTorch is not installed ({e})", file=sys.stderr)
        return 1

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("bench_torch_mlp: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    dev = torch.device(args.device)
    # fp32: plain fp32 products, as the CUDA backend's default (no TF32).
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(1)

    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    x_host = torch.rand(args.batch, dims[0])
    y_host = torch.randint(0, dims[-1], (args.batch,))
    x_dev, y_dev = x_host.to(dev), y_host.to(dev)

    def step():
        if args.no_upload:
            x, y = x_dev, y_dev
        else:
            x, y = x_host.to(dev), y_host.to(dev)
        opt.zero_grad(set_to_none=True)
        if args.precision == "bf16":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if not args.no_loss_read:
            loss.item()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(args.warmup):
        step()
    sync()
    ms = []
    for _ in range(args.rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        sync()
        ms.append((time.perf_counter() - t0) * 1000.0 / args.steps)
    ms_per_step = statistics.median(ms)
    print(json.dumps({
        "subject": "torch_mlp",
        "framework": f"pytorch {torch.__version__}",
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "model": args.model,
        "params": sum(t.numel() for t in model.parameters()),
        "batch": args.batch,
        "steps_per_round": args.steps,
        "rounds": args.rounds,
        "precision": args.precision,
        "upload_each_step": not args.no_upload,
        "loss_read_each_step": not args.no_loss_read,
        "ms_per_step": ms_per_step,
        "samples_per_s": args.batch / (ms_per_step / 1000.0),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
