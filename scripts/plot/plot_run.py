#!/usr/bin/python3
# Plots of one gossip-launch run folder: accuracy.png (test accuracy over time per peer), loss.png
# (training loss per peer), consensus.png (consensus distance, log axis) and bytes.png (cumulative
# bytes on the wire per peer), each with the run's churn events marked on its time axis, and
# accuracy_bytes.png (test accuracy against the MB each peer had sent: the field's measure).
"""usage: plot_run.py RUN_DIR

Reads RUN_DIR/config.json, RUN_DIR/peer*/metrics.jsonl, RUN_DIR/consensus.jsonl and
RUN_DIR/events.jsonl (churn: crash, restart, join, partition, heal...) and writes the
PNGs into RUN_DIR. Times are on the run's clock (every launch of the run, --resume included): each
process of a peer (its t starts again at a restart) shifted by when it started (summary.json's
life_offsets_s; an older launcher's clock_offset_s, else the spawn time from config.json).
Needs matplotlib (Debian: python3-matplotlib, used through /usr/bin/python3).
"""
import json
import os
import sys

from run_metrics import (churn_events, lives_of, mark_churn, on_run_clock, peer_dirs,
                         read_jsonl, summary_lives)

try:
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
except ImportError as e:
    sys.exit(f"plot_run.py: {e} in {sys.executable}: sudo apt-get install python3-matplotlib "
             "(and run this with /usr/bin/python3)")


def empty_note(ax, text):
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="gray")


def save_plot(run_dir, name, ylabel, title, draw, churn=()):
    """One figure over the launch clock: draw(ax) plots it, then the churn marks, the labels, grid
    and file."""
    fig, ax = plt.subplots(figsize=(8, 5))
    draw(ax)
    if churn:
        mark_churn(ax, churn)
        ax.legend(fontsize="small", ncol=2)
    ax.set_xlabel("run time (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, name), dpi=100)
    plt.close(fig)


def legend_or_note(ax, drawn, note):
    """The per-peer legend, or the note saying why nothing was drawn."""
    if drawn:
        ax.legend(fontsize="small", ncol=2)
    else:
        empty_note(ax, note)


def plot_accuracy(ax, peers, target):
    """Test accuracy over time, per peer."""
    any_acc = False
    for i, events in peers:
        pts = [(e["t"], e["test_acc"]) for e in events
               if e.get("event") == "eval" and isinstance(e.get("test_acc"), (int, float))]
        if pts:
            any_acc = True
            ax.plot([p[0] for p in pts], [100.0 * p[1] for p in pts], marker="o", ms=3,
                    label=f"peer {i}")
    if any_acc and isinstance(target, (int, float)):
        ax.axhline(100.0 * target, color="gray", ls="--", lw=1, label=f"target {100 * target:.0f}%")
    legend_or_note(ax, any_acc, "no eval events")


def plot_loss(ax, peers):
    """Training loss over time, per peer: the `step` lines' loss (mean since the previous line),
    else the epochs' mean loss of the eval lines."""
    any_loss = False
    for i, events in peers:
        pts = [(e["t"], e["loss"]) for e in events
               if e.get("event") == "step" and isinstance(e.get("loss"), (int, float))]
        if not pts:
            pts = [(e["t"], e["train_loss"]) for e in events
                   if e.get("event") == "eval" and isinstance(e.get("train_loss"), (int, float))]
        if pts:
            any_loss = True
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=f"peer {i}")
    if any_loss:
        ax.set_yscale("log")
    legend_or_note(ax, any_loss, "no step or eval lines with a loss")


def plot_consensus(ax, run_dir):
    """Consensus distance over time, on a log axis: it falls by orders of magnitude."""
    pts = [(c["t"], c["distance"]) for c in read_jsonl(os.path.join(run_dir, "consensus.jsonl"))
           if isinstance(c.get("t"), (int, float)) and isinstance(c.get("distance"), (int, float))]
    positive = [p for p in pts if p[1] > 0]
    if positive:
        ax.semilogy([p[0] for p in positive], [p[1] for p in positive], marker="o", ms=3)
    elif pts:
        empty_note(ax, "every consensus sample is 0 (the peers hold identical weights)")
    else:
        empty_note(ax, "no consensus samples (fewer than two peers with checkpoints)")


def plot_bytes(ax, peers, starts):
    """Cumulative bytes of the exchanges over time, per peer (from 0 at its first start)."""
    any_bytes = False
    for i, events in peers:
        xs, ys, total = [starts.get(i, 0.0)], [0.0], 0.0
        for e in events:
            if e.get("event") != "exchange":
                continue
            b = e.get("bytes_sent", e.get("bytes"))  # this peer's share; summed over peers = wire
            if isinstance(b, (int, float)):
                total += b
                xs.append(e["t"])
                ys.append(total / 1e6)
        if len(xs) > 1:
            any_bytes = True
            ax.step(xs, ys, where="post", label=f"peer {i}")
    legend_or_note(ax, any_bytes, "no exchanges (local/central mode, or gossip off)")


def run_title(config, dirs):
    """mode / partition / N peers, leaving out what the config does not say (never "?")."""
    parts = [str(config[k]) for k in ("mode", "partition") if config.get(k)]
    n = config.get("peers", len(dirs))
    parts.append(f"{n} peer" + ("" if n == 1 else "s"))
    return " / ".join(parts)


def sent_bytes(e):
    """The bytes one metrics line says this peer sent: an exchange's share (bytes_sent, else both
    directions), a FedAvg server's round, a FedAvg client's update; None for other lines. The same
    fields gossip-launch's summary adds up."""
    ev = e.get("event")
    if ev == "exchange":
        b = e.get("bytes_sent", e.get("bytes"))
    elif ev == "round":
        b = e.get("bytes_sent")
    elif ev == "update":
        b = e.get("bytes")
    else:
        return None
    return b if isinstance(b, (int, float)) else None


def plot_accuracy_bytes(ax, peers, target):
    """Test accuracy against the MB the peer had sent when it evaluated, per peer."""
    any_acc = False
    for i, events in peers:
        total, pts = 0.0, []
        for e in events:
            b = sent_bytes(e)
            if b is not None:
                total += b
            elif e.get("event") == "eval" and isinstance(e.get("test_acc"), (int, float)):
                pts.append((total / 1e6, 100.0 * e["test_acc"]))
        if pts:
            any_acc = True
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=f"peer {i}")
    if any_acc and isinstance(target, (int, float)):
        ax.axhline(100.0 * target, color="gray", ls="--", lw=1, label=f"target {100 * target:.0f}%")
    legend_or_note(ax, any_acc, "no eval events")
    ax.set_xlabel("MB sent by the peer")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    run_dir = argv[1]
    if not os.path.isdir(run_dir):
        print(f"plot_run.py: {run_dir} is not a folder", file=sys.stderr)
        return 2
    config = {}
    # report.json (gossip-launch --report): peers' metrics files from anywhere, on one clock.
    name = "report.json" if os.path.exists(os.path.join(run_dir, "report.json")) else "config.json"
    try:
        with open(os.path.join(run_dir, name), encoding="utf-8") as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        config = {}
        print(f"plot_run.py: no usable {name} ({e}); peers' own clocks are used", file=sys.stderr)
    # Each process's start on the run's clock: report.json's peer_list has them (by report index);
    # for a launch, its summary.json (from the peers' clock lines), else config.json's spawn times.
    lives = {p.get("peer"): lives_of(p) for p in config.get("peer_list", []) if lives_of(p)}
    if name == "config.json":
        lives.update(summary_lives(run_dir))
    title = config.get("title") or run_title(config, peer_dirs(run_dir))

    listed = [p for p in config.get("peer_list", []) if isinstance(p.get("metrics"), str)]
    if listed:
        peers = [(p.get("peer"), read_jsonl(p["metrics"])) for p in listed]
    else:
        peers = [(i, read_jsonl(os.path.join(d, "metrics.jsonl"))) for i, d in peer_dirs(run_dir)]
    peers = [(i, on_run_clock(rows, lives.get(i) or [0.0])) for i, rows in peers]
    starts = {i: (lives.get(i) or [0.0])[0] for i, _ in peers}

    events_file = config.get("events") if isinstance(config.get("events"), str) else "events.jsonl"
    churn = churn_events(read_jsonl(os.path.join(run_dir, os.path.basename(events_file))))
    target = config.get("target_acc")
    save_plot(run_dir, "accuracy.png", "test accuracy (%)", "test accuracy: " + title,
              lambda ax: plot_accuracy(ax, peers, target), churn)
    save_plot(run_dir, "loss.png", "training loss (log)", "training loss: " + title,
              lambda ax: plot_loss(ax, peers), churn)
    save_plot(run_dir, "consensus.png", "mean ||x_i - avg|| (log)", "consensus distance: " + title,
              lambda ax: plot_consensus(ax, run_dir), churn)
    save_plot(run_dir, "bytes.png", "cumulative MB sent",
              "bytes on the wire, sent by each peer: " + title,
              lambda ax: plot_bytes(ax, peers, starts), churn)
    fig, ax = plt.subplots(figsize=(8, 5))
    plot_accuracy_bytes(ax, peers, target)
    ax.set_title("accuracy against MB sent: " + title)
    fig.tight_layout()
    fig.savefig(os.path.join(run_dir, "accuracy_bytes.png"), dpi=100)
    plt.close(fig)
    print(f"plot_run.py: wrote accuracy.png, loss.png, consensus.png, bytes.png, accuracy_bytes.png "
          f"in {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
