#!/usr/bin/python3
"""Samples the memory of a gossip-launch run's peers until none is left, and prints the peaks.

usage: scripts/analysis/peak_memory.py RUN_DIR [--every S] [--json OUT]

Every S seconds (default 1) it reads /proc/PID/smaps_rollup of every gossip-peer process whose
command line names RUN_DIR: Rss (resident, shared pages counted in every process), Pss (shared
pages divided among the processes that map them: the sum over processes is what the run takes)
and Anonymous (private heap, stacks, data). It prints, once no peer is left (or on Ctrl-C), the
peak of the sums over the peers, the peak per peer, and the peer count at each peak.
"""
import json
import os
import sys
import time


def peers_of(run_dir):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"gossip-peer") and any(run_dir.encode() in a for a in argv):
            pids.append(int(d))
    return pids


def rollup(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0] in ("Rss:", "Pss:", "Anonymous:"):
                    out[parts[0][:-1].lower()] = int(parts[1]) / 1000.0  # kB -> MB
    except OSError:
        return None
    return out if len(out) == 3 else None


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 2 if not args else 0
    run_dir = os.path.abspath(args[0]) if os.path.exists(args[0]) else args[0]
    every = float(args[args.index("--every") + 1]) if "--every" in args else 1.0
    out_json = args[args.index("--json") + 1] if "--json" in args else None
    peak = {"rss": 0.0, "pss": 0.0, "anonymous": 0.0}
    peak_n = {k: 0 for k in peak}
    per_peer = {k: 0.0 for k in peak}
    seen_any, samples, t0 = False, 0, time.time()
    try:
        while True:
            # The launcher may be handed a relative run folder: match both spellings.
            pids = set(peers_of(run_dir)) | set(peers_of(args[0]))
            if not pids and seen_any:
                break
            if not pids and time.time() - t0 > 600:
                print("no gossip-peer naming", run_dir, "appeared in 600 s", file=sys.stderr)
                return 1
            rolls = [r for r in (rollup(p) for p in pids) if r]
            if rolls:
                seen_any = True
                samples += 1
                for k in peak:
                    total = sum(r[k] for r in rolls)
                    if total > peak[k]:
                        peak[k], peak_n[k] = total, len(rolls)
                    per_peer[k] = max(per_peer[k], max(r[k] for r in rolls))
            time.sleep(every)
    except KeyboardInterrupt:
        pass
    result = {
        "run_dir": run_dir,
        "samples": samples,
        "peak_total_mb": peak,
        "peers_at_peak": peak_n,
        "peak_single_peer_mb": per_peer,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if out_json:
        with open(out_json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
