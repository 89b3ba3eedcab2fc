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


def test_gossip_launch_runs_the_numpy_example_as_its_peers(tmp_path):
    """`gossip-launch --peer-bin examples/fashion_mnist_numpy.py`: the launcher starts the script
    as it starts gossip-peer, with the run folder, ports, seeds, shards, keys and metrics files it
    gives gossip-peer (the script hands them to its Peer through gossiptrain.split_peer_args), and
    writes the run's summary.json from their metric lines (docs/python.md)."""
    launch = os.environ.get("GT_LAUNCH_BIN")
    if not launch:
        pytest.skip("GT_LAUNCH_BIN is not set (the CTest entry sets it to the built gossip-launch)")
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        pytest.skip("Fashion-MNIST is not in %s (apt-get install dataset-fashion-mnist)" % DATA)
    run_dir = tmp_path / "run"
    # The script's `#!/usr/bin/env python3` finds this venv's Python first.
    env = dict(ENV, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    # Robust mixing as by default: a NumPy step takes under a millisecond, so the peers train
    # alone for hundreds of steps from zero weights before their first exchange and find each
    # other beyond their own norms; before the warm-up's odd-one-out rule (docs/robustness.md) the
    # one with the smallest norm refused and banned both others in about 1 run of 4.
    r = subprocess.run([launch, "--peers", "3", "--out", str(run_dir), "--peer-bin", EXAMPLE,
                        "--no-plots", "--epochs", "2", "--lr", "0.5"],
                       capture_output=True, text=True, env=env, timeout=600)
    logs = "".join(open(run_dir / ("peer%d" % i) / "log.txt").read() for i in range(3)
                   if (run_dir / ("peer%d" % i) / "log.txt").exists())
    assert r.returncode == 0, r.stderr[-3000:] + logs[-3000:]
    summary = json.load(open(run_dir / "summary.json"))
    assert summary["num_peers"] == 3, summary
    assert summary["final_test_acc_mean"] > 0.8, summary
    for i in range(3):
        last = [json.loads(l) for l in open(run_dir / ("peer%d" % i) / "log.txt")
                if l.startswith("{")][-1]
        assert last["exchanges"]["averaging"] > 0, last  # they averaged with each other
        # checkpoint_dir reached the Peer, which wrote its checkpoint at close()
        assert (run_dir / ("peer%d" % i) / "ckpt" / "checkpoint.bin").exists()
