#!/usr/bin/env python3
"""What each peer's exchanges did while a gossip-launch --netns partition held.

    scripts/analysis/partition_exchanges.py RUN_DIR [--all]

For a run whose scenario has one partition and its heal (events.jsonl), prints every exchange
(from each peer's metrics.jsonl, on the run's clock: each process by its start in summary.json)
that overlapped the partition, unless --all only the failed ones and those longer than 100 ms,
with its partner, whether that partner was on the same side, its outcome and its duration; then
per side the successful exchanges within the side that began 0.5 s or more after the partition
(its drop rules are in place by then) and ended before the heal.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
from run_metrics import on_run_clock, peer_ids, peer_metrics, read_jsonl, summary_lives  # noqa: E402


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    run, show_all = argv[1], "--all" in argv[2:]
    ev = read_jsonl(os.path.join(run, "events.jsonl"))
    part = [e for e in ev if e.get("event") == "churn" and e.get("kind") == "partition"]
    heal = [e for e in ev if e.get("event") == "churn" and e.get("kind") == "heal"]
    if not part or not heal:
        print(f"{run}: no partition and heal in events.jsonl", file=sys.stderr)
        return 2
    tp, th = part[0]["t"], heal[0]["t"]
    side = {p: k for k, g in enumerate(part[0]["groups"]) for p in g}
    lives = summary_lives(run)
    peers = {i: on_run_clock(rows, lives.get(i) or [0.0]) for i, rows in peer_metrics(run).items()}
    ids = peer_ids(peers)
    print(f"partition at {tp:.3f} s, heal at {th:.3f} s (launcher clock), sides {part[0]['groups']}")
    within = {}
    for i, rows in sorted(peers.items()):
        print(f"peer {i}:")
        for r in rows:
            if r.get("event") != "exchange":
                continue
            end = r["t"]
            start = end - r.get("ms", 0) / 1000
            other = ids.get(r.get("partner"), -1)
            same = side.get(i, -1) == side.get(other, -2)
            if r.get("ok") and same and start > tp + 0.5 and end < th:
                within[side.get(i)] = within.get(side.get(i), 0) + 1
            if end < tp or start > th:
                continue
            if not show_all and r.get("ok") and r.get("ms", 0) <= 100:
                continue
            print(f"  {start:8.3f} - {end:8.3f} s {r.get('ms', 0):7.0f} ms {r.get('role', '?'):9} "
                  f"partner {other} ({'same side' if same else 'other side'}) "
                  f"{'ok' if r.get('ok') else 'failed: ' + r.get('reason', '')}")
    for k, g in enumerate(part[0]["groups"]):
        print(f"side {g}: {within.get(k, 0)} successful exchange events within the side that "
              f"began 0.5 s or more after the partition and ended before its heal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
