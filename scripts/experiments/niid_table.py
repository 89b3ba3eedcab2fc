#!/usr/bin/python3
"""The table of scripts/experiments/niid-bench.sh: FedAvg and gossip per partition, from each run folder's
summary.json and metrics.jsonl files, and the accuracy curve (per round of E local epochs).

usage: niid_table.py OUT_DIR [--epochs-per-round E] [--plot FILE.png]
"""
import argparse
import json
import os
import sys

PUBLISHED = {"iid": 89.0, "dirichlet:0.5": 88.4, "classes:2": 81.0, "classes:3": 83.2}


def lines(path):
    try:
        with open(path) as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    pass
    except OSError:
        return


def curve(run, summary, e):
    """[(epochs per client, mean test acc, t_s)]: the FedAvg server's evals after each round
    (round r = r x E epochs), or the gossip peers' mean at each epoch all of them evaluated."""
    if summary.get("mode") == "fedavg":
        return [(j["round"] * e, j["test_acc"], j["t"])
                for j in lines(f"{run}/peer0/metrics.jsonl")
                if j.get("event") == "eval" and "round" in j]
    peers = int(summary.get("num_peers", 0))
    at = {}
    for p in range(peers):
        for j in lines(f"{run}/peer{p}/metrics.jsonl"):
            if j.get("event") == "eval" and j.get("epoch", 0) > 0 and not j.get("final"):
                at.setdefault(j["epoch"], []).append((j["test_acc"], j["t"]))
    return [(ep, sum(a for a, _ in v) / len(v), max(t for _, t in v))
            for ep, v in sorted(at.items()) if len(v) == peers]


def pct(v):
    return "-" if v is None else f"{100 * v:.2f}"


def num(v, f="{:.0f}"):
    return "-" if v is None else f.format(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--epochs-per-round", type=int, default=10)
    ap.add_argument("--plot")
    a = ap.parse_args()
    runs = []
    for name in sorted(os.listdir(a.out)):
        path = os.path.join(a.out, name, "summary.json")
        if os.path.isfile(path):
            with open(path) as f:
                runs.append((os.path.join(a.out, name), json.load(f)))
    if not runs:
        sys.exit(f"niid_table: no summary.json under {a.out}")
    e = a.epochs_per_round
    print("| partition | mode | peers | epochs per client | final acc % (mean / min) | best % | "
          "to target | time to target s | wall s | MB sent (total / per peer) | published FedAvg % |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    curves = {}
    for run, s in runs:
        part, mode = s.get("partition"), s.get("mode")
        c = curve(run, s, e)
        curves[(part, mode)] = c
        budget = f"{c[-1][0]} ({len(c)} rounds x {e})" if mode == "fedavg" and c else \
            (str(c[-1][0]) if c else "0")
        peers = s.get("num_peers")
        peers_s = f"{peers} + server" if mode == "fedavg" else str(peers)
        if mode == "fedavg":
            tt = s.get("rounds_to_target")
            tt = "-" if tt is None else f"{tt} rounds"
        else:
            tt = s.get("exchanges_to_target")
            ep = s.get("epochs_to_target")
            tt = "-" if tt is None else f"{tt} exch ({ep} ep)"
        mb = s.get("bytes_sent")
        per = None
        if mb is not None:
            clients = [p.get("bytes_sent") for p in s.get("peers", []) if p.get("role") != "server"]
            clients = [b for b in clients if b is not None]
            per = sum(clients) / len(clients) if clients else None
        print(f"| {part} | {mode} | {peers_s} | {budget} | "
              f"{pct(s.get('final_test_acc_mean'))} / {pct(s.get('final_test_acc_min'))} | "
              f"{pct(s.get('best_test_acc'))} | {tt} | {num(s.get('time_to_target_s'))} | "
              f"{num(s.get('seconds'))} | "
              f"{num(None if mb is None else mb / 1e6, '{:.0f}')} / "
              f"{num(None if per is None else per / 1e6, '{:.1f}')} | "
              f"{PUBLISHED.get(part, '-') if mode == 'fedavg' else ''} |")
    print()
    print("Curves (test accuracy % by epochs per client; FedAvg: its global model after each round"
          " of E epochs; gossip: the mean over peers after each epoch):")
    for (part, mode), c in sorted(curves.items()):
        print(f"  {part:14s} {mode:7s} " + " ".join(f"{ep}:{100 * acc:.2f}" for ep, acc, _ in c))
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        parts = sorted({p for p, _ in curves})
        fig, axes = plt.subplots(1, len(parts), figsize=(4 * len(parts), 3.2), squeeze=False)
        for ax, part in zip(axes[0], parts):
            for mode in ("fedavg", "gossip"):
                c = curves.get((part, mode))
                if c:
                    ax.plot([r for r, _, _ in c], [100 * a for _, a, _ in c],
                            "o-" if mode == "fedavg" else "-", ms=3, label=mode)
            if part in PUBLISHED:
                ax.axhline(PUBLISHED[part], ls="--", c="gray", lw=1, label="published FedAvg (50 r)")
            ax.set_title(part)
            ax.set_xlabel("epochs per client")
            ax.set_ylabel("test accuracy %")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=100)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
