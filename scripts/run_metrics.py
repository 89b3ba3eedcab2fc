"""Reading a gossip-launch run folder's per-peer metrics, shared by the scripts beside this one.

A peer's metrics.jsonl may end with a line cut by a kill: such lines are skipped.
"""
import json
import os
import re


def read_jsonl(path):
    """Complete JSON lines of a file; a partial or broken line (a peer killed mid-write) is skipped."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    except FileNotFoundError:
        pass
    return out


def peer_dirs(run_dir):
    """[(index, path)] of the run's peerN folders, by index."""
    found = []
    for name in os.listdir(run_dir):
        m = re.fullmatch(r"peer(\d+)", name)
        if m and os.path.isdir(os.path.join(run_dir, name)):
            found.append((int(m.group(1)), os.path.join(run_dir, name)))
    return sorted(found)


def peer_metrics(run_dir):
    """{index: metric lines} of every peer that wrote a metrics.jsonl."""
    return {i: read_jsonl(os.path.join(d, "metrics.jsonl")) for i, d in peer_dirs(run_dir)
            if os.path.exists(os.path.join(d, "metrics.jsonl"))}


def peer_ids(peers):
    """{peer id: index}, from each peer's first line that carries its id (the "data" line, written
    before the identity is loaded, says "local")."""
    ids = {}
    for i, rows in peers.items():
        for r in rows:
            if r.get("peer", "local") != "local":
                ids[r["peer"]] = i
                break
    return ids


# Churn kinds worth a mark on a time axis, and their colours.
CHURN_COLOURS = {"crash": "red", "stop": "darkred", "pause": "orange", "restart": "green",
                 "resume": "olive", "join": "blue", "partition": "purple", "heal": "teal",
                 "link": "gray", "fault": "magenta"}


def churn_events(events):
    """[(t, kind, label)] of the churn lines of an events.jsonl (gossip-launch's or gossip-sim's)."""
    out = []
    for e in events:
        if e.get("event") != "churn" or not isinstance(e.get("t"), (int, float)):
            continue
        kind = e.get("kind", "?")
        who = e.get("applied_to", e.get("peers", e.get("peer")))
        if isinstance(who, list):
            who = ",".join(str(p) for p in who) if len(who) <= 4 else f"{len(who)} peers"
        if kind in ("partition", "heal") or who in (None, ""):
            label = kind
        else:
            label = f"{kind} {who}"
        out.append((e["t"], kind, label))
    return out


def mark_churn(ax, churn):
    """Dashed vertical lines at the churn events, labelled at the top of the axis."""
    seen = set()
    for t, kind, label in churn:
        colour = CHURN_COLOURS.get(kind, "black")
        ax.axvline(t, color=colour, ls=":", lw=1, alpha=0.8,
                   label=None if kind in seen else f"churn: {kind}")
        seen.add(kind)
        ax.text(t, 1.0, " " + label, transform=ax.get_xaxis_transform(), rotation=90, va="top",
                ha="left", fontsize=6, color=colour)
