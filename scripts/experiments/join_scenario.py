#!/usr/bin/env python3
"""Issue 27's scenario 1, measured: peer A trains alone on a long run; B trains --beside-epochs
epochs beside it without gossip (the same load: A's baseline, and B's epoch "alone"), then B joins
A through --seeds with one epoch. With --pin, A and B each get a core of their own, as on two
machines: what is left of A's slowdown is then the protocol's, not the sharing of the cores.
Prints, per phase, A's median epoch time and where A's time went (--max-lag waits, from A's
`waits` lines where the build writes them), B's epoch, both accuracies, bans and refusals.

  scripts/experiments/join_scenario.py --bin build/apps [--data synthetic] [--flags '--max-lag-share off'] [--pin]
"""
import argparse, os, shlex, signal, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plot"))
from run_metrics import read_jsonl as lines  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def evals(path):
    return [j for j in lines(path) if j.get("event") == "eval" and not j.get("final")]


def epochs_between(path, t0, t1):
    """A's epoch durations (s) whose end falls in [t0, t1] of A's clock."""
    out, prev = [], None
    for e in evals(path):
        if prev is not None and t0 <= e["t"] <= t1:
            out.append(e["t"] - prev)
        prev = e["t"]
    return out


def waits_at(path, t):
    """A's cumulative (lag waits, lag wait s, deferred) at its clock t (the last waits line)."""
    w = None
    for j in lines(path):
        if j.get("event") == "waits" and j["t"] <= t:
            w = j
    return (w["lag_waits"], w["lag_wait_s"], w.get("lag_deferred", 0), w.get("hook_s", 0)) if w else None


def thread_cpu(pid):
    """{thread name: CPU seconds (user + system)} of a process, summed by name."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
            except OSError:
                continue
            name = st[st.index("(") + 1:st.rindex(")")]
            f = st[st.rindex(")") + 2:].split()
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / tick
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", default="synthetic")
    ap.add_argument("--model", default="mlp:784-64-10")
    ap.add_argument("--alone-s", type=float, default=8.0)
    ap.add_argument("--after-s", type=float, default=3.0)
    ap.add_argument("--catch-up", default="auto")
    ap.add_argument("--flags", default="", help="more flags for both peers")
    ap.add_argument("--beside-epochs", type=int, default=3,
                    help="epochs B trains alone beside A (without gossip): A's epochs meanwhile "
                         "are A's baseline under the same load; B's epoch alone is their mean")
    ap.add_argument("--pin", action="store_true",
                    help="A on CPU 0, B on CPU 1 (two machines' worth of cores on one): what is "
                         "left of A's slowdown is the protocol's, not the cores' sharing")
    a = ap.parse_args()
    peer = os.path.join(a.bin, "gossip-peer")
    d = tempfile.mkdtemp(prefix="robust2-join-")
    with open(os.path.join(d, "net.key"), "w") as f:
        f.write("0123456789abcdef" * 4 + "\n")
    ports = [free_port(), free_port()]
    common = ["--data", a.data, "--backend", "cpu", "--model", a.model, "--lr", "0.01", "--seed",
              "3", "--log-level", "info", "--net-nice", "0", "--train-nice", "5"]
    common += shlex.split(a.flags)

    def argv(i, gossip, more):
        pd = os.path.join(d, f"peer{i}")
        os.makedirs(pd, exist_ok=True)
        v = [peer, "--num-shards", "2", "--shard", str(i), "--metrics", pd + "/metrics.jsonl",
             "--checkpoint-dir", pd + "/ckpt"]
        if gossip:
            v += ["--listen", f"127.0.0.1:{ports[i]}", "--identity", pd + "/identity.key",
                  "--network-key", os.path.join(d, "net.key")]
            if i:
                v += ["--seeds", f"127.0.0.1:{ports[0]}"]
        return v + common + more

    def start(i, gossip, more):
        v = argv(i, gossip, more)
        log = open(os.path.join(d, f"peer{i}", "log.txt"), "w")
        pin = (lambda: os.sched_setaffinity(0, {i})) if a.pin else None
        return subprocess.Popen(v, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)

    ma, mb = os.path.join(d, "peer0/metrics.jsonl"), os.path.join(d, "peer1/metrics.jsonl")
    A = start(0, True, ["--epochs", "100000"])
    t_start = time.time()
    at = lambda: time.time() - t_start  # ~A's clock (A's t starts a little later)
    while not evals(ma) or evals(ma)[-1]["t"] < a.alone_s:
        if A.poll() is not None:
            sys.exit(f"A exited ({A.returncode}) before its first {a.alone_s} s: "
                     + open(os.path.join(d, "peer0", "log.txt")).read()[-2000:])
        time.sleep(0.2)
    p0 = at()
    cpu = [thread_cpu(A.pid)]
    B = start(1, False, ["--epochs", str(a.beside_epochs)])
    B.wait()
    p1 = at()
    cpu.append(thread_cpu(A.pid))
    b_alone = [j for j in lines(mb) if j.get("event") == "done"][0]["seconds"] / a.beside_epochs
    os.rename(os.path.join(d, "peer1"), os.path.join(d, "peer1-alone"))
    B = start(1, True, ["--epochs", "1", "--catch-up", a.catch_up, "--linger", "3"])
    B.wait()
    p2 = at()
    cpu.append(thread_cpu(A.pid))
    time.sleep(a.after_s)
    cpu.append(thread_cpu(A.pid))
    A.send_signal(signal.SIGTERM)
    A.wait()
    p3 = at()
    done = [j for j in lines(mb) if j.get("event") == "done"][0]
    after = [e["test_acc"] for e in evals(ma) if e["t"] >= p2]
    a_acc = statistics.median(after) if after else float("nan")
    # A's clock starts when its process starts its metrics, a little after t_start: use its own t.
    off = 0.0
    ph = [("A alone", 0, p0), ("B alone beside A", p0, p1), ("B joined", p1, p2),
          ("after B", p2, p3)]
    print(f"dir {d}; load {os.getloadavg()[0]:.1f}")
    cpu.insert(0, {})
    for k, (name, t0, t1) in enumerate(ph):
        ep = epochs_between(ma, t0 - off, t1 - off)
        w0, w1 = waits_at(ma, t0), waits_at(ma, t1)
        ws = ""
        if w0 and w1:
            ws = (f"; --max-lag waits {w1[0]-w0[0]} ({w1[1]-w0[1]:.2f} s of {t1-t0:.1f} s), "
                  f"deferred by the budget {w1[2]-w0[2]}; in the exchange hook {w1[3]-w0[3]:.2f} s")
        med = statistics.median(ep) if ep else float("nan")
        print(f"{name:18s} {t1-t0:6.1f} s: A's epochs {len(ep)}, median {med:.3f} s{ws}")
        c0, c1 = cpu[k], cpu[k + 1]
        if k > 0:  # A's CPU seconds by thread in this phase, per epoch of A
            n = max(len(ep), 1)
            busy = {t: c1.get(t, 0) - c0.get(t, 0) for t in c1}
            busy = {t: v for t, v in busy.items() if v > 0.005}
            print("    A's CPU by thread (s per epoch): " +
                  ", ".join(f"{t} {v / n:.3f}" for t, v in sorted(busy.items())))
    alog = open(os.path.join(d, "peer0/log.txt")).read()
    blog = open(os.path.join(d, "peer1/log.txt")).read()
    for who, log in (("A", alog), ("B", blog)):
        for ln in log.splitlines():
            if "exchanges:" in ln and "training waited" in ln:
                print(f"{who}: {ln.split('] ')[-1]}")
    bans = sum(1 for m in (ma, mb) for j in lines(m) if j.get("event") == "ban")
    anom = sum(1 for m in (ma, mb) for j in lines(m)
               if j.get("event") == "exchange" and "anomalous" in str(j.get("reason")))
    print(f"B: epoch {done['seconds']:.2f} s joined vs {b_alone:.2f} s alone "
          f"(x{done['seconds']/b_alone:.2f}); B ends {done['final_test_acc']:.4f}, "
          f"A {a_acc:.4f}; bans {bans}, anomalous refusals {anom}")


if __name__ == "__main__":
    sys.exit(main())
