#!/usr/bin/env python3
"""Summarizes the JSON lines of scripts/device-check.sh's table stage (gossip-bench train and
scripts/experiments/bench_torch_mlp.py results) into one JSON object: per model and batch, our ms/step in each
precision and data mode, PyTorch's in each mode, step / GEMM floor, and the speedups."""
import json
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: device_table.py TABLE.jsonl", file=sys.stderr)
        return 2
    rows = {}
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        key = f'{r["model"]} batch {r["batch"]}'
        row = rows.setdefault(key, {"model": r["model"], "batch": r["batch"]})
        if r.get("subject") == "train":
            name = "ours_upload_fp32" if r.get("data") == "upload" else f'ours_{r["precision"]}'
            row[name + "_ms"] = r["step_ms"]
            row[name + "_step_over_floor"] = r["ratio_step_over_floor"]
            row.setdefault("device", r.get("device"))
        else:
            where = "upload" if r.get("upload_each_step") else "gpu"
            row[f'torch_{r["precision"]}_{where}_ms'] = r["ms_per_step"]
            row.setdefault("torch", r.get("framework"))
    for row in rows.values():
        for prec in ("fp32", "tf32", "bf16"):
            ours = row.get(f"ours_{prec}_ms")
            torch = row.get(f"torch_{prec}_gpu_ms")
            if ours and torch:
                row[f"speedup_{prec}_vs_torch_gpu"] = torch / ours
        if row.get("ours_fp32_ms") and row.get("torch_fp32_upload_ms"):
            row["speedup_fp32_vs_torch_upload"] = row["torch_fp32_upload_ms"] / row["ours_fp32_ms"]
    print(json.dumps({"rows": list(rows.values())}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
