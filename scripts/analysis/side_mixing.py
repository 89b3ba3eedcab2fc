#!/usr/bin/env python3
"""How the peers of a gossip-launch run mixed with each other at the end of training.

    scripts/analysis/side_mixing.py RUN_DIR [--from PROGRESS] [--training-only] [--list]

From each peer's metrics.jsonl, on the launcher's clock (summary.json's clock_offset_s): the time
the swarm's mean progress (steps over steps_total, from the step lines) reached PROGRESS (default
0.75: the last quarter of training), then for every pair of peers the ok exchanges from then to
the end of the run (lingers included), as the lower-indexed peer recorded them: how many, the
smallest and the mean clip, the mean ||r - s||. Pairs on the same side of the run's first
partition (events.jsonl; all peers are one side without one) whose smallest clip is under 0.5 are
listed as "clipped". --training-only: only the exchanges while one of the pair still trained (up to
the later of the two last steps), leaving out the linger, where peers at distance ~0 are clipped
harmlessly. Then each peer's summed effective weight (w * clip) over those exchanges, and
the consensus distance at the end (consensus.jsonl's final sample). --list: every such exchange of
a same-side pair under 0.5, with both peers' progress at it (from their step lines, which come
every 50 steps) and how many had a progress gap of 0.04 or more. Exit 0; 2 on a bad argument.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
from run_metrics import peer_ids, peer_metrics, read_jsonl  # noqa: E402


def progress_points(peers, offsets):
    """Each peer's (launcher time, step / steps_total) from its step lines, in its order."""
    return {i: [(offsets[i] + r["t"], r["step"] / r["steps_total"]) for r in rows
                if r.get("event") == "step" and r.get("steps_total")]
            for i, rows in peers.items()}


def progress_time(steps, frac):
    """Launcher time at which the mean over peers of their progress (progress_points) first
    reached frac."""
    points = sorted((t, i, p) for i, pts in steps.items() for t, p in pts)
    cur = {i: 0.0 for i in steps}
    for t, i, p in points:
        cur[i] = p
        if sum(cur.values()) / len(cur) >= frac:
            return t
    return None


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    run = argv[1]
    frac = 0.75
    if "--from" in argv:
        try:
            frac = float(argv[argv.index("--from") + 1])
        except (IndexError, ValueError):
            print("--from needs a number in [0, 1]", file=sys.stderr)
            return 2
    training_only = "--training-only" in argv
    try:
        with open(os.path.join(run, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"{run}: no readable summary.json ({e})", file=sys.stderr)
        return 2
    offsets = {k: p.get("clock_offset_s") or 0.0 for k, p in enumerate(summary["peers"])}
    peers = peer_metrics(run)
    ids = peer_ids(peers)
    ev = read_jsonl(os.path.join(run, "events.jsonl"))
    part = [e for e in ev if e.get("event") == "churn" and e.get("kind") == "partition"]
    heal = [e for e in ev if e.get("event") == "churn" and e.get("kind") == "heal"]
    side = {p: k for k, g in enumerate(part[0]["groups"]) for p in g} if part else {}
    steps = progress_points(peers, offsets)
    t0 = progress_time(steps, frac)
    if t0 is None:
        print(f"{run}: the swarm never reached progress {frac}", file=sys.stderr)
        return 2
    ends = {i: offsets[i] + max((r["t"] for r in rows), default=0) for i, rows in peers.items()}
    if part:
        print(f"partition at {part[0]['t']:.1f} s, heal at "
              f"{heal[0]['t'] if heal else float('nan'):.1f} s, sides {part[0]['groups']}")
    finish = {}
    for i, rows in peers.items():
        for r in rows:
            if r.get("event") == "step" and r.get("step") == r.get("steps_total"):
                finish[i] = offsets[i] + r["t"]
    print(f"mean progress {frac} at {t0:.1f} s; last steps at "
          + ", ".join(f"{i}:{finish.get(i, float('nan')):.1f}" for i in sorted(peers))
          + "; ends " + ", ".join(f"{i}:{ends[i]:.1f}" for i in sorted(peers)))
    pairs, weight = {}, {i: 0.0 for i in peers}
    for i, rows in peers.items():
        for r in rows:
            if r.get("event") != "exchange" or not r.get("ok") or offsets[i] + r["t"] < t0:
                continue
            j = ids.get(r.get("partner"), -1)
            weight[i] += r.get("w_eff", 0.0)
            if j < 0 or j < i:
                continue
            if training_only and offsets[i] + r["t"] > max(finish.get(i, 0), finish.get(j, 0)):
                continue
            pairs.setdefault((i, j), []).append(r)
    if "--list" in argv:
        def prog(i, t):
            return max((p for ts, p in steps[i] if ts <= t), default=0.0)

        gapped = level = 0
        for (i, j), rs in sorted(pairs.items()):
            if side.get(i, 0) != side.get(j, 0):
                continue
            for r in rs:
                if r.get("clip", 1.0) >= 0.5:
                    continue
                t = offsets[i] + r["t"]
                pi, pj = prog(i, t), prog(j, t)
                if abs(pi - pj) >= 0.04:
                    gapped += 1
                else:
                    level += 1
                print(f"  {i}-{j} t {t:.2f} clip {r['clip']:.3g} ||r - s|| {r.get('diff_norm', float('nan')):.4g} "
                      f"tau {r.get('tau', float('nan')):.4g} progress {pi:.3f}/{pj:.3f}")
        print(f"same-side exchanges under 0.5: {gapped} with a progress gap >= 0.04, {level} level")
    clipped = []
    print("pair    side  ok  min_clip mean_clip mean_dist")
    for (i, j), rs in sorted(pairs.items()):
        clips = [r.get("clip", 1.0) for r in rs]
        dists = [r["diff_norm"] for r in rs if isinstance(r.get("diff_norm"), (int, float))]
        same = side.get(i, 0) == side.get(j, 0)
        print(f"{i}-{j}   {'same' if same else 'other'} {len(rs):4d} {min(clips):9.3g} "
              f"{sum(clips) / len(clips):9.3g} {sum(dists) / len(dists) if dists else float('nan'):9.3g}")
        if same and min(clips) < 0.5:
            clipped.append(f"{i}-{j}")
    print("effective weight (sum of w * clip) per peer: "
          + ", ".join(f"{i}:{weight[i]:.1f}" for i in sorted(weight)))
    cons = read_jsonl(os.path.join(run, "consensus.jsonl"))
    final = [c for c in cons if c.get("final")]
    last = final[-1] if final else (cons[-1] if cons else None)
    print(f"same-side pairs clipped under 0.5 after progress {frac}"
          f"{' (training only)' if training_only else ''}: "
          f"{', '.join(clipped) if clipped else 'none'}")
    if last:
        print(f"consensus distance at the end: {last['distance']:.4g} (per peer "
              + ", ".join(f"{d:.3g}" for d in last.get("per_peer", [])) + ")")
    print(f"final accuracy: mean {summary.get('final_test_acc_mean')}, "
          f"min {summary.get('final_test_acc_min')}, max {summary.get('final_test_acc_max')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
