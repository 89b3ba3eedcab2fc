"""Podman helpers shared by the container churn run (scripts/experiments/container_churn.py) and its test
(tests/container_swarm.py): podman calls, a swarm's volumes, and the kill/notice/rejoin milestones
read from the peers' metric files (run_metrics.read_jsonl, which skips a line torn by a kill)."""
import os
import shutil
import signal
import subprocess
import sys
import time

from run_metrics import read_jsonl


# podman on these machines: runc (crun refuses hybrid cgroups) and explicit limits.
RUN = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def skip(why):
    """Exit 77, ctest's skip, with the reason."""
    print(f"SKIP: {why}", flush=True)
    sys.exit(77)


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


def preflight(build, base, progs=("gossip-peer", "gossip-launch")):
    """Skips (exit 77, with the reason) where a container test cannot run here: not root, no
    podman or runc, a program not built in build, netavark without iptables, or no base image and
    no mmdebstrap to make one. Returns whether the base image is there already."""
    if os.geteuid() != 0:
        skip("needs root (podman's bridge networks and volumes)")
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            skip(f"{tool} is not installed (scripts/setup.sh)")
    for prog in progs:
        if not os.access(os.path.join(build, "apps", prog), os.X_OK):
            skip(f"{build}/apps/{prog} is not built")
    # Debian 12's netavark drives the firewall through iptables, which podman only suggests:
    # without it every build step and every container on a network fails with "netavark: No such
    # file or directory".
    if shutil.which("netavark") or os.path.exists("/usr/lib/podman/netavark"):
        if not shutil.which("iptables"):
            skip("podman's netavark needs iptables, which is not installed (scripts/setup.sh "
                 "installs it)")
    present = podman("image", "exists", base).returncode == 0
    if not present and not shutil.which("mmdebstrap"):
        skip(f"no base image {base} and no mmdebstrap to make one (scripts/setup.sh)")
    return present


def build_image(root, build, image, base, base_present, extra=()):
    """deploy/container/build-image.sh from build into image on base (extra: more of its flags),
    within 300 s where the base is present, else GT_IMAGE_BUILD_TIMEOUT (900) s. Skips where it
    runs out of time or podman cannot run or network containers here; prints its summary lines.
    Returns None when built, else the failure (exit code and output) to report."""
    t0 = time.monotonic()
    limit = 300 if base_present else int(os.environ.get("GT_IMAGE_BUILD_TIMEOUT", "900"))
    cmd = [os.path.join(root, "deploy", "container", "build-image.sh"), "--build", build,
           *extra, "--image", image, "--base", base]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate()
        skip(f"building the image took over {limit} s ({'base present' if base_present else 'making the base with mmdebstrap'}; GT_IMAGE_BUILD_TIMEOUT)")
    for ln in out.splitlines():
        if ln.startswith("build-image:") or "missing" in ln:
            print(ln)
    if p.returncode != 0:
        if "cgroups" in out or "setrlimit" in out or "OCI runtime" in out:
            skip(f"podman cannot run containers here: {out.strip()[-400:]}")
        if "netavark" in out or "iptables" in out:
            skip(f"podman cannot network here: {out.strip()[-400:]}")
        return f"build-image.sh {' '.join(extra)} exit {p.returncode}: {out.strip()[-1500:]}"
    print(f"image built in {time.monotonic() - t0:.0f} s", flush=True)
    return None
