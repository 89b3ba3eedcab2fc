"""The indexed Job of deploy/k8s/job.yaml in podman: containers with the environment Kubernetes gives
an indexed Job's pods (JOB_COMPLETION_INDEX, hostname JOBNAME-INDEX, resolving as
JOBNAME-INDEX.SERVICE on one network), the Job's args and one shared state volume, each limited
to one CPU (`--cpus 1`, the manifest's limits.cpu). Checks that

- the entrypoint refuses an index that is not a number, or that disagrees with the hostname
  (exit code 2, naming JOB_COMPLETION_INDEX), and an index past the replicas;
- every peer logs a BLAS pool of 1 thread sized by the cgroup's CPU quota;
- a peer killed at 30% and replaced by a new container (restartPolicy Never: a new pod, same
  hostname) resumes from its checkpoint in peerINDEX on the shared volume, with its identity;
- every peer exits 0 after its linger (the Job completes), each one's files in peerINDEX;
- report-job.yaml's command in the image gives one report of the run: summary.json with every
  peer and the replaced one's restart, table.txt, and the plots (PNG files, not empty), drawn by
  the image's python3 (build-image.sh --plots).

    python3 tests/container_job.py REPO_ROOT BUILD_DIR

The image is built with --plots under a name of this run and removed at the end; its base
(localhost/gossiptrain-base-plots:bookworm, or GT_IMAGE_PLOTS_BASE) is made once with mmdebstrap,
at most GT_IMAGE_BUILD_TIMEOUT seconds (900), and kept. Every container, network and volume is
named gt-job-<pid>-... and removed. Exit 77: skipped, with the reason."""
import functools
import json
import os
import secrets
import shutil
import sys
import tempfile
import time

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "scripts", d) for d in ("test", "plot")]  # container_lib, run_metrics
import container_lib  # noqa: E402
from container_lib import averaged_since, trained_share  # noqa: E402
from run_metrics import read_jsonl as lines  # noqa: E402

try:
    import yaml
except ImportError:
    print("SKIP: no PyYAML for /usr/bin/python3 (Debian package python3-yaml)")
    sys.exit(77)

ROOT, BUILD = sys.argv[1], sys.argv[2]
TAG = f"gt-job-{os.getpid()}"
IMAGE = f"localhost/{TAG}:test"
BASE = os.environ.get("GT_IMAGE_PLOTS_BASE", "localhost/gossiptrain-base-plots:bookworm")
RUN = container_lib.RUN
N = 3
VICTIM = 1
EPOCHS = 120
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


skip = container_lib.skip


podman = functools.partial(container_lib.podman, check_rc=True)


def poll(what, pred, timeout_s, every_s=0.5):
    v = container_lib.poll(pred, timeout_s, every_s)
    if not v:
        check(False, f"{what} (within {timeout_s} s)")
    return v


base_present = container_lib.preflight(BUILD, BASE)

with open(os.path.join(ROOT, "deploy", "k8s", "job.yaml")) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
job = next(d for d in docs if d["kind"] == "Job")
pod = job["spec"]["template"]["spec"]
spec = pod["containers"][0]
env = {e["name"]: e["value"] for e in spec["env"]}
JOB, SERVICE = job["metadata"]["name"], pod["subdomain"]
state_in_pod = next(m["mountPath"] for m in spec["volumeMounts"] if m["name"] == "state")
with open(os.path.join(ROOT, "deploy", "k8s", "report-job.yaml")) as f:
    report_cmd = yaml.safe_load(f)["spec"]["template"]["spec"]["containers"][0]["command"]
# The manifest's training flags, then this test's size (the last of a repeated flag wins).
args = list(spec["args"]) + ["--epochs", str(EPOCHS), "--checkpoint-every", "1", "--linger", "20"]

created = {"containers": [], "volumes": [], "networks": [], "images": []}
tmp = tempfile.mkdtemp(prefix=f"{TAG}-")


def cleanup():
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
    failed = container_lib.build_image(ROOT, BUILD, IMAGE, BASE, base_present, ("--plots",))
    if failed:
        check(False, failed)
        raise SystemExit(1)


def pod_env(index, replicas=N):
    e = dict(env, GT_K8S_REPLICAS=str(replicas), JOB_COMPLETION_INDEX=str(index))
    return [x for k, v in e.items() for x in ("-e", f"{k}={v}")]


def refused(index, hostname, names, replicas=N):
    cmd = ["run", "--rm", *RUN, "--hostname", hostname, "--network", "none"]
    e = dict(env, GT_K8S_REPLICAS=str(replicas), JOB_COMPLETION_INDEX=index)
    e.pop("GT_NETWORK_KEY_FILE")
    for k, v in e.items():
        cmd += ["-e", f"{k}={v}"]
    r = podman(*cmd, IMAGE, "--data", "synthetic", check_rc=False, timeout=60)
    check(r.returncode == 2 and names in r.stderr,
          f"entrypoint with JOB_COMPLETION_INDEX={index!r} as {hostname}: exit 2 naming {names} "
          f"(got {r.returncode}: {r.stderr.strip()[-300:]})")


def start_pod(name, index, key):
    created["containers"].append(name)
    podman("run", "-d", *RUN, "--cpus", "1", "--name", name, "--hostname", f"{JOB}-{index}",
           "--network", f"{TAG}-net", "--network-alias", f"{JOB}-{index}.{SERVICE}",
           "-v", f"{TAG}-run:{state_in_pod}", "-v", f"{key}:{env['GT_NETWORK_KEY_FILE']}:ro",
           *pod_env(index), IMAGE, *args)


def log_of(name):
    r = podman("logs", name)
    return r.stdout + r.stderr


try:
    build_image()
    # --cpus needs the cgroup cpu controller (v1's cpu hierarchy or v2's delegated cpu.max).
    r = podman("run", "--rm", *RUN, "--cpus", "1", "--network", "none", "--entrypoint", "true",
               IMAGE, check_rc=False, timeout=60)
    if r.returncode != 0:
        skip(f"podman cannot limit a container's CPU here (--cpus 1): {r.stderr.strip()[-300:]}")
    refused("x", f"{JOB}-0", "JOB_COMPLETION_INDEX")
    refused("1", f"{JOB}-2", "JOB_COMPLETION_INDEX")
    refused("12", f"{JOB}-2", "JOB_COMPLETION_INDEX")
    refused(str(N), f"{JOB}-{N}", "GT_K8S_REPLICAS")

    key = os.path.join(tmp, "network.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    created["networks"].append(f"{TAG}-net")
    podman("network", "create", f"{TAG}-net")
    created["volumes"].append(f"{TAG}-run")
    podman("volume", "create", f"{TAG}-run")
    vol = container_lib.volume_dir(f"{TAG}-run")
    pods = [f"{TAG}-{i}" for i in range(N)]
    t_start = time.monotonic()
    for i in range(N):
        start_pod(pods[i], i, key)
    peer_dir = [os.path.join(vol, f"peer{i}") for i in range(N)]
    mfile = [os.path.join(d, "metrics.jsonl") for d in peer_dir]

    # The victim has trained 30% and has a checkpoint: killed, and replaced by a new container.
    if not poll("the victim reaches 30% of its epochs",
                lambda: trained_share(mfile[VICTIM], peer_dir[VICTIM], 0.3), 300):
        raise SystemExit(1)
    podman("kill", pods[VICTIM])
    podman("wait", pods[VICTIM], timeout=60)
    offset = len(lines(mfile[VICTIM]))
    print(f"killed {pods[VICTIM]} {time.monotonic() - t_start:.0f} s in, at line {offset}")
    replacement = f"{TAG}-{VICTIM}-b"
    start_pod(replacement, VICTIM, key)
    check(bool(poll("the replacement averages again",
                    lambda: averaged_since(mfile[VICTIM], offset), 180)),
          "the replacement pod has good exchanges")
    finals = [p for i, p in enumerate(pods) if i != VICTIM] + [replacement]
    for p in finals:
        r = podman("wait", p, timeout=600)
        check(r.stdout.strip() == "0", f"{p} exited 0 after its linger (got {r.stdout.strip()})")
    print(f"run took {time.monotonic() - t_start:.0f} s")

    for p in finals + [pods[VICTIM]]:
        plan = [ln for ln in log_of(p).splitlines() if "cpu plan:" in ln]
        check(len(plan) == 1 and "1 BLAS thread (CPU quota 1 CPU in /sys/fs/cgroup/" in plan[0],
              f"{p}: the BLAS pool is the CPU limit's one thread: {plan}")
    first, second = log_of(pods[VICTIM]), log_of(replacement)
    resumed = [ln for ln in second.splitlines() if "resumed from checkpoint" in ln]
    check(len(resumed) == 1 and f"{state_in_pod}/peer{VICTIM}/checkpoint" in resumed[0],
          f"the replacement resumed from peer{VICTIM}/checkpoint on the shared volume: {resumed}")
    check(first.count("created identity") == 1 and second.count("created identity") == 0,
          "the replacement kept the identity the first pod made")
    for i in range(N):
        evs = lines(mfile[i])
        done = [e for e in evs if e.get("event") == "done"]
        partners = {e.get("partner") for e in evs if e.get("event") == "exchange" and e.get("ok")}
        check(len(done) == 1 and len(partners) >= 1 and
              os.path.exists(os.path.join(peer_dir[i], "identity.key")) and
              sorted(os.listdir(peer_dir[i])) == ["checkpoint", "identity.key", "metrics.jsonl"],
              f"peer{i}/: metrics with one done line, {len(partners)} partners, identity.key "
              f"and checkpoint/, nothing else: {sorted(os.listdir(peer_dir[i]))}")

    # The report, as report-job.yaml runs it once the Job has completed.
    name = f"{TAG}-report"
    created["containers"].append(name)
    r = podman("run", "--name", name, *RUN, "--cpus", "1", "-v", f"{TAG}-run:{state_in_pod}",
               "--entrypoint", report_cmd[0], IMAGE, *report_cmd[1:], check_rc=False,
               timeout=300)
    check(r.returncode == 0, f"report-job.yaml's command: exit {r.returncode}: {r.stderr.strip()[-800:]}")
    out = os.path.join(vol, "report")
    print(r.stdout.strip())
    check("plots: NOT MADE" not in r.stderr and "skipped" not in r.stderr and
          "missing" not in r.stderr, f"the report skipped nothing and made the plots: {r.stderr.strip()[-600:]}")
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    peers = summary.get("peers", [])
    check(len(peers) == N, f"summary.json has the {N} peers ({len(peers)})")
    restarts = {p.get("peer"): p.get("restarts") for p in peers}
    check(restarts.get(VICTIM) == 1 and all(restarts.get(i) == 0 for i in range(N) if i != VICTIM),
          f"the replaced peer has 1 restart, the others none: {restarts}")
    check(summary.get("plots", {}).get("ok") is True, f"summary.json plots: {summary.get('plots')}")
    for png in ("accuracy.png", "loss.png", "bytes.png", "accuracy_bytes.png"):
        path = os.path.join(out, png)
        size = os.path.getsize(path) if os.path.exists(path) else 0
        with open(path, "rb") if size else open(os.devnull, "rb") as f:
            magic = f.read(8)
        check(size > 1000 and magic == b"\x89PNG\r\n\x1a\n", f"report/{png}: a PNG of {size} bytes")
    check(os.path.getsize(os.path.join(out, "table.txt")) > 0 and "peer" in r.stdout,
          "table.txt written and printed to the log")
finally:
    cleanup()

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
