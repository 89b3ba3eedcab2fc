#!/usr/bin/env python3
"""Softmax regression on Fashion-MNIST in pure NumPy, as one gossiptrain peer of several.

    # four peers on one machine, each training on a quarter of the data:
    python fashion_mnist_numpy.py --shard 0 --num-shards 4 --listen 127.0.0.1:7000 &
    python fashion_mnist_numpy.py --shard 1 --num-shards 4 --seeds 127.0.0.1:7000 &
    ...
    # the same model on all the data, alone (the reference):
    python fashion_mnist_numpy.py --alone

With --metrics RUN/peerI/metrics.jsonl for each peer, `gossip-launch --report RUN` makes them one
run: summary.json, table.txt and the plots, as for gossip-peer processes.

The model's parameters live in one float32 vector `params`; W and b are views of it, so the
training step and the peer's averaging change the same memory. A peer started again after a crash
(--catch-up auto) takes a live member's vector and step count and trains on from there.
Prints one JSON line at the end: final test accuracy, steps, exchanges, catch-up.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy

DATA = "/usr/share/datasets/fashion-mnist"


def load_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return numpy.frombuffer(raw, numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data, shard, num_shards, seed):
    x = load_idx(os.path.join(data, "train-images-idx3-ubyte.gz")).reshape(60000, 784)
    y = load_idx(os.path.join(data, "train-labels-idx1-ubyte.gz")).astype(numpy.int64)
    order = numpy.random.default_rng(seed).permutation(len(y))[shard::num_shards]  # iid shards
    xt = load_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz")).reshape(10000, 784)
    yt = load_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz")).astype(numpy.int64)
    scale = numpy.float32(1 / 255)
    return x[order].astype(numpy.float32) * scale, y[order], xt.astype(numpy.float32) * scale, yt


def evaluate(W, b, x, y):
    """Test accuracy and mean cross-entropy."""
    logits = x @ W + b
    logits -= logits.max(1, keepdims=True)
    log_p = logits - numpy.log(numpy.exp(logits).sum(1, keepdims=True))
    return float((logits.argmax(1) == y).mean()), float(-log_p[numpy.arange(len(y)), y].mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--num-shards", type=int, default=1)
    ap.add_argument("--alone", action="store_true", help="no peer: train on all the data alone")
    ap.add_argument("--epochs", type=int, default=4, help="passes over the whole data set")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--seeds", default="")
    ap.add_argument("--catch-up", default="off")
    ap.add_argument("--metrics")
    ap.add_argument("--min-peers", type=int, default=1)
    ap.add_argument("--linger", type=float, default=3.0,
                    help="seconds to keep averaging after the last step, for slower peers")
    # gossip-peer's other flags, as `gossip-launch --peer-bin examples/fashion_mnist_numpy.py`
    # passes them (network_key, identity, checkpoint_dir, ...): for the Peer (docs/python.md).
    a, extra = ap.parse_known_args()
    peer_flags = {}
    if extra:
        import gossiptrain
        peer_flags, unknown = gossiptrain.split_peer_args(extra)
        if unknown:
            ap.error("unknown flags: %s" % ", ".join("--" + k.replace("_", "-") for k in unknown))
    if a.alone:
        a.shard, a.num_shards = 0, 1
    x, y, xt, yt = load(a.data, a.shard, a.num_shards, a.seed)

    n_in, n_out = 784, 10
    params = numpy.zeros(n_in * n_out + n_out, numpy.float32)  # the one vector the peer averages
    W = params[:n_in * n_out].reshape(n_in, n_out)  # views: no copy
    b = params[n_in * n_out:]
    # An epoch is a pass over this peer's shard: the swarm together sees the whole data set once
    # per epoch, as the peer alone does.
    steps_per_epoch = len(y) // a.batch
    total = a.epochs * steps_per_epoch

    peer = None
    if not a.alone:
        import gossiptrain
        opts = dict(peer_flags, listen=a.listen, catch_up=a.catch_up, min_peers=a.min_peers,
                    log_level="warn", shard=a.shard, num_shards=a.num_shards)
        if a.seeds:
            opts["seeds"] = a.seeds
        if a.metrics:
            os.makedirs(os.path.dirname(a.metrics) or ".", exist_ok=True)
            opts["metrics"] = a.metrics
        peer = gossiptrain.Peer(params, **opts)
        print(json.dumps({"address": peer.address}), flush=True)
        caught_up = peer.join()  # --min-peers; with --catch-up auto, a live member's vector
        print(json.dumps({"joined": peer.members, "caught_up": caught_up}), flush=True)
    start = peer.steps if peer else 0  # after a catch-up: the member's step count
    rng = numpy.random.default_rng(a.seed * 1000 + a.shard + 7919 * start)
    t0 = time.monotonic()
    for step in range(start, total):
        i = rng.integers(0, len(y), a.batch)
        logits = x[i] @ W + b
        logits -= logits.max(1, keepdims=True)
        p = numpy.exp(logits)
        p /= p.sum(1, keepdims=True)
        p[numpy.arange(a.batch), y[i]] -= 1  # d loss / d logits
        lr = a.lr * 0.5 * (1 + math.cos(math.pi * step / total))  # cosine schedule
        W -= (lr / a.batch) * (x[i].T @ p)
        b -= (lr / a.batch) * p.sum(0)
        if peer:
            peer.step()
        if (step + 1) % steps_per_epoch == 0:
            acc, loss = evaluate(W, b, xt, yt)
            line = dict(epoch=(step + 1) // steps_per_epoch, step=step + 1, test_acc=acc,
                        test_loss=loss)
            print(json.dumps(line), flush=True)
            if peer:
                peer.metric("eval", **line)  # for gossip-launch --report
    out = {"final_test_acc": evaluate(W, b, xt, yt)[0], "steps": total, "start_step": start,
           "seconds": time.monotonic() - t0}
    if peer:
        end = time.monotonic() + a.linger
        while time.monotonic() < end:  # others may still be training: keep averaging with them
            peer.step()
            time.sleep(0.01)
        acc, loss = evaluate(W, b, xt, yt)
        out["final_test_acc"] = acc
        peer.metric("eval", epoch=a.epochs, step=total, test_acc=acc, test_loss=loss, final=True)
        peer.metric("done", steps=total, epochs=a.epochs, final_test_acc=acc,
                    seconds=out["seconds"])
        out.update(exchanges=peer.stats(), caught_up=peer.caught_up)
        peer.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
