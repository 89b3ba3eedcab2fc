"""One run of a podman swarm resized 4 -> 6 -> 3, as an operator resizes a StatefulSet: the
containers are stopped (SIGTERM: each peer checkpoints on its volume) and started again by
deploy/container/podman-swarm.sh with another --replicas and the same --run-id. The peers that
have a volume go on from their checkpoints at the new size (the epoch they had, not 0), the new
ones catch up with them, every peer of the last size exits 0, and gossip-launch --report over the six volumes
reports one run: peers 3-5 `left (resized)`, none failed.

    python3 tests/container_scale.py REPO_ROOT BUILD_DIR

The image is built from BUILD_DIR under a name of this run and removed at the end; the base image
is kept and reused. Every container, network and volume is named gt-scale-<pid>-... and removed.
Exit 77: skipped, with the reason."""
import functools
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "scripts", d) for d in ("test", "plot")]  # container_lib, run_metrics
import container_lib  # noqa: E402
from container_lib import last_step  # noqa: E402
from run_metrics import read_jsonl as lines  # noqa: E402
import doc_commands  # noqa: E402  (tests/: docs/containers.md's commands, which this test runs)

ROOT, BUILD = sys.argv[1], sys.argv[2]
TAG = f"gt-scale-{os.getpid()}"
IMAGE = f"localhost/{TAG}:test"
BASE = os.environ.get("GT_IMAGE_BASE", "localhost/gossiptrain-base:bookworm")
SWARM = os.path.join(ROOT, "deploy", "container", "podman-swarm.sh")
SIZES = (4, 6, 3)
EPOCHS = 400
# docs/containers.md's resize commands, run with this test's name, image and key, and these
# training flags after the page's (`--data synthetic --epochs 400`): the model, a checkpoint every
# epoch and a short linger.
PAGE = os.path.join(ROOT, "docs", "containers.md")
PAGE_UP = {4: "deploy/container/podman-swarm.sh up --name gt --replicas 4 --run-id r1",
           6: "deploy/container/podman-swarm.sh up --name gt --replicas 6 --run-id r1"}
PAGE_STOP = "podman stop -t 60 gt-0 gt-1 gt-2 gt-3"
PAGE_RM = "podman rm gt-0 gt-1 gt-2 gt-3"
FLAGS = ["--model", "mlp:784-256-256-10", "--checkpoint-every", "1", "--linger", "5"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


skip = container_lib.skip


podman = functools.partial(container_lib.podman, check_rc=True)

base_present = container_lib.preflight(BUILD, BASE)

tmp = tempfile.mkdtemp(prefix=f"{TAG}-")
built = False
MAX = max(SIZES)


def cleanup():
    subprocess.run([SWARM, "down", "--name", TAG, "--replicas", str(MAX)], timeout=180)
    if built:
        podman("rmi", "-f", IMAGE, check_rc=False)
    shutil.rmtree(tmp, ignore_errors=True)
    left = podman("ps", "-a", "--filter", f"name={TAG}", "--format", "{{.Names}}", check_rc=False)
    if left.stdout.strip():
        print(f"FAIL left behind: {left.stdout.strip()}")


def build_image():
    global built
    built = True
    failed = container_lib.build_image(ROOT, BUILD, IMAGE, BASE, base_present)
    if failed:
        check(False, failed)
        raise SystemExit(1)


def page(prefix, n, options=(), flags=()):
    """The page's command that starts with prefix, for this test's name and n containers (the
    page's up for 6 serves the last size, 3, too; its stop and rm name the 4 of the first)."""
    first4 = " ".join(f"{TAG}-{i}" for i in range(4))
    to_n = " ".join(f"{TAG}-{i}" for i in range(n))
    return doc_commands.for_test(
        PAGE, prefix, TAG, options, flags,
        lambda cmd: re.sub(r"--replicas \d+", f"--replicas {n}", cmd).replace(first4, to_n))


def sh(cmd, timeout):
    return doc_commands.run_line(cmd, ROOT, timeout)


def up(n, key):
    r = sh(page(PAGE_UP[4 if n == 4 else 6], n, ["--image", IMAGE, "--key", key], FLAGS), 300)
    if not check(r.returncode == 0, f"podman-swarm.sh up --replicas {n}: {r.stderr.strip()[-300:]}"):
        raise SystemExit(1)


def stop(n):
    """SIGTERM to every container at once (each peer checkpoints and exits; `podman stop`, not
    `podman kill --signal TERM`, which the restart policy answers with a restart, since a
    stopped peer exits 130), then remove the containers; the volumes stay."""
    r = sh(page(PAGE_STOP, n), 120)
    if not check(r.returncode == 0, f"podman stop of {n} containers: {r.stderr.strip()[-300:]}"):
        raise SystemExit(1)
    r = sh(page(PAGE_RM, n), 60)
    check(r.returncode == 0, f"podman rm of {n} containers: {r.stderr.strip()[-300:]}")


def tail_log(i, n=6):
    r = podman("logs", f"{TAG}-{i}", check_rc=False)
    return "\n".join((r.stdout + r.stderr).strip().splitlines()[-n:])


def progress(i):
    """The peer's last step line's share of its run (its epoch plus the share of it)."""
    st = last_step(mfile(i))
    return st["step"] / st["steps_total"] if st and st.get("steps_total") else 0.0


def mfile(i):
    return os.path.join(container_lib.volume_dir(f"{TAG}-state-{i}"), "metrics.jsonl")


def wait_all(n, share, timeout_s):
    ok = container_lib.poll(lambda: all(progress(i) >= share for i in range(n)), timeout_s, 0.5)
    return check(bool(ok), f"all {n} peers past {share:.0%} of the run within {timeout_s} s "
                           f"({[round(progress(i), 2) for i in range(n)]})")


def resumed_at(i, offset):
    """The first step line after the metric file's first `offset` lines: (step, steps_total)."""
    for e in lines(mfile(i))[offset:]:
        if e.get("event") == "step":
            return e["step"], e["steps_total"]
    return None


try:
    build_image()
    key = os.path.join(tmp, "network.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(32) + "\n")

    # 4 peers, to 15% of the run.
    up(SIZES[0], key)
    if not wait_all(SIZES[0], 0.15, 240):
        raise SystemExit(1)
    stop(SIZES[0])
    before = {i: progress(i) for i in range(SIZES[0])}
    offsets = {i: len(lines(mfile(i))) for i in range(SIZES[0])}
    print(f"stopped 4 peers at {before}", flush=True)

    # 6 peers: 0-3 go on from their checkpoints (the epoch they had, on 4 shards -> 6), 4-5 catch
    # up with them.
    up(SIZES[1], key)
    if not wait_all(SIZES[1], 0.4, 300):
        raise SystemExit(1)
    for i in range(SIZES[0]):
        r = resumed_at(i, offsets[i])
        if not check(r is not None and r[0] / r[1] >= before[i] - 1.0 / EPOCHS,
                     f"peer {i} went on at 6 shards from {before[i]:.3f} of the run: first step {r}"):
            print(tail_log(i))
    for i in range(SIZES[0], SIZES[1]):
        check(progress(i) > 0, f"new peer {i} trained ({progress(i):.2f} of the run)")
        # It took the state of a peer that went on from its checkpoint, not the initial weights.
        caught = [e for e in lines(mfile(i)) if e.get("event") == "catch_up"]
        r = resumed_at(i, 0)
        check(bool(caught) and caught[0].get("ok") and r is not None and
              r[0] / r[1] >= min(before.values()) - 1.0 / EPOCHS,
              f"new peer {i} caught up: {caught[:1]}, first step {r}")
    stop(SIZES[1])
    before = {i: progress(i) for i in range(SIZES[1])}
    offsets = {i: len(lines(mfile(i))) for i in range(SIZES[1])}
    print(f"stopped 6 peers at {before}", flush=True)

    # 3 peers to the end: 0-2 go on from their checkpoints; 3-5 have left.
    t_last = time.monotonic()
    up(SIZES[2], key)
    for i in range(SIZES[2]):
        r = podman("wait", f"{TAG}-{i}", timeout=600)
        check(r.stdout.strip() == "0", f"{TAG}-{i} finished with exit code 0 (got {r.stdout.strip()})")
    print(f"the last size ran {time.monotonic() - t_last:.0f} s", flush=True)
    for i in range(SIZES[2]):
        r = resumed_at(i, offsets[i])
        check(r is not None and r[0] / r[1] >= before[i] - 1.0 / EPOCHS,
              f"peer {i} went on at 3 shards from {before[i]:.3f} of the run: first step {r}")
        evs = lines(mfile(i))
        ends = [bool(e.get("stopped")) for e in evs if e.get("event") == "done"]
        ok_after = [e for e in evs[offsets[i]:] if e.get("event") == "exchange" and e.get("ok")]
        check(ends == [True, True, False] and ok_after,
              f"peer {i}: stopped twice, then done ({ends}), {len(ok_after)} good exchanges at "
              f"the last size")

    # One report over the six volumes' metrics, as an operator gathers them.
    rep = os.path.join(tmp, "run")
    for i in range(MAX):
        os.makedirs(os.path.join(rep, f"peer{i}"))
        shutil.copy(mfile(i), os.path.join(rep, f"peer{i}", "metrics.jsonl"))
    r = subprocess.run([os.path.join(BUILD, "apps", "gossip-launch"), "--report", rep, "--no-plots"],
                       capture_output=True, text=True, timeout=120)
    print(r.stdout.strip()[-1500:])
    check(r.returncode == 0, f"gossip-launch --report exit 0 (got {r.returncode}: {r.stderr.strip()[-300:]})")
    with open(os.path.join(rep, "summary.json")) as f:
        summary = json.load(f)
    states = [p.get("state") for p in summary["peers"]]
    check(len(states) == MAX and states[:3] == ["done"] * 3 and
          states[3:] == ["left (resized)"] * 3,
          f"the report's peers: {states}")
    check(summary["failed_peers"] == [], f"no failed peer: {summary['failed_peers']}")
finally:
    cleanup()

print("container_scale: " + ("all checks passed" if not failures else f"{len(failures)} FAILED"))
sys.exit(1 if failures else 0)
