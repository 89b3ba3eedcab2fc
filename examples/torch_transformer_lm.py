#!/usr/bin/env python3
"""A small transformer language model in PyTorch, as one gossiptrain peer of several.

The text is generated: sequences of a fixed random bigram language (each token's successor drawn
from its own 4-token distribution, the same for every peer), so the best possible loss is known
(the language's entropy) and no data set is needed. Each peer draws its own sequences.

    python torch_transformer_lm.py --listen 127.0.0.1:7000 &
    python torch_transformer_lm.py --seeds 127.0.0.1:7000 &

The model's parameters are one float32 vector (gossiptrain.torch.flatten_parameters), which the
peer averages in place between optimizer steps. Prints one JSON line at the end.
"""
import argparse
import json
import math
import time

import torch
from torch import nn

import gossiptrain
import gossiptrain.torch

VOCAB, CONTEXT = 32, 32


def language(seed=0):
    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(VOCAB, generator=g)[:4] for _ in range(VOCAB)])
    prob = torch.softmax(torch.randn(VOCAB, 4, generator=g), 1)
    entropy = float(-(prob * prob.log()).sum(1).mean())
    return succ, prob, entropy


def sample(succ, prob, batch, g):
    x = torch.empty(batch, CONTEXT + 1, dtype=torch.long)
    x[:, 0] = torch.randint(0, VOCAB, (batch,), generator=g)
    for t in range(CONTEXT):
        pick = torch.multinomial(prob[x[:, t]], 1, generator=g).squeeze(1)
        x[:, t + 1] = succ[x[:, t], pick]
    return x[:, :-1], x[:, 1:]


class TinyLM(nn.Module):
    def __init__(self, d=64, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.zeros(CONTEXT, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers)
        self.out = nn.Linear(d, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT))

    def forward(self, x):
        return self.out(self.body(self.tok(x) + self.pos, mask=self.mask, is_causal=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1, help="this peer's sample seed")
    ap.add_argument("--init-seed", type=int, default=0,
                    help="the initial model's seed: the same in every peer of a swarm (robust "
                         "mixing refuses a partner's vector far from its own, as two models "
                         "initialized apart are)")
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--seeds", default="")
    ap.add_argument("--min-peers", type=int, default=1)
    ap.add_argument("--linger", type=float, default=3.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.init_seed)
    succ, prob, entropy = language()
    model = TinyLM()
    flat = gossiptrain.torch.flatten_parameters(model)  # before the optimizer makes its state
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    opts = dict(listen=a.listen, min_peers=a.min_peers, log_level="warn")
    if a.seeds:
        opts["seeds"] = a.seeds
    g = torch.Generator().manual_seed(1000 + a.seed)
    with gossiptrain.Peer(flat, **opts) as peer:
        print(json.dumps({"address": peer.address, "params": flat.numel()}), flush=True)
        peer.join()
        t0, losses = time.monotonic(), []
        for step in range(a.steps):
            x, y = sample(succ, prob, a.batch, g)
            loss = nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            for group in opt.param_groups:
                group["lr"] = a.lr * 0.5 * (1 + math.cos(math.pi * step / a.steps))
            opt.step()
            peer.step()  # mixes into flat, which every parameter is a view of
            losses.append(loss.item())
        end = time.monotonic() + a.linger
        while time.monotonic() < end:
            peer.step()
            time.sleep(0.01)
        with torch.no_grad():
            x, y = sample(succ, prob, 256, torch.Generator().manual_seed(7))
            final = float(nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)))
        print(json.dumps({"final_loss": final, "entropy": entropy, "first_loss": losses[0],
                          "seconds": time.monotonic() - t0, "exchanges": peer.stats()}),
              flush=True)


if __name__ == "__main__":
    main()
