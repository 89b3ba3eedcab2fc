#!/usr/bin/python3
"""A churn run in containers, measured: four peers on Fashion-MNIST in podman (podman-swarm.sh, the
StatefulSet's layout), once as they are and once with peer 2 killed (podman kill) at 30% of its
training and started again by us, the engine, as soon as another peer has noticed. Prints each run's
final test accuracies, the detection and the resume, and copies the metric files into
OUT/{base,churn}/peerN/metrics.jsonl.

    scripts/experiments/container_churn.py [--out DIR] [--epochs E] [--image NAME] [--data DIR]

Needs root, podman, runc and the image (deploy/container/build-image.sh). Takes several minutes."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(ROOT, "scripts", "test"), os.path.join(ROOT, "scripts", "plot")]
from container_lib import (averaged_since, noticed, podman, poll, trained_share,  # noqa: E402
                           volume_dir)
from run_metrics import read_jsonl as lines  # noqa: E402

SWARM = os.path.join(ROOT, "deploy", "container", "podman-swarm.sh")
N, VICTIM = 4, 2

ap = argparse.ArgumentParser()
ap.add_argument("--out", default="container-churn")
ap.add_argument("--epochs", type=int, default=10)
ap.add_argument("--image", default="localhost/gossiptrain:latest")
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--seed", type=int, default=1)
o = ap.parse_args()


def run(label, crash):
    name = f"gt-churn-{os.getpid()}-{label}"
    key = os.path.join(o.out, f"{label}.key")
    args = ["--data", "/data", "--epochs", str(o.epochs), "--seed", str(o.seed),
            "--checkpoint-every", "2", "--linger", "15", "--min-peers", str(N)]
    res = {"label": label, "crash": crash}
    try:
        t0 = time.monotonic()
        subprocess.run([SWARM, "up", "--name", name, "--replicas", str(N), "--image", o.image,
                        "--key", key, "--data-dir", o.data, "--", *args], check=True, timeout=300)
        vol = [volume_dir(f"{name}-state-{i}") for i in range(N)]
        mfile = [os.path.join(v, "metrics.jsonl") for v in vol]
        if crash:
            st = poll(lambda: trained_share(mfile[VICTIM], vol[VICTIM], 0.3), 1200)
            if not st:
                raise RuntimeError("the victim never reached 30%")
            seen = [len(lines(f)) for f in mfile]
            res["killed_at_step"], res["steps_total"] = st["step"], st["steps_total"]
            podman("kill", f"{name}-{VICTIM}")
            t_kill = time.monotonic()
            podman("wait", f"{name}-{VICTIM}", timeout=60)
            dead_at = len(lines(mfile[VICTIM]))  # its last line before the restart
            res["killed_at_s"] = round(t_kill - t0, 1)
            addr = f"{name}-{VICTIM}.gossip:7000"
            if not poll(lambda: noticed(mfile, seen, addr, VICTIM), 120, 0.2):
                raise RuntimeError("nobody noticed the kill")
            res["detected_after_s"] = round(time.monotonic() - t_kill, 1)
            podman("start", f"{name}-{VICTIM}")
            t_start = time.monotonic()
            if not poll(lambda: averaged_since(mfile[VICTIM], dead_at), 300, 0.2):
                raise RuntimeError("the restarted peer never averaged")
            res["first_exchange_after_restart_s"] = round(time.monotonic() - t_start, 1)
        for i in range(N):
            podman("wait", f"{name}-{i}", timeout=3600)
        res["seconds"] = round(time.monotonic() - t0, 1)
        logs = podman("logs", f"{name}-{VICTIM}")
        res["resume_lines"] = [ln.split(" info ", 1)[-1] for ln in
                               (logs.stdout + logs.stderr).splitlines() if "resumed from" in ln]
        res["exit_codes"] = [podman("inspect", "--format", "{{.State.ExitCode}}",
                                    f"{name}-{i}").stdout.strip() for i in range(N)]
        acc = []
        for i in range(N):
            ev = lines(mfile[i])
            done = [e for e in ev if e.get("event") == "done"]
            acc.append(done[-1]["final_test_acc"] if done else None)
            d = os.path.join(o.out, label, f"peer{i}")
            os.makedirs(d, exist_ok=True)
            shutil.copy(mfile[i], os.path.join(d, "metrics.jsonl"))
        res["final_test_acc"] = acc
        ok = [a for a in acc if a is not None]
        res["mean_final_test_acc"] = sum(ok) / len(ok) if ok else None
        return res
    finally:
        subprocess.run([SWARM, "down", "--name", name, "--replicas", str(N)], timeout=120)


os.makedirs(o.out, exist_ok=True)
print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
base = run("base", False)
print(json.dumps(base), flush=True)
churn = run("churn", True)
print(json.dumps(churn), flush=True)
diff = (churn["mean_final_test_acc"] - base["mean_final_test_acc"]) * 100
print(f"mean final test accuracy: base {base['mean_final_test_acc']:.4f}, churn "
      f"{churn['mean_final_test_acc']:.4f}: {diff:+.2f} points "
      f"({'within' if abs(diff) <= 1 else 'NOT within'} 1 point); load average "
      f"{os.getloadavg()[0]:.1f}")
with open(os.path.join(o.out, "result.json"), "w") as f:
    json.dump({"base": base, "churn": churn, "diff_points": diff}, f, indent=1)
sys.exit(0 if abs(diff) <= 1 else 1)
