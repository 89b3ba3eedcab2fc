"""Reading a gossip-launch run folder's per-peer metrics, shared by the plot scripts beside this one
(installed with them) and by the analysis, experiment and container scripts of scripts/.

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


# More churn events than this on one axis (a random model's dozens of crashes and restarts) are
# drawn as a strip of ticks along the top with a count per kind in the legend: a labelled line
# each would cover the curves.
MAX_CHURN_LINES = 12


def mark_churn(ax, churn):
    """Dashed vertical lines at the churn events, labelled at the top of the axis; past
    MAX_CHURN_LINES events, ticks in a strip along the top and a count per kind in the legend
    (partitions and heals, which are few and concern every peer, keep their lines)."""
    dense = len(churn) > MAX_CHURN_LINES
    seen = set()
    for t, kind, label in churn:
        if dense and kind not in ("partition", "heal"):
            continue
        colour = CHURN_COLOURS.get(kind, "black")
        ax.axvline(t, color=colour, ls=":", lw=1, alpha=0.8,
                   label=None if kind in seen else f"churn: {kind}")
        seen.add(kind)
        ax.text(t, 1.0, " " + label, transform=ax.get_xaxis_transform(), rotation=90, va="top",
                ha="left", fontsize=6, color=colour)
    if not dense:
        return
    by_kind = {}
    for t, kind, _ in churn:
        if kind not in ("partition", "heal"):
            by_kind.setdefault(kind, []).append(t)
    # One row of ticks per kind, stacked down from the top of the axis.
    for row, (kind, ts) in enumerate(sorted(by_kind.items())):
        top = 1.0 - 0.035 * row
        ax.vlines(ts, top - 0.03, top, transform=ax.get_xaxis_transform(), lw=1,
                  color=CHURN_COLOURS.get(kind, "black"),
                  label=f"churn: {kind} x{len(ts)} (ticks at the top)")


def on_run_clock(rows, lives):
    """A peer's lines with t on the run's clock: each of its processes (a smaller t starts the
    next, as gossip-launch counts them) shifted by its own start, lives[k]; a process past the
    list's end by the last start."""
    out, k, last = [], -1, None
    for r in rows:
        t = r.get("t")
        if not isinstance(t, (int, float)):
            continue
        if last is None or t < last:
            k += 1
        last = t
        out.append(dict(r, t=t + lives[min(k, len(lives) - 1)]))
    return out


def lives_of(peer):
    """The run time of each process's t = 0 from a peer's entry in summary.json (or in
    report.json's peer_list): life_offsets_s, else the one clock_offset_s or start_offset_s of an
    older launcher; None when it says none."""
    lives = peer.get("life_offsets_s")
    if isinstance(lives, list) and lives and all(isinstance(x, (int, float)) for x in lives):
        return list(lives)
    for k in ("clock_offset_s", "start_offset_s"):
        if isinstance(peer.get(k), (int, float)):
            return [peer[k]]
    return None


def summary_lives(run_dir):
    """{peer index: lives_of(its entry)} from RUN_DIR/summary.json ({} without one)."""
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
            peers = json.load(f).get("peers", [])
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for p in peers if isinstance(peers, list) else []:
        if isinstance(p, dict) and lives_of(p) is not None:
            out[p.get("peer")] = lives_of(p)
    return out
