#!/usr/bin/env python3
"""gossiptrain.Peer against hivemind 1.1.12: the same PyTorch model, data and peers side by side.

    scripts/experiments/compare-hivemind.py --gossip-python /work/torch-venv/bin/python \\
        --hivemind-python /work/hivemind-venv/bin/python --peers 4 --target-acc 0.80

Each system runs N worker processes on loopback (this file, `worker` mode, in the venv named for
it: the two cannot share one, as hivemind pins its own dependencies). Every worker trains the same
MLP (784-128-10, SGD, batch 32) on its iid shard of Fashion-MNIST for --epochs passes over its
shard, and evaluates on the 10,000 test images every --eval-every steps. Only the averaging
differs:

- gossiptrain: the parameters flattened into one vector (gossiptrain.torch.flatten_parameters),
  `peer.step()` after every optimizer step (gossip-peer's step hook: pairwise encrypted exchanges
  in the background, a finished mix applied in place);
- hivemind: a DHT and a DecentralizedAverager over the parameters (its all-reduce in groups, the
  averager in its own process, libp2p through its p2pd daemon), `averager.step()` every
  --hivemind-every optimizer steps (blocking, as in hivemind's own examples), its result copied
  into the parameters.

Figures, per system: start-up (ready_s: process start until the peer, or the DHT and averager,
is up, after import and data loading; startup_s: until the first training step, after waiting
for every peer), peak memory of each worker's whole process tree (sampled every 1 s from
/proc/PID/smaps_rollup: the averager process and p2pd count for hivemind; RSS counts the pages
forked processes share once per process, PSS shares them out),
the time from the first worker's start until every worker's evaluation reached --target-acc, and
the final accuracies. Prints one JSON object; --out also writes it to a file.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"


# ----------------------------------------------------------------------------------- the worker
def load_idx(path):
    import numpy
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return numpy.frombuffer(raw, numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def worker(a):
    t_start = time.monotonic()
    import numpy
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(1)  # the same initial model in every worker, as hivemind's examples assume
    x = load_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).reshape(60000, 784)
    y = load_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(numpy.int64)
    order = numpy.random.default_rng(0).permutation(len(y))[a.shard::a.peers]
    x = torch.from_numpy(x[order].astype(numpy.float32) / 255)
    y = torch.from_numpy(y[order])
    xt = torch.from_numpy(load_idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz"))
                          .reshape(10000, 784).astype(numpy.float32) / 255)
    yt = torch.from_numpy(load_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz"))
                          .astype(numpy.int64))
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

    def emit(**kw):
        kw["t"] = time.monotonic() - t_start
        print(json.dumps(kw), flush=True)

    if a.system == "gossip":
        import gossiptrain
        import gossiptrain.torch
        flat = gossiptrain.torch.flatten_parameters(model)
        opts = dict(listen="127.0.0.1:%d" % a.port, min_peers=a.peers, log_level="warn")
        if a.seeds:
            opts["seeds"] = a.seeds
        peer = gossiptrain.Peer(flat, **opts)
        emit(event="ready")
        peer.join()

        def after_step(step):
            peer.step()

        def stats():
            return peer.stats()

        def close():
            end = time.monotonic() + 2.0  # answer the others' last exchanges
            while time.monotonic() < end:
                peer.step()
                time.sleep(0.01)
            peer.close()
    else:
        import hivemind
        from hivemind.averaging import DecentralizedAverager
        from hivemind.utils import get_dht_time
        dht = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/%d" % a.port],
                           initial_peers=[s for s in a.seeds.split(",") if s])
        if a.shard == 0:
            emit(maddrs=[str(m) for m in dht.get_visible_maddrs()])
        tensors = [p.detach() for p in model.parameters()]
        averager = DecentralizedAverager(tensors, dht, prefix="compare", start=True,
                                         target_group_size=a.peers, min_matchmaking_time=2.0,
                                         request_timeout=1.0)
        emit(event="ready")
        # Wait for every peer, as gossiptrain's min_peers does: the first averaging steps would
        # otherwise run in smaller groups.
        # A barrier through the DHT: each worker stores a subkey of one key and waits until it
        # holds all of them.
        dht.store("compare_ready", subkey=a.shard, value=True,
                  expiration_time=get_dht_time() + 600)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = dht.get("compare_ready", latest=True)
            if found is not None and len(found.value) >= a.peers:
                break
            time.sleep(0.2)
        rounds = {"ok": 0, "failed": 0}

        def after_step(step):
            if (step + 1) % a.hivemind_every:
                return
            try:
                gathered = averager.step(timeout=a.hivemind_timeout)
            except Exception:
                gathered = None
            if gathered is None:
                rounds["failed"] += 1
                return
            rounds["ok"] += 1
            with averager.get_tensors() as averaged, torch.no_grad():
                for p, t in zip(model.parameters(), averaged):
                    if p.data_ptr() != t.data_ptr():
                        p.copy_(t)

        def stats():
            return rounds

        def close():
            averager.shutdown()
            dht.shutdown()

    emit(event="started")
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    g = torch.Generator().manual_seed(a.shard)
    step = 0
    for epoch in range(a.epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y) - a.batch + 1, a.batch):
            idx = perm[i:i + a.batch]
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            after_step(step)
            step += 1
            if step % a.eval_every == 0:
                with torch.no_grad():
                    acc = float((model(xt).argmax(1) == yt).float().mean())
                emit(event="eval", step=step, acc=acc)
    with torch.no_grad():
        acc = float((model(xt).argmax(1) == yt).float().mean())
    emit(event="done", step=step, acc=acc, stats=stats())
    close()



# ----------------------------------------------------------------------------------- the driver
def tree_memory_kib(pid):
    """(RSS, PSS) of pid and all its descendants, KiB (0 when gone). RSS counts pages that forked
    processes share once per process; PSS shares them out, so its sum is what the tree costs."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    rss, pss, todo = 0, 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_system(a, system, python):
    ports = [free_port() for _ in range(a.peers)]
    common = [python, os.path.abspath(__file__), "worker", "--system", system, "--peers",
              str(a.peers), "--epochs", str(a.epochs), "--lr", str(a.lr), "--batch", str(a.batch),
              "--eval-every", str(a.eval_every), "--data", a.data,
              "--hivemind-every", str(a.hivemind_every),
              "--hivemind-timeout", str(a.hivemind_timeout)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs, lines = [], [[] for _ in range(a.peers)]
    t0 = time.monotonic()
    first = subprocess.Popen(common + ["--shard", "0", "--port", str(ports[0])],
                             stdout=subprocess.PIPE, text=True, env=env)
    procs.append(first)
    if system == "gossip":
        seeds = "127.0.0.1:%d" % ports[0]
    else:
        line = json.loads(first.stdout.readline())  # the first DHT's multiaddress
        lines[0].append(line)
        seeds = line["maddrs"][0]
    for i in range(1, a.peers):
        procs.append(subprocess.Popen(common + ["--shard", str(i), "--port", str(ports[i]),
                                                "--seeds", seeds],
                                      stdout=subprocess.PIPE, text=True, env=env))
    import selectors
    sel = selectors.DefaultSelector()
    for i, p in enumerate(procs):
        os.set_blocking(p.stdout.fileno(), False)
        sel.register(p.stdout, selectors.EVENT_READ, i)
    peak = [0] * a.peers
    peak_pss = [0] * a.peers
    bufs = [""] * a.peers
    open_ = a.peers
    last_sample = 0.0
    while open_:
        for key, _ in sel.select(timeout=0.2):
            i = key.data
            chunk = key.fileobj.read()
            if not chunk:
                sel.unregister(key.fileobj)
                open_ -= 1
                continue
            bufs[i] += chunk
            while "\n" in bufs[i]:
                line, bufs[i] = bufs[i].split("\n", 1)
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                rec["wall"] = time.monotonic() - t0
                lines[i].append(rec)
        if time.monotonic() - last_sample >= 1.0:
            last_sample = time.monotonic()
            for i, p in enumerate(procs):
                if p.poll() is None:
                    rss, pss = tree_memory_kib(p.pid)
                    peak[i] = max(peak[i], rss)
                    peak_pss[i] = max(peak_pss[i], pss)
        if time.monotonic() - t0 > a.timeout:
            for p in procs:
                p.kill()
            break
    codes = [p.wait() for p in procs]
    ready = [next((round(r["t"], 2) for r in l if r.get("event") == "ready"), None) for l in lines]
    starts = [next((r["t"] for r in l if r.get("event") == "started"), None) for l in lines]
    # Time to target: the first wall time by which every worker has evaluated >= target.
    reached = []
    for l in lines:
        t = next((r["wall"] for r in l if r.get("event") in ("eval", "done")
                  and r["acc"] >= a.target_acc), None)
        reached.append(t)
    done = [next((r for r in l if r.get("event") == "done"), None) for l in lines]
    return {
        "system": system,
        "python": python,
        "exit_codes": codes,
        "startup_s": [s and round(s, 2) for s in starts],
        "ready_s": ready,
        "peak_rss_mib_per_peer": [round(k / 1024, 1) for k in peak],
        "peak_pss_mib_per_peer": [round(k / 1024, 1) for k in peak_pss],
        "time_to_target_s": None if None in reached else max(reached),
        "target_acc": a.target_acc,
        "final_acc": [d and round(d["acc"], 4) for d in done],
        "steps": [d and d["step"] for d in done],
        "train_s": [d and round(d["t"] - s, 1) if s is not None else None
                    for d, s in zip(done, starts)],
        "averaging": [d and d["stats"] for d in done],
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="compare", choices=["compare", "worker"])
    ap.add_argument("--gossip-python", default=sys.executable,
                    help="a Python with torch and gossiptrain installed")
    ap.add_argument("--hivemind-python", help="a Python with hivemind 1.1.12 (and so torch)")
    ap.add_argument("--systems", default="gossip,hivemind")
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2, help="passes over each worker's shard")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--target-acc", type=float, default=0.80)
    ap.add_argument("--hivemind-every", type=int, default=10,
                    help="optimizer steps between two averager.step() calls")
    ap.add_argument("--hivemind-timeout", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=900, help="per system, seconds")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--out")
    # worker only
    ap.add_argument("--system", choices=["gossip", "hivemind"])
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seeds", default="")
    a = ap.parse_args()
    if a.mode == "worker":
        return worker(a)
    result = {"command": " ".join(sys.argv), "load_before": os.getloadavg(),
              "cpus": os.cpu_count(), "runs": []}
    for system in a.systems.split(","):
        python = a.gossip_python if system == "gossip" else a.hivemind_python
        if not python:
            sys.exit("compare-hivemind: --%s-python is needed" % system)
        result["runs"].append(run_system(a, system, python))
        result["runs"][-1]["load_after"] = os.getloadavg()
        print(json.dumps(result["runs"][-1]), file=sys.stderr, flush=True)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
