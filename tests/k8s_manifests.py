"""The Kubernetes manifests in deploy/k8s validate against the Kubernetes schemas (offline, with
kubernetes-validate from scripts/test/k8s-venv.sh) and agree with each other and with the image's
entrypoint. Run as  python3 tests/k8s_manifests.py REPO_ROOT VENV : without kubernetes-validate it
makes VENV with scripts/test/k8s-venv.sh (needs PyPI once) and runs itself there. Exit 77:
skipped."""
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
        r = subprocess.run([os.path.join(root, "scripts", "test", "k8s-venv.sh"), venv],
                           timeout=600, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        print("SKIP: scripts/test/k8s-venv.sh took over 600 s (no PyPI?)")
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

by_kind = {(name, d["kind"]): d for name, d in docs}
sts, svc = by_kind[("statefulset.yaml", "StatefulSet")], by_kind[("service.yaml", "Service")]
secret = by_kind[("make-secret.sh", "Secret")]
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
# The scale rule: a scale-down or a deleted StatefulSet keeps the claims, so the run goes on from
# its checkpoints at the next size or apply (GT_RUN_ID, not deletion, keeps old runs out).
check(sts["spec"].get("persistentVolumeClaimRetentionPolicy") ==
      {"whenScaled": "Retain", "whenDeleted": "Retain"},
      "the claims outlive a scale-down and the StatefulSet (persistentVolumeClaimRetentionPolicy)")
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

# The StatefulSet and the Job set a CPU limit: the peer sizes its BLAS pool to it (cgroup quota).
check(c.get("resources", {}).get("limits", {}).get("cpu") is not None,
      "statefulset.yaml: the container has a CPU limit")

# The indexed Job (job.yaml): a run that ends, each pod's shard from JOB_COMPLETION_INDEX.
job = by_kind[("job.yaml", "Job")]
jsvc, jpvc = by_kind[("job.yaml", "Service")], by_kind[("job.yaml", "PersistentVolumeClaim")]
js, jpod = job["spec"], job["spec"]["template"]["spec"]
jc = jpod["containers"][0]
jenv = {e["name"]: e.get("value") for e in jc.get("env", [])}
jports = {p["name"]: p["containerPort"] for p in jc["ports"]}
check(js.get("completionMode") == "Indexed" and
      str(js.get("completions")) == str(js.get("parallelism")) == jenv.get("GT_K8S_REPLICAS"),
      "job.yaml: Indexed, completions = parallelism = GT_K8S_REPLICAS")
check(jsvc["spec"].get("clusterIP") == "None" and jsvc["spec"].get("publishNotReadyAddresses"),
      "job.yaml: the Service is headless and publishes pods while they start")
check(jpod.get("subdomain") == jsvc["metadata"]["name"] == jenv.get("GT_K8S_SERVICE") and
      "hostname" not in jpod,
      "job.yaml: the pods' subdomain is the Service and GT_K8S_SERVICE (hostnames JOB-INDEX.SERVICE)")
jlabels = job["spec"]["template"]["metadata"]["labels"]
check(all(jlabels.get(k) == v for k, v in jsvc["spec"]["selector"].items()) and
      not all(jlabels.get(k) == v for k, v in sel.items()),
      "job.yaml: its Service selects the Job's pods, the StatefulSet's Service does not")
# Kubernetes refuses (beyond the schema) backoffLimitPerIndex and podFailurePolicy unless the pods'
# restartPolicy is Never, and backoffLimitPerIndex outside Indexed.
check(jpod.get("restartPolicy") == "Never" and js.get("backoffLimitPerIndex", 0) >= 1,
      "job.yaml: restartPolicy Never with backoffLimitPerIndex: a crashed pod is replaced")
rules = js.get("podFailurePolicy", {}).get("rules", [])
check(any(r["action"] == "FailIndex" and r.get("onExitCodes", {}).get("values") == [2] and
          r["onExitCodes"].get("containerName") == jc["name"] for r in rules),
      "job.yaml: exit code 2 (bad input) fails its index without retries")
jargs = jc["args"]
check("--linger" in jargs and 0 < int(jargs[jargs.index("--linger") + 1]) <= 600,
      "job.yaml: a finished peer lingers a bounded time, then exits 0 (the index completes)")
jmounts = {m["name"]: m["mountPath"] for m in jc["volumeMounts"]}
jvols = {v["name"]: v for v in jpod["volumes"]}
check(jmounts.get("state") == mounts.get("state") and
      jvols["state"].get("persistentVolumeClaim", {}).get("claimName") == jpvc["metadata"]["name"],
      "job.yaml: the shared claim holds the state folder (the entrypoint adds peerINDEX)")
check(jvols["network-key"] == vols["network-key"] and jenv.get("GT_NETWORK_KEY_FILE") == key_path,
      "job.yaml: the same network key Secret and path as the StatefulSet")
check(jports == ports and jenv.get("GT_PORT") == env.get("GT_PORT") and
      jenv.get("GT_METRICS_PORT") == env.get("GT_METRICS_PORT"),
      "job.yaml: the StatefulSet's ports")
check(jc.get("resources", {}).get("limits", {}).get("cpu") is not None,
      "job.yaml: the container has a CPU limit")
rep = by_kind[("report-job.yaml", "Job")]
rpod = rep["spec"]["template"]["spec"]
rc = rpod["containers"][0]
rmount = {m["name"]: m["mountPath"] for m in rc["volumeMounts"]}["state"]
check(rpod["volumes"][0]["persistentVolumeClaim"]["claimName"] == jpvc["metadata"]["name"] and
      f"gossip-launch --report {rmount} " in rc["command"][-1],
      "report-job.yaml: gossip-launch --report over the Job's claim")

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
