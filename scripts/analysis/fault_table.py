#!/usr/bin/python3
"""One row per run for the README's "One bad peer" table.

  scripts/analysis/fault_table.py [--bad I ...] RUN_DIR ...

Honest = every peer not named by --bad (default: 7). Prints the honest peers' mean and min final
accuracy, the bad peers' accuracy, exchanges ok/failed, the honest peers' successful exchanges
with a bad peer, anomalous refusals, bans (and how many of them were of honest peers) and the
clipped exchange sides, all read from summary.json and the peers' metrics.jsonl. "of honest
peers" counts the bans an honest peer made of another honest peer (false bans); a diverging bad
peer (--lr 8) runs the honest code and bans the others too, which is counted in the total only.
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
from run_metrics import peer_ids, peer_metrics  # noqa: E402


def row(run, bad):
    s = json.load(open(os.path.join(run, "summary.json")))
    metrics = peer_metrics(run)
    ids = peer_ids(metrics)
    acc = {p["peer"]: p["final_test_acc"] for p in s["peers"]}
    honest = [a for i, a in acc.items() if i not in bad and a is not None]
    bad_acc = [acc.get(i) for i in bad]
    mixed_bad = anomalous = bans = bans_honest = clipped = 0
    for i, rs in metrics.items():
        for r in rs:
            if r["event"] == "exchange":
                if r["ok"] and i not in bad and ids.get(r["partner"]) in bad:
                    mixed_bad += 1
                if r.get("reason") == "anomalous":
                    anomalous += 1
                if r["ok"] and r.get("clip", 1) < 1:
                    clipped += 1
            elif r["event"] == "ban":
                bans += 1
                if i not in bad and ids.get(r["partner"]) not in bad:
                    bans_honest += 1  # an honest peer banned an honest one: a false ban
    fmt = lambda x: "-" if x is None else f"{100 * x:.2f}%"
    hm = sum(honest) / len(honest) if honest else None
    return (f"| {os.path.basename(run.rstrip('/'))} | {fmt(hm)} | {fmt(min(honest) if honest else None)} | "
            f"{', '.join(fmt(a) for a in bad_acc)} | {s['exchanges_ok']}/{s['exchanges_failed']} | "
            f"{mixed_bad} | {anomalous} | {bans} ({bans_honest}) | {clipped} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bad", type=int, nargs="*", default=[7])
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    print("| run | honest mean acc | honest min | bad peer acc | exch ok/failed | sides mixed with "
          "a bad peer | anomalous refusals | bans (of honest peers) | clipped sides |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in a.runs:
        try:
            print(row(r, set(a.bad)))
        except (OSError, ValueError, KeyError) as e:
            print(f"{r}: cannot read ({e})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
