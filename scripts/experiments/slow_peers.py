#!/usr/bin/env python3
"""Slows some peers of a gossip-launch run to about half speed for real, as the keeping-pace test
does: each is stopped (SIGSTOP) `stop_ms` of every `stop_ms + run_ms` (SIGCONT) until it exits.

  scripts/experiments/slow_peers.py RUN_DIR 0,4 [--stop-ms 50 --run-ms 50]

Run it beside `gossip-launch --out RUN_DIR ...`; it waits for RUN_DIR/config.json (the peers'
pids) and ends when those peers have exited. A peer restarted by --churn is not followed."""
import argparse, json, os, signal, sys, time


def alive(pid):
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("peers")
    ap.add_argument("--stop-ms", type=float, default=50)
    ap.add_argument("--run-ms", type=float, default=50)
    a = ap.parse_args()
    which = [int(x) for x in a.peers.split(",")]
    cfg_path = os.path.join(a.run_dir, "config.json")
    for _ in range(1200):
        if os.path.exists(cfg_path):
            try:
                cfg = json.load(open(cfg_path))
                break
            except ValueError:
                pass
        time.sleep(0.1)
    else:
        sys.exit(f"no {cfg_path} after 120 s")
    pids = [p["pid"] for p in cfg["peer_list"] if p["peer"] in which]
    print(f"slowing peers {which} (pids {pids}): stopped {a.stop_ms} ms of every "
          f"{a.stop_ms + a.run_ms} ms", flush=True)
    try:
        while True:
            pids = [p for p in pids if alive(p)]
            if not pids:
                break
            for p in pids:
                try:
                    os.kill(p, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            time.sleep(a.stop_ms / 1000)
            for p in pids:
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            time.sleep(a.run_ms / 1000)
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    main()
