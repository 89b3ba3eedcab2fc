"""Four gossip-peer containers on a podman network find each other by DNS name, as the pods of the
StatefulSet in deploy/k8s do (same image, same entrypoint, the manifest's environment and args),
and average; one is killed (podman kill) once the swarm's front is 30% through its training and
started again: it resumes from its checkpoint volume as the same peer and rejoins.

    python3 tests/container_swarm.py REPO_ROOT BUILD_DIR

The image is built from BUILD_DIR by deploy/container/build-image.sh under a name of this run and
removed at the end; the base image (mmdebstrap, the slow part) is kept and reused. Every container,
network and volume is named gt-pods-<pid>-... and removed. Exit 77: skipped, with the reason."""
import functools
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "scripts", d) for d in ("test", "plot")]  # container_lib, run_metrics
import container_lib  # noqa: E402  (scripts/test/, shared with scripts/experiments/container_churn.py)
from container_lib import averaged_since, last_step, noticed, trained_share  # noqa: E402
from run_metrics import read_jsonl as lines  # noqa: E402
import doc_commands  # noqa: E402  (tests/: docs/containers.md's commands, which this test runs)

try:
    import yaml
except ImportError:
    print("SKIP: no PyYAML for /usr/bin/python3 (Debian package python3-yaml)")
    sys.exit(77)

ROOT, BUILD = sys.argv[1], sys.argv[2]
TAG = f"gt-pods-{os.getpid()}"
IMAGE = f"localhost/{TAG}:test"
BASE = os.environ.get("GT_IMAGE_BASE", "localhost/gossiptrain-base:bookworm")
RUN = container_lib.RUN
N = 4
VICTIM = 2
EPOCHS = 120  # long enough that the kill at 30% lands before the victim has finished
# With mlp:784-64-10, in a clean-clone CI run at load 12, the poll saw 30% only when the victim
# was at step 5600 of 5640, and it restarted at its final step. 4x the work per step:
MODEL = "mlp:784-256-10"
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


skip = container_lib.skip


# Here a failed podman call raises, unless the call says check_rc=False.
podman = functools.partial(container_lib.podman, check_rc=True)


def poll(what, pred, timeout_s, every_s=0.5):
    v = container_lib.poll(pred, timeout_s, every_s)
    if not v:
        check(False, f"{what} (within {timeout_s} s)")
    return v


# --- What can run here ------------------------------------------------------------------------
base_present = container_lib.preflight(BUILD, BASE)

with open(os.path.join(ROOT, "deploy", "k8s", "statefulset.yaml")) as f:
    sts = yaml.safe_load(f)
spec = sts["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e["value"] for e in spec["env"]}
SERVICE = env["GT_K8S_SERVICE"]
metrics_port = int(env["GT_METRICS_PORT"])
state_in_pod = next(m["mountPath"] for m in spec["volumeMounts"] if m["name"] == "state")
SWARM = os.path.join(ROOT, "deploy", "container", "podman-swarm.sh")
# docs/containers.md's podman commands, which this test runs with its own name, image, key,
# service and training flags (the manifest's, then its size).
PAGE = os.path.join(ROOT, "docs", "containers.md")
PAGE_UP = "deploy/container/podman-swarm.sh up --name gt --replicas 4 -- "
PAGE_KILL = "podman kill gt-2; podman start gt-2"
PAGE_DOWN = "deploy/container/podman-swarm.sh down --name gt --replicas 4"


def page(prefix, options=(), flags=()):
    """The page's command that starts with prefix, as this test runs it."""
    return doc_commands.for_test(PAGE, prefix, TAG, options, flags)


def sh(cmd, timeout):
    return doc_commands.run_line(cmd, ROOT, timeout)
# The manifest's training flags, then this test's size (the last of a repeated flag wins).
args = list(spec["args"]) + ["--model", MODEL, "--epochs", str(EPOCHS),
                             "--checkpoint-every", "1", "--linger", "10", "--min-peers", str(N)]

created = {"containers": [], "volumes": [], "networks": [], "images": []}
tmp = tempfile.mkdtemp(prefix=f"{TAG}-")


def cleanup():
    r = sh(page(PAGE_DOWN), 120)
    if r.returncode != 0:
        print(f"FAIL the page's down: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        failures.append("podman-swarm.sh down")
    for c in created["containers"]:
        podman("rm", "-f", "-t", "0", c, check_rc=False)
    for v in created["volumes"]:
        podman("volume", "rm", "-f", v, check_rc=False)
    for n in created["networks"]:
        podman("network", "rm", "-f", n, check_rc=False)
    for i in created["images"]:
        podman("rmi", "-f", i, check_rc=False)
    shutil.rmtree(tmp, ignore_errors=True)
    left = podman("ps", "-a", "--filter", f"name={TAG}", "--format", "{{.Names}}", check_rc=False)
    if left.stdout.strip():
        print(f"FAIL left behind: {left.stdout.strip()}")


def build_image():
    created["images"].append(IMAGE)
    failed = container_lib.build_image(ROOT, BUILD, IMAGE, BASE, base_present)
    if failed:
        check(False, failed)
        raise SystemExit(1)


def bad_environment(extra_env, hostname, names):
    """The entrypoint refuses a missing or inconsistent environment: exit 2, naming the variable."""
    cmd = ["run", "--rm", *RUN, "--hostname", hostname, "--network", "none"]
    for k, v in extra_env.items():
        cmd += ["-e", f"{k}={v}"]
    r = podman(*cmd, IMAGE, "--data", "synthetic", check_rc=False, timeout=60)
    check(r.returncode == 2 and names in r.stderr,
          f"entrypoint with {extra_env} as {hostname}: exit 2 naming {names} "
          f"(got {r.returncode}: {r.stderr.strip()})")


try:
    build_image()
    bad_environment({}, "gossip-0", "GT_K8S_SERVICE")
    bad_environment({"GT_K8S_SERVICE": "s", "GT_K8S_REPLICAS": "2"}, "gossip-5", "GT_K8S_REPLICAS")
    bad_environment({"GT_K8S_SERVICE": "s", "GT_K8S_REPLICAS": "2"}, "gossip", "HOSTNAME")

    key = os.path.join(tmp, "network.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    # podman-swarm.sh sets GT_K8S_SERVICE and GT_K8S_REPLICAS and mounts the key and the state
    # where the image's defaults put them: the rest of the manifest's environment must be those.
    image_env = dict(ln.split("=", 1) for ln in podman(
        "image", "inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", IMAGE
    ).stdout.split())
    check(all(env[k] == image_env.get(k) for k in ("GT_PORT", "GT_METRICS_PORT")) and
          state_in_pod == image_env.get("GT_STATE_DIR") and
          env["GT_NETWORK_KEY_FILE"] == "/etc/gossiptrain/network.key",
          "the manifest's ports, state and key paths are the ones podman-swarm.sh gives")
    created["networks"].append(f"{TAG}-net")
    created["volumes"] += [f"{TAG}-state-{i}" for i in range(N)]
    created["containers"] += [f"{TAG}-{i}" for i in range(N)]
    t_start = time.monotonic()
    r = sh(page(PAGE_UP, ["--service", SERVICE, "--image", IMAGE, "--key", key], args), 300)
    if not check(r.returncode == 0, f"podman-swarm.sh up: {r.stdout.strip()} {r.stderr.strip()}"):
        raise SystemExit(1)
    vol = [container_lib.volume_dir(f"{TAG}-state-{i}") for i in range(N)]
    mfile = [os.path.join(v, "metrics.jsonl") for v in vol]

    # /healthz and /readyz answer on the metrics port, as the probes ask them.
    ip = podman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                f"{TAG}-0").stdout.strip()

    def healthz():
        try:
            with urllib.request.urlopen(f"http://{ip}:{metrics_port}/healthz", timeout=2) as r:
                return r.status == 200 and r.read().startswith(b"ok: ")
        except OSError:
            return False

    def readyz():
        try:
            with urllib.request.urlopen(f"http://{ip}:{metrics_port}/readyz", timeout=2) as r:
                return r.status == 200 and r.read().startswith(b"ready: ")
        except OSError:
            return False
    check(bool(poll("/healthz answers 200 ok", healthz, 60)), f"/healthz of {TAG}-0 at {ip}")
    check(bool(poll("/readyz answers 200 ready", readyz, 60)), f"/readyz of {TAG}-0 at {ip}")

    # The swarm's front has trained 30% of its epochs and the victim has a checkpoint. Not the
    # victim's own 30%: in a clean-clone rehearsal (2026-11-29) the victim lagged, reached 30% when
    # the others were near their end, and was back only as the last of them left (no exchange
    # after its restart).
    def front_at_30():
        steps = [last_step(f) for f in mfile]
        front = any(st and st["step"] >= 0.3 * st["steps_total"] for st in steps)
        return front and trained_share(mfile[VICTIM], vol[VICTIM], 0.0)

    if not poll("the swarm's front reaches 30% of its epochs", front_at_30, 240):
        raise SystemExit(1)
    before = lines(mfile[VICTIM])
    step_at_kill = max(e["step"] for e in before if e.get("event") == "step")
    exchanges_ok_before = sum(1 for e in before if e.get("event") == "exchange" and e.get("ok"))
    seen = [len(lines(mfile[i])) for i in range(N)]
    # The page's line is `podman kill gt-2; podman start gt-2`: the kill now, the start once the
    # others have noticed the death.
    kill_cmd, start_cmd = page(PAGE_KILL).split("; ")
    assert kill_cmd.endswith(f"{TAG}-{VICTIM}"), kill_cmd
    check(sh(kill_cmd, 60).returncode == 0, kill_cmd)
    t_kill = time.monotonic()
    podman("wait", f"{TAG}-{VICTIM}", timeout=60)
    offset = len(lines(mfile[VICTIM]))  # its last line before the restart
    print(f"killed {TAG}-{VICTIM} at step {step_at_kill}, {t_kill - t_start:.0f} s in, "
          f"after {exchanges_ok_before} good exchanges")
    victim_addr = f"{TAG}-{VICTIM}.{SERVICE}:{env['GT_PORT']}"

    def victim_ids():
        return {e["member"] for i in range(N) if i != VICTIM for e in lines(mfile[i])
                if e.get("event") == "member" and e.get("addr") == victim_addr}

    found = poll("the others detect the killed peer",
                 lambda: noticed(mfile, seen, victim_addr, VICTIM), 60)
    print(f"detected by peers {found} after {time.monotonic() - t_kill:.1f} s")
    check(sh(start_cmd, 60).returncode == 0, start_cmd)

    check(bool(poll("the restarted peer averages again",
                    lambda: averaged_since(mfile[VICTIM], offset), 120)),
          "the restarted peer has good exchanges after its restart")
    for i in range(N):
        r = podman("wait", f"{TAG}-{i}", timeout=400)
        check(r.stdout.strip() == "0", f"{TAG}-{i} finished with exit code 0 (got {r.stdout.strip()})")
    print(f"run took {time.monotonic() - t_start:.0f} s")

    logs = podman("logs", f"{TAG}-{VICTIM}").stdout + podman("logs", f"{TAG}-{VICTIM}").stderr
    resumed = [ln for ln in logs.splitlines() if "resumed from checkpoint" in ln]
    check(len(resumed) == 1 and f"{state_in_pod}/checkpoint" in resumed[0],
          f"the restarted peer resumed from its checkpoint volume: {resumed}")
    at = int(resumed[0].rsplit("step", 1)[1]) if resumed else -1
    after = lines(mfile[VICTIM])[offset:]
    first_step = next((e["step"] for e in after if e.get("event") == "step"), None)
    check(0 < at and first_step is not None and at < first_step,
          f"it went on from its checkpoint's step {at} (first step line after the restart "
          f"{first_step}, {step_at_kill} at the kill)")
    check(logs.count("created identity") == 1, "its identity key was made once, on the volume")
    check(len(victim_ids()) == 1, f"the others know it by one peer id before and after: {victim_ids()}")
    for i in range(N):
        evs = lines(mfile[i])
        done = [e for e in evs if e.get("event") == "done"]
        partners = {e.get("partner") for e in evs if e.get("event") == "exchange" and e.get("ok")}
        check(len(done) == 1 and len(partners) >= 2,
              f"peer {i}: done once, averaged with {len(partners)} distinct partners")
        if i != VICTIM:
            states = [e["state"] for e in evs[seen[i]:] if e.get("event") == "member" and
                      e.get("addr") == victim_addr]
            back = "alive" in states[next((k for k, s in enumerate(states) if s != "alive"), len(states)):]
            check(back, f"peer {i} saw the victim go after the kill and come back alive: {states}")
finally:
    if failures:  # what each peer saw, for the record, before the containers go
        for i in range(N):
            r = podman("logs", "--tail", "12", f"{TAG}-{i}", check_rc=False)
            print(f"--- {TAG}-{i}:\n" + (r.stdout + r.stderr).strip()[-2500:])
    cleanup()

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
