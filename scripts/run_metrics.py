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
