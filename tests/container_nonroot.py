"""A non-root container reads the swarm's key from a read-only mount, as a Kubernetes pod with
fsGroup gets its secret (mode 0640, group = the pod's group: kubernetes#57923): the image's
entrypoint as pod gossip-0 of a one-replica StatefulSet (--cluster k8s), run as uid 1000 / gid
1000, trains with the key 0640 root:1000 on a read-only bind mount, and refuses (exit 2, saying
why) the same key readable by others (0644), and a group-readable key on a writable mount.

    python3 tests/container_nonroot.py REPO_ROOT BUILD_DIR

The image is built from BUILD_DIR by deploy/container/build-image.sh under a name of this run and
removed at the end; the base image is kept and reused. Exit 77: skipped, with the reason."""
import functools
import os
import shutil
import sys
import tempfile

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             "scripts", d) for d in ("test", "plot")]  # container_lib, run_metrics
import container_lib  # noqa: E402

ROOT, BUILD = sys.argv[1], sys.argv[2]
TAG = f"gt-nonroot-{os.getpid()}"
IMAGE = f"localhost/{TAG}:test"
BASE = os.environ.get("GT_IMAGE_BASE", "localhost/gossiptrain-base:bookworm")
RUN = container_lib.RUN
UID = GID = 1000
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


skip = container_lib.skip


podman = functools.partial(container_lib.podman, check_rc=True)

base_present = container_lib.preflight(BUILD, BASE, ("gossip-peer",))

tmp = tempfile.mkdtemp(prefix=f"{TAG}-")
os.chmod(tmp, 0o755)
built = False


def cleanup():
    left = podman("ps", "-a", "--filter", f"name={TAG}", "--format", "{{.Names}}", check_rc=False)
    for c in left.stdout.split():
        podman("rm", "-f", "-v", "-t", "0", c, check_rc=False)
    if built:
        podman("rmi", "-f", IMAGE, check_rc=False)
    shutil.rmtree(tmp, ignore_errors=True)


def build_image():
    global built
    built = True
    failed = container_lib.build_image(ROOT, BUILD, IMAGE, BASE, base_present)
    if failed:
        check(False, failed)
        raise SystemExit(1)


def key_file(name, mode, gid):
    """A key in its own folder (bind-mounted alone), owned by root:gid with mode."""
    d = os.path.join(tmp, name)
    os.mkdir(d)
    os.chmod(d, 0o755)
    k = os.path.join(d, "network.key")
    with open(k, "w") as f:
        f.write(os.urandom(32).hex())
    os.chown(k, 0, gid)
    os.chmod(k, mode)
    return d


def state_dir(name):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    os.chown(d, UID, GID)
    return d


def peer(name, keydir, ro):
    """The image's entrypoint as a one-replica StatefulSet's pod gossip-0 (--cluster k8s, where
    the key's mode is checked), run as uid/gid 1000, alone, one short epoch; (exit code, output,
    state folder)."""
    st = state_dir(f"state-{name}")
    env = {"GT_K8S_SERVICE": "gt", "GT_K8S_REPLICAS": "1", "GT_K8S_SEEDS": "1",
           "GT_STATE_DIR": "/state", "GT_METRICS_PORT": "0",
           "GT_NETWORK_KEY_FILE": "/etc/gossiptrain/network.key"}
    args = ["run", "--name", f"{TAG}-{name}", *RUN, "--network", "none", "--hostname", "gossip-0",
            "--add-host", "gossip-0.gt:127.0.0.1", "--user", f"{UID}:{GID}",
            "-v", f"{keydir}:/etc/gossiptrain{':ro' if ro else ''}", "-v", f"{st}:/state"]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    args += [IMAGE, "--data", "synthetic", "--epochs", "1", "--model", "mlp:784-64-10",
             "--linger", "0"]
    r = container_lib.podman(*args, timeout=180)
    podman("rm", "-f", "-v", "-t", "0", f"{TAG}-{name}", check_rc=False)
    return r.returncode, (r.stdout + r.stderr), st


def last(out):
    lines = out.strip().splitlines()
    return lines[-1] if lines else "(no output)"


try:
    build_image()

    code, out, st = peer("group-ro", key_file("k640", 0o640, GID), ro=True)
    print(last(out))
    check(code == 0, f"uid {UID} with a 0640 key of group {GID} on a read-only mount: exit {code}")
    check(os.path.exists(os.path.join(st, "checkpoint")) and
          "\"event\":\"done\"" in open(os.path.join(st, "metrics.jsonl")).read(),
          "it trained as that user: its checkpoint and its done line are in the state folder")

    code, out, _ = peer("world", key_file("k644", 0o644, GID), ro=True)
    check(code == 2 and "may be read by others" in out,
          f"a 0644 key (others may read it) is refused: exit {code}: {last(out)}")

    code, out, _ = peer("group-rw", key_file("k640rw", 0o640, GID), ro=False)
    check(code == 2 and "may be read by its group" in out,
          f"the 0640 key on a writable mount is refused: exit {code}: {last(out)}")
finally:
    cleanup()

print("container_nonroot: " + ("all checks passed" if not failures else f"{len(failures)} FAILED"))
sys.exit(1 if failures else 0)
