"""examples/fashion_mnist_numpy.py: four NumPy peers average to within a point of the same model
trained alone on all the data, and one killed mid-run and started again catches up and rejoins.
Skips where Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)."""
import json
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist_numpy.py")
DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = "8"
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def run(*args):
    return subprocess.Popen([sys.executable, EXAMPLE, "--epochs", EPOCHS, *args],
                            stdout=subprocess.PIPE, text=True, env=ENV)


def read_until(proc, key):
    for line in proc.stdout:
        if not line.startswith("{"):
            print(line, end="")  # the peer's log (warnings)
            continue
        e = json.loads(line)
        if key in e:
            return e
    raise AssertionError("the example ended (exit code %s) without a %r line"
                         % (proc.wait(), key))


def test_four_numpy_peers_match_one_model_trained_on_all_the_data(tmp_path):
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST is not in %s (apt-get install dataset-fashion-mnist)" % DATA)
    alone = run("--alone")
    first = run("--shard", "0", "--num-shards", "4", "--min-peers", "4", "--linger", "10",
                "--metrics", str(tmp_path / "peer0" / "metrics.jsonl"))
    addr = read_until(first, "address")["address"]
    peers = [first] + [
        run("--shard", str(i), "--num-shards", "4", "--min-peers", "4", "--linger", "10",
            "--seeds", addr, "--metrics", str(tmp_path / ("peer%d" % i) / "metrics.jsonl"))
        for i in (1, 2, 3)]
    # Peer 3 crashes after its first epoch and is started again: it takes a live member's vector
    # and step count (--catch-up auto) and trains the rest of the run from there.
    read_until(peers[3], "epoch")
    peers[3].send_signal(signal.SIGKILL)
    peers[3].wait()
    peers[3] = run("--shard", "3", "--num-shards", "4", "--catch-up", "auto", "--linger", "10",
                   "--seeds", addr, "--metrics", str(tmp_path / "peer3" / "metrics.jsonl"))
    caught = read_until(peers[3], "caught_up")["caught_up"]
    assert caught and caught["ok"], caught
    assert caught["step"] > 0
    reference = read_until(alone, "final_test_acc")["final_test_acc"]
    results = [read_until(p, "final_test_acc") for p in peers]
    for p in peers + [alone]:
        assert p.wait(timeout=120) == 0
    print("alone: %.4f, peers: %s" % (reference, [round(r["final_test_acc"], 4) for r in results]))
    assert reference > 0.8
    assert results[3]["start_step"] == caught["step"] > 0
    for r in results:
        assert r["exchanges"]["averaging"] > 0, r
        assert r["final_test_acc"] >= reference - 0.01, (r, reference)
    # The run folder as gossip-launch --report reads it (GT_LAUNCH_BIN: the CTest entry sets it):
    # one run of four peers, peer 3 with two lives, summary.json and the plots.
    launch = os.environ.get("GT_LAUNCH_BIN")
    if launch:
        r = subprocess.run([launch, "--report", str(tmp_path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        summary = json.load(open(tmp_path / "summary.json"))
        print(open(tmp_path / "table.txt").read())
        assert summary["num_peers"] == 4, summary["peers"]
        assert abs(summary["final_test_acc_mean"] - results[0]["final_test_acc"]) < 0.01
        assert (tmp_path / "accuracy.png").exists()
