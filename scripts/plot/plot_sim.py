#!/usr/bin/python3
# Plots of one gossip-sim run folder, over simulated time: consensus.png (mean squared distance to
# the average of the live peers' vectors), alive.png (peers up), bytes.png (bytes each peer sent)
# and, with churn, detection.png (how long until every peer up had marked each crash dead); for the
# train workload accuracy.png (each peer's test accuracy at its epoch ends and at its end). Churn
# events (crash, restart, join, partition, heal...) are marked on every plot over time.
"""usage: plot_sim.py RUN_DIR

Reads RUN_DIR/events.jsonl and RUN_DIR/summary.json (docs/sim.md, "gossip-sim") and
writes the PNGs into RUN_DIR. Needs matplotlib (Debian: python3-matplotlib, through
/usr/bin/python3).
"""
import json
import os
import sys

from run_metrics import churn_events, mark_churn

try:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
except ImportError as e:
    sys.exit(f"plot_sim.py: {e} in {sys.executable}: sudo apt-get install python3-matplotlib "
             "(and run this with /usr/bin/python3)")


def read_events(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot_sim.py: {path}:{n}: not JSON ({e})")
    return out


def save(fig, ax, run, name, title, xlabel, ylabel, churn=()):
    if churn:
        mark_churn(ax, churn)
        ax.legend(fontsize=7)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(run, name), dpi=110)
    plt.close(fig)


def consensus(run, events, peers, churn=()):
    samples = [e for e in events if e.get("event") == "sample" and e.get("msd") is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    pts = [(e["t"], e["msd"]) for e in samples if e["msd"] > 0]
    if pts:
        ax.semilogy([t for t, _ in pts], [m for _, m in pts], lw=1)
    else:
        ax.text(0.5, 0.5, "no positive msd sample", transform=ax.transAxes, ha="center")
    save(fig, ax, run, "consensus.png", f"Consensus distance, {peers} peers", "simulated s",
         "mean squared distance to the average", churn)


def alive(run, events, peers, churn=()):
    samples = [e for e in events if e.get("event") == "sample" and "live" in e]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.step([e["t"] for e in samples], [e["live"] for e in samples], where="post", lw=1.5)
    # Headroom above the swarm's size: a line at the very top is hidden by the axis frame.
    top = max([e["live"] for e in samples] + [peers if isinstance(peers, int) else 0, 1])
    ax.set_ylim(0, top * 1.08 + 0.5)
    save(fig, ax, run, "alive.png", f"Peers up, of {peers}", "simulated s", "peers up", churn)


def bytes_sent(run, summary):
    per_peer = summary.get("bytes_sent_per_peer") or []
    fig, ax = plt.subplots(figsize=(7, 4))
    if per_peer:
        ax.hist([b / 1e6 for b in per_peer], bins=min(50, max(5, len(per_peer) // 10)))
    save(fig, ax, run, "bytes.png", "Bytes sent per peer", "MB sent", "peers")


def accuracy(run, events, peers, churn=()):
    evals = [e for e in events if e.get("event") in ("eval", "done")]
    if not evals:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    by_peer = {}
    for e in evals:
        acc = e.get("test_acc", e.get("final_test_acc"))
        if acc is not None:
            by_peer.setdefault(e["peer"], []).append((e["t"], 100 * acc))
    for peer, pts in sorted(by_peer.items()):
        ax.plot([t for t, _ in pts], [a for _, a in pts], lw=1, marker=".", label=f"peer {peer}")
    if len(by_peer) <= 12:
        ax.legend(fontsize=7)
    save(fig, ax, run, "accuracy.png", f"Test accuracy, {peers} peers", "simulated s",
         "test accuracy (%)", churn)
    return True


def detection(run, summary):
    churn = summary.get("churn") or {}
    crashes = [c for c in churn.get("crashes", []) if c.get("max_detection_s") is not None]
    if not crashes:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist([c["max_detection_s"] for c in crashes], bins=min(40, max(5, len(crashes) // 5)))
    bound = churn.get("detection_bound_s")
    if bound:
        ax.axvline(bound, color="red", ls="--", label=f"bound {bound:.0f} s")
        ax.legend()
    save(fig, ax, run, "detection.png",
         f"Detection by every peer up, {len(crashes)} crashes", "seconds after the crash",
         "crashes")
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    run = sys.argv[1]
    try:
        with open(os.path.join(run, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_sim.py: {run}/summary.json: {e}")
    events = read_events(os.path.join(run, "events.jsonl"))
    peers = summary.get("peers", "?")
    churn = churn_events(events)
    consensus(run, events, peers, churn)
    alive(run, events, peers, churn)
    bytes_sent(run, summary)
    made = ["consensus.png", "alive.png", "bytes.png"]
    if detection(run, summary):
        made.append("detection.png")
    if accuracy(run, events, peers, churn):
        made.append("accuracy.png")
    print("plot_sim.py: wrote " + ", ".join(made) + " in " + run)


if __name__ == "__main__":
    main()
