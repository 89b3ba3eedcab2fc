"""The Kubernetes manifests in deploy/k8s validate against the Kubernetes schemas (offline, with
kubernetes-validate from scripts/k8s-venv.sh) and agree with each other and with the image's
entrypoint. Run as  python3 tests/k8s_manifests.py REPO_ROOT VENV : without kubernetes-validate it
makes VENV with scripts/k8s-venv.sh (needs PyPI once) and runs itself there. Exit 77: skipped."""
import os
import subprocess
import sys

root, venv = sys.argv[1], sys.argv[2]
try:
    import kubernetes_validate
    import yaml
except ImportError as e:
    vpy = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv) or os.environ.get("GT_K8S_VENV_TRIED"):
        print(f"SKIP: kubernetes-validate cannot be imported in {venv} ({e})")
        sys.exit(77)
    try:
        r = subprocess.run([os.path.join(root, "scripts", "k8s-venv.sh"), venv], timeout=600,
                           capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print("SKIP: scripts/k8s-venv.sh took over 600 s (no PyPI?)")
        sys.exit(77)
    if r.returncode != 0:
        print(f"SKIP: kubernetes-validate could not be installed: {r.stderr.strip()[-500:]}")
        sys.exit(77)
    os.environ["GT_K8S_VENV_TRIED"] = "1"
    os.execv(vpy, [vpy] + sys.argv)

# The oldest release still supported in 2025 and the newest the package knows.
VERSIONS = ["1.30.0", "1.37.0"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


k8s = os.path.join(root, "deploy", "k8s")
docs = []
for name in sorted(os.listdir(k8s)):
    if name.endswith(".yaml"):
        with open(os.path.join(k8s, name)) as f:
            docs += [(name, d) for d in yaml.safe_load_all(f) if d]
secret_text = subprocess.run([os.path.join(k8s, "make-secret.sh")], check=True,
                             capture_output=True, text=True).stdout
docs.append(("make-secret.sh", yaml.safe_load(secret_text)))

for name, d in docs:
    for v in VERSIONS:
        try:
            kubernetes_validate.validate(d, v, strict=True)
            check(True, f"{name}: {d['kind']}/{d['metadata']['name']} validates against {v}")
        except kubernetes_validate.ValidationError as e:
            check(False, f"{name}: {d['kind']} against {v}: {e.message} at {list(e.path)}")

by_kind = {d["kind"]: d for _, d in docs}
sts, svc, secret = by_kind["StatefulSet"], by_kind["Service"], by_kind["Secret"]
pod = sts["spec"]["template"]["spec"]
c = pod["containers"][0]
env = {e["name"]: e.get("value") for e in c.get("env", [])}
ports = {p["name"]: p["containerPort"] for p in c["ports"]}

check(svc["spec"].get("clusterIP") == "None", "the Service is headless")
check(sts["spec"]["serviceName"] == svc["metadata"]["name"] == env.get("GT_K8S_SERVICE"),
      "serviceName, the Service and GT_K8S_SERVICE name the same Service")
check(env.get("GT_K8S_REPLICAS") == str(sts["spec"]["replicas"]),
      "GT_K8S_REPLICAS equals spec.replicas (the number of shards)")
check(str(ports["gossip"]) == env.get("GT_PORT") and str(ports["metrics"]) == env.get("GT_METRICS_PORT"),
      "the container ports are the entrypoint's GT_PORT and GT_METRICS_PORT")
sel = svc["spec"]["selector"]
labels = sts["spec"]["template"]["metadata"]["labels"]
check(all(labels.get(k) == v for k, v in sel.items()), "the Service selects the StatefulSet's pods")
for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
    g = c.get(probe, {}).get("httpGet", {})
    check(g.get("path") == path and g.get("port") in ("metrics", ports["metrics"]),
          f"{probe} asks {path} on the metrics port")
req = c.get("resources", {}).get("requests", {})
check("cpu" in req and "memory" in req, "the container requests cpu and memory")
mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
vols = {v["name"]: v for v in pod["volumes"]}
claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])]
check(mounts.get("state") == "/var/lib/gossiptrain" and "state" in claims,
      "a volume claim per pod holds the state folder (identity, checkpoints, metrics)")
key_vol = vols.get("network-key", {}).get("secret", {})
key_path = os.path.join(mounts.get("network-key", "?"), "network.key")
check(key_vol.get("secretName") == secret["metadata"]["name"] and key_vol.get("defaultMode") == 0o600,
      "the network key is the Secret, mounted with mode 0600")
check(key_path == env.get("GT_NETWORK_KEY_FILE"), "GT_NETWORK_KEY_FILE is the mounted key file")
key = secret["stringData"]["network.key"]
check(len(key) == 64 and all(ch in "0123456789abcdef" for ch in key),
      "make-secret.sh makes a 32-byte key in hex")
check(key != yaml.safe_load(subprocess.run([os.path.join(k8s, "make-secret.sh")], check=True,
                                            capture_output=True, text=True).stdout)
      ["stringData"]["network.key"], "make-secret.sh makes a fresh key each time")

# A manifest with a mistake is refused: the validation can fail.
bad = yaml.safe_load(yaml.safe_dump(sts))
bad["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecs"] = 5
try:
    kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    check(False, "a misspelt probe field is refused")
except kubernetes_validate.ValidationError:
    check(True, "a misspelt probe field is refused")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
