#!/usr/bin/python3
"""Exchange rate among a run's peers, leaving some out (issue 10's slow-link figure).

  scripts/analysis/exchange_rate.py RUN_DIR [--exclude I ...]

For every peer not excluded: its successful exchanges as initiator with a partner that is not
excluded either, divided by its training time (the `seconds` of its `done` line); the figure is
the sum over those peers, in exchanges per second. Also prints, for each excluded peer, its
successful exchanges (both roles) and the median duration of its exchanges with the others, and
the share of the others' training time they spent in exchanges with excluded peers (the `ms` of
their exchange lines with them, ok or failed, over the sum of their training times).
"""
import argparse, os, statistics, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
from run_metrics import peer_ids, peer_metrics  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--exclude", type=int, nargs="*", default=[])
    a = ap.parse_args()
    peers = peer_metrics(a.run)
    if not peers:
        print(f"no peer*/metrics.jsonl under {a.run}", file=sys.stderr)
        return 2
    ids = peer_ids(peers)
    excl = set(a.exclude)
    total = 0.0
    for i, rows in sorted(peers.items()):
        if i in excl:
            continue
        done = [r for r in rows if r["event"] == "done"]
        if not done or not done[-1].get("seconds"):
            print(f"peer {i}: no done line, left out", file=sys.stderr)
            continue
        n = sum(1 for r in rows if r["event"] == "exchange" and r["ok"] and
                r["role"] == "initiator" and ids.get(r["partner"], -1) not in excl)
        total += n / done[-1]["seconds"]
        print(f"peer {i}: {n} exchanges as initiator with the others in {done[-1]['seconds']:.1f} s")
    busy = busy_init = train = 0.0
    for i, rows in peers.items():
        done = [r for r in rows if r["event"] == "done"]
        if i in excl or not done or not done[-1].get("seconds"):
            continue
        train += done[-1]["seconds"]
        with_excl = [r for r in rows if r["event"] == "exchange" and
                     ids.get(r["partner"], -1) in excl and r.get("ms") is not None]
        busy += sum(r["ms"] for r in with_excl) / 1000.0
        busy_init += sum(r["ms"] for r in with_excl if r["role"] == "initiator") / 1000.0
    if excl and train > 0:
        print(f"the others' time in exchanges (ok or failed) with excluded peers: {busy:.1f} s "
              f"of {train:.1f} s of training ({100 * busy / train:.1f}%), as initiators "
              f"{busy_init:.1f} s ({100 * busy_init / train:.1f}%)")
    for j in sorted(excl):
        ok = [r for r in peers.get(j, []) if r["event"] == "exchange" and r["ok"]]
        ms = [r["ms"] for i, rows in peers.items() if i not in excl for r in rows
              if r["event"] == "exchange" and r["ok"] and ids.get(r["partner"]) == j]
        med = f"{statistics.median(ms):.0f} ms" if ms else "-"
        print(f"excluded peer {j}: {len(ok)} successful exchanges (both roles); "
              f"the others' exchanges with it: {len(ms)}, median {med}")
    print(f"exchange rate among the others: {total:.1f} per second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
