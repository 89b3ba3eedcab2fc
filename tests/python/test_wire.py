"""Wire compatibility: two Python peers and two gossip-peer processes of the same model average
together (GT_PEER_BIN names the gossip-peer program; the test skips without it)."""
import json
import os
import re
import shutil
import subprocess
import threading
import time

import numpy
import pytest

import gossiptrain

SPEC = "mlp:784-16-10"  # 12,730 parameters


def listen_address(proc):
    """The address gossip-peer logs ("peer ID listening on HOST:PORT"); then its log is drained
    by a thread, so that a full pipe never blocks it."""
    for line in proc.stdout:
        m = re.search(r"listening on (\S+)", line)
        if m:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return m.group(1)
    raise AssertionError("gossip-peer ended (exit code %s) without its address" % proc.wait())


def exchanges(metrics_path):
    out = []
    with open(metrics_path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "exchange" and e.get("ok"):
                out.append(e)
    return out


def wait_for(path, proc, timeout_s):
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, "gossip-peer ended early (exit code %s)" % proc.returncode
        assert time.monotonic() < end, "no %s after %d s" % (path, timeout_s)
        time.sleep(0.1)


def test_two_python_peers_and_two_gossip_peers_average_together(tmp_path):
    peer_bin = os.environ.get("GT_PEER_BIN")
    if not peer_bin:
        pytest.skip("GT_PEER_BIN is not set (the CTest entry sets it to the built gossip-peer)")
    # Two gossip-peer processes train the model on two shards from one initial state (--seed 1),
    # then serve 15 s of exchanges without training (--linger): the four vectors mix with nothing
    # else moving them.
    procs, dirs = [], []
    addr = None
    for i in range(2):
        d = tmp_path / ("g%d" % i)
        d.mkdir()
        dirs.append(d)
        procs.append(subprocess.Popen(
            [peer_bin, "--data", "synthetic", "--model", SPEC, "--epochs", "2", "--linger", "15",
             "--num-shards", "2", "--shard", str(i), "--min-peers", "2",
             "--listen", "127.0.0.1:0", "--identity", str(d / "id.key"),
             "--checkpoint-dir", str(d), "--metrics", str(d / "m.jsonl")]
            + (["--seeds", addr] if addr else []),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        if i == 0:
            addr = listen_address(procs[0])
        else:
            threading.Thread(target=procs[1].stdout.read, daemon=True).start()
    # The Python peers start where the swarm is: gossip-peer 0's checkpoint after its first
    # epoch, read through checkpoint_dir (robust mixing refuses a partner as far away as a
    # vector of zeros or another initialization: docs/robustness.md).
    wait_for(dirs[0] / "checkpoint.bin", procs[0], 120)
    xs, peers = [], []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        shutil.copy(dirs[0] / "checkpoint.bin", d / "checkpoint.bin")
        x = numpy.zeros(12730, numpy.float32)
        peers.append(gossiptrain.Peer(x, model=SPEC, log_level="warn", seeds=[addr],
                                      checkpoint_dir=str(d), metrics=str(d / "m.jsonl")))
        assert peers[-1].resumed
        xs.append(x)
    deadline = time.monotonic() + 120
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        for p in peers:
            p.step()
        time.sleep(0.002)
    ids = {p.peer_id for p in peers}
    for p in peers:
        p.close()
    for p in procs:
        if p.poll() is None:
            p.kill()
        assert p.wait() == 0, "gossip-peer failed"
    g_ids = set()
    for d in dirs:
        with_python = [e for e in exchanges(d / "m.jsonl") if e["partner"] in ids]
        assert with_python, "%s: gossip-peer never averaged with a Python peer" % d.name
        g_ids.add(json.loads(open(d / "m.jsonl").readlines()[-1])["peer"])
    for name in ("a", "b"):
        partners = {e["partner"] for e in exchanges(tmp_path / name / "m.jsonl")}
        assert partners & g_ids, "Python peer %s never averaged with a gossip-peer" % name
    # Each Python vector (it never trains: only mixes move it) now lies near gossip-peer 0's
    # final one, read from its last checkpoint.
    g0 = numpy.zeros(12730, numpy.float32)
    with gossiptrain.Peer(g0, model=SPEC, log_level="warn", checkpoint_dir=str(dirs[0])) as c:
        assert c.resumed
    for x in xs:
        print("||x - g0|| = %.4g, ||g0|| = %.4g" % (numpy.linalg.norm(x - g0), numpy.linalg.norm(g0)))
        assert numpy.linalg.norm(x - g0) < 0.1 * numpy.linalg.norm(g0)
