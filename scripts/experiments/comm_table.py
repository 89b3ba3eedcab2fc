#!/usr/bin/python3
"""usage: comm_table.py OUT_DIR

The table of scripts/experiments/comm_bench.sh from OUT_DIR/*/summary.json: mean / min final accuracy, time
to the target (every peer), MB sent to the target summed over the peers (each peer's bytes until
its first evaluation at or above the target), and MB sent in all.
"""
import json
import os
import sys


def fmt(v, f, scale=1.0):
    return f.format(v * scale) if isinstance(v, (int, float)) else "-"


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = argv[1]
    rows = []
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name, "summary.json")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        mb = s.get("bytes_sent_mb")
        if mb is None and isinstance(s.get("bytes_sent"), (int, float)):
            mb = s["bytes_sent"] / 1e6
        rows.append([name, s.get("partition", "-"),
                     fmt(s.get("final_test_acc_mean"), "{:.2f}", 100) + " / " +
                     fmt(s.get("final_test_acc_min"), "{:.2f}", 100),
                     fmt(s.get("time_to_target_s"), "{:.1f}"),
                     fmt(s.get("bytes_to_target_mb"), "{:.1f}"), fmt(mb, "{:.1f}"),
                     fmt(s.get("seconds"), "{:.0f}")])
    head = ["run", "partition", "mean / min acc %", "time to target s", "MB to target (swarm)",
            "MB sent in all", "run s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 2 + "---:|" * (len(head) - 2))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
