"""Podman helpers shared by the container churn run (scripts/container_churn.py) and its test
(tests/container_swarm.py): podman calls, a swarm's volumes, and the kill/notice/rejoin milestones
read from the peers' metric files (run_metrics.read_jsonl, which skips a line torn by a kill)."""
import os
import subprocess
import time

from run_metrics import read_jsonl


def podman(*args, timeout=120, check_rc=False):
    """podman ARGS, its output captured; check_rc: a failure raises RuntimeError with stderr."""
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def volume_dir(volume):
    """Where a podman volume's files are on this machine."""
    return podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()


def poll(pred, timeout_s, every_s=0.5):
    """pred()'s first true value within timeout_s, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every_s)
    return None


def last_step(mfile):
    """The last `step` line of a metric file, or None."""
    steps = [e for e in read_jsonl(mfile) if e.get("event") == "step"]
    return steps[-1] if steps else None


def trained_share(mfile, state_dir, share):
    """The peer's last step line once it has trained `share` of its steps and has a checkpoint in
    state_dir/checkpoint; None before."""
    st = last_step(mfile)
    if st and st["step"] >= share * st["steps_total"] and \
            os.listdir(os.path.join(state_dir, "checkpoint")):
        return st
    return None


def noticed(mfiles, seen, addr, skip):
    """The peers (indexes, `skip` left out) whose metric lines after their first seen[i] mark the
    member at addr suspect or dead."""
    return [i for i, f in enumerate(mfiles) if i != skip and any(
        e.get("event") == "member" and e.get("addr") == addr and
        e.get("state") in ("suspect", "dead") for e in read_jsonl(f)[seen[i]:])]


def averaged_since(mfile, offset):
    """Whether the peer logged a good exchange after its first `offset` metric lines."""
    return any(e.get("event") == "exchange" and e.get("ok") for e in read_jsonl(mfile)[offset:])
