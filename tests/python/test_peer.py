"""The Python package's peer: three processes reach the mean in place, bad buffers and options
are clear exceptions with gossip-peer's messages, a buffer cannot change under a pending mix."""
import array
import json
import os
import subprocess
import sys

import numpy
import pytest

import gossiptrain

HERE = os.path.dirname(os.path.abspath(__file__))


def start(*args):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "consensus_peer.py"), *args],
                            stdout=subprocess.PIPE, text=True)


def first_line(proc):
    """The next JSON line the process prints (its address, then its result)."""
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("the peer process ended (exit code %s) without its line" % proc.wait())


def test_three_processes_average_to_the_mean_in_place():
    # The check: 10,000 float32 values at 1.0, 1.1 and 1.2, joined through the first
    # one's address, step() every 2 ms for 30 s: every value within 0.01 of 1.1, in place.
    first = start("1.0", "30")
    addr = first_line(first)["address"]
    others = [start(v, "30", "--seed", addr) for v in ("1.1", "1.2")]
    for p in others:
        first_line(p)
    results = []
    for p in [first] + others:
        results.append(first_line(p))
        assert p.wait(timeout=60) == 0
    print("three peers ended with", results)
    for r in results:
        assert r["same_memory"], r
        assert r["averaging"] > 0, r
        assert abs(r["min"] - 1.1) <= 0.01 and abs(r["max"] - 1.1) <= 0.01, r


@pytest.fixture
def peer_of():
    made = []

    def make(buf, **opts):
        p = gossiptrain.Peer(buf, log_level="warn", **opts)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_address_resolves_port_zero(peer_of):
    p = peer_of(numpy.zeros(10, numpy.float32))
    host, port = p.address.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0


def test_wrong_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="must be float32, not float64"):
        gossiptrain.Peer(numpy.zeros(10))


def test_wrong_shape_is_a_value_error():
    with pytest.raises(ValueError, match=r"one-dimensional, not of shape \(4, 5\)"):
        gossiptrain.Peer(numpy.zeros((4, 5), numpy.float32))
    with pytest.raises(gossiptrain.UsageError, match="the buffer is empty"):
        gossiptrain.Peer(numpy.zeros(0, numpy.float32))


def test_non_contiguous_and_read_only_are_refused():
    x = numpy.zeros(20, numpy.float32)
    with pytest.raises(ValueError, match="not contiguous"):
        gossiptrain.Peer(x[::2])
    x.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gossiptrain.Peer(x)
    with pytest.raises(TypeError, match="not str"):
        gossiptrain.Peer("abc")


def test_options_are_gossip_peers_with_its_messages():
    x = numpy.zeros(10, numpy.float32)
    with pytest.raises(gossiptrain.UsageError, match="--gossip-every") as e:
        gossiptrain.Peer(x, gossip_every=0)
    peer_bin = os.environ.get("GT_PEER_BIN")
    if peer_bin:  # the same message as gossip-peer's
        r = subprocess.run([peer_bin, "--gossip-every", "0"], capture_output=True, text=True)
        assert r.returncode == 2
        assert str(e.value) in r.stderr
    with pytest.raises(gossiptrain.UsageError, match="unknown flag '--no-such-option'"):
        gossiptrain.Peer(x, no_such_option=1)
    with pytest.raises(gossiptrain.UsageError, match="--epochs is a gossip-peer training flag"):
        gossiptrain.Peer(x, epochs=3)
    with pytest.raises(gossiptrain.UsageError, match="wildcard address"):
        gossiptrain.Peer(x, listen="0.0.0.0:0")
    with pytest.raises(gossiptrain.UsageError, match="has 7850 parameters; the buffer holds 10"):
        gossiptrain.Peer(x, model="mlp:784-10")
    with pytest.raises(gossiptrain.ConfigError):
        gossiptrain.Peer(x, network_key="/nonexistent/net.key")
    assert "gossip_every" in gossiptrain.peer_options()


def test_a_buffer_in_use_cannot_be_resized_or_freed(peer_of):
    a = array.array("f", [0.5] * 100)
    p = peer_of(a)
    with pytest.raises(BufferError):
        a.append(1.0)  # the peer holds an export of its memory: resizing is refused
    x = numpy.zeros(100, numpy.float32)
    q = peer_of(x)
    with pytest.raises(ValueError):
        x.resize(200)  # NumPy refuses to resize an array the peer references
    del x  # the peer keeps the array alive: a mix still has its memory to go to
    q.step()
    p.step()
    assert q.buffer.shape == (100,)


def test_closed_peer_refuses_steps():
    p = gossiptrain.Peer(numpy.zeros(10, numpy.float32), log_level="warn")
    with p:
        p.step()
    assert p.closed
    with pytest.raises(RuntimeError, match="closed"):
        p.step()


def test_torch_tensors_are_checked():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    with pytest.raises(TypeError, match="torch.float32"):
        gossiptrain.Peer(torch.zeros(10, dtype=torch.float64))
    with pytest.raises(ValueError, match="not contiguous"):
        gossiptrain.Peer(torch.zeros(20)[::2])
    with pytest.raises(ValueError, match="staged=True is for torch tensors"):
        gossiptrain.Peer(numpy.zeros(10, numpy.float32), staged=True)
    t = torch.full((100,), 2.0)
    with gossiptrain.Peer(t, log_level="warn") as p:
        p.step()
        t.resize_(100000)  # new storage: the peer's pending mix must not go to the old one
        with pytest.raises(RuntimeError, match="resized or its storage replaced"):
            p.step()


def test_staged_tensors_average_through_their_host_copies(tmp_path):
    # A tensor on a GPU is averaged through a host copy (staged); staged=True takes that path for
    # CPU tensors, which is how it runs where there is no GPU. Two peers, at 1.0 and 2.0: the
    # tensors themselves (not the host copies) reach 1.5, and the last checkpoint holds what the
    # tensor held at close(), not the host copy of the last step.
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        a = torch.full((1000,), 1.0, device=device)
        b = torch.full((1000,), 2.0, device=device)
        ckpt = tmp_path / ("ckpt-" + device)
        pa = gossiptrain.Peer(a, staged=True, log_level="warn", checkpoint_dir=str(ckpt))
        pb = gossiptrain.Peer(b, staged=True, log_level="warn", seeds=[pa.address],
                              min_peers=2)
        assert pa._host is not None and pa._host.data_ptr() != a.data_ptr()
        import time
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
                (a - 1.5).abs().max().item() > 1e-3 or (b - 1.5).abs().max().item() > 1e-3):
            pa.step()
            pb.step()
            time.sleep(0.002)
        assert (a - 1.5).abs().max().item() <= 1e-3, (device, a[:3])
        assert (b - 1.5).abs().max().item() <= 1e-3, (device, b[:3])
        assert pa.stats()["ok"] > 0
        a.fill_(7.0)  # changed by the caller after its last step
        pa.close()
        pb.close()
        resumed = torch.zeros(1000, device=device)
        with gossiptrain.Peer(resumed, staged=True, log_level="warn",
                              checkpoint_dir=str(ckpt)) as p:
            assert p.resumed
            assert resumed.min().item() == 7.0 and resumed.max().item() == 7.0


def test_ctrl_c_leaves_the_swarm_cleanly(tmp_path):
    # A process interrupted in its training loop leaves through the `with`: the other peer
    # learns it as `left` (a goodbye), not `suspect`/`dead` after probe timeouts.
    import signal
    import time

    observer_metrics = tmp_path / "observer.jsonl"
    observer = gossiptrain.Peer(numpy.ones(100, numpy.float32), log_level="warn",
                                metrics=str(observer_metrics))
    try:
        leaver = start("1.0", "60", "--seed", observer.address, "--n", "100")
        first_line(leaver)
        joined_by = time.monotonic() + 20
        while observer.members == 0 and time.monotonic() < joined_by:
            observer.step()
            time.sleep(0.01)
        assert observer.members == 1
        leaver.send_signal(signal.SIGINT)
        assert leaver.wait(timeout=20) != 0  # KeyboardInterrupt
        left_by = time.monotonic() + 10
        while observer.members > 0 and time.monotonic() < left_by:
            observer.step()
            time.sleep(0.01)
        states = [json.loads(l).get("state") for l in open(observer_metrics)
                  if '"member"' in l]
        assert "left" in states, states
        assert "dead" not in states and "suspect" not in states, states
    finally:
        observer.close()


def test_split_peer_args_parts_gossip_launchs_words():
    """What gossip-launch --peer-bin SCRIPT passes a script, split into Peer options, the rest
    (training flags, for the script) and the dropped placement flags."""
    argv = ["--net-nice", "0", "--train-nice", "5", "--net-cores", "0", "--min-peers", "3",
            "--epochs", "2", "--lr=0.5", "--network-key", "run/network.key", "--num-shards", "3",
            "--shard", "1", "--metrics", "run/peer1/metrics.jsonl", "--listen", "127.0.0.1:7001",
            "--seeds", "127.0.0.1:7000,127.0.0.1:7002", "--some-switch"]
    options, rest = gossiptrain.split_peer_args(argv)
    assert options == {"net_nice": "0", "min_peers": "3", "network_key": "run/network.key",
                       "num_shards": "3", "shard": "1", "metrics": "run/peer1/metrics.jsonl",
                       "listen": "127.0.0.1:7001", "seeds": "127.0.0.1:7000,127.0.0.1:7002"}
    assert rest == {"epochs": "2", "lr": "0.5", "some_switch": True}
    with pytest.raises(gossiptrain.UsageError, match="expected a flag"):
        gossiptrain.split_peer_args(["epochs", "2"])


def test_a_checkpoint_of_another_run_is_refused_and_the_run_id_carries_on(tmp_path):
    # run_id as gossip-peer's --run-id: written in every checkpoint; a checkpoint of another run id
    # is refused before anything is loaded; without run_id the checkpoint's id carries on into
    # the checkpoints this peer writes.
    ckpt = str(tmp_path / "ckpt")
    first = numpy.full(100, 3.0, numpy.float32)
    with gossiptrain.Peer(first, log_level="warn", checkpoint_dir=ckpt, run_id="first") as p:
        p.step()
        p.save_checkpoint()
    other = numpy.zeros(100, numpy.float32)
    with pytest.raises(gossiptrain.CheckpointError,
                       match="belongs to run 'first', not to this run 'second'"):
        gossiptrain.Peer(other, log_level="warn", checkpoint_dir=ckpt, run_id="second")
    assert other.max() == 0.0  # refused before the buffer was touched
    same = numpy.zeros(100, numpy.float32)
    with gossiptrain.Peer(same, log_level="warn", checkpoint_dir=ckpt, run_id="first") as p:
        assert p.resumed and same.min() == 3.0
    unnamed = numpy.zeros(100, numpy.float32)
    with gossiptrain.Peer(unnamed, log_level="warn", checkpoint_dir=ckpt) as p:
        assert p.resumed and unnamed.min() == 3.0
        p.step()
        p.save_checkpoint()  # still run 'first'
    with pytest.raises(gossiptrain.CheckpointError, match="belongs to run 'first'"):
        gossiptrain.Peer(numpy.zeros(100, numpy.float32), log_level="warn", checkpoint_dir=ckpt,
                         run_id="second")
    with pytest.raises(ValueError, match="run-id"):
        gossiptrain.Peer(numpy.zeros(100, numpy.float32), log_level="warn", run_id="no spaces")
