"""gossiptrain for any training loop: a Peer averages a float32 vector with other peers.

    x = numpy.zeros(n, numpy.float32)      # or a CPU torch tensor (gossiptrain.torch for a module)
    with gossiptrain.Peer(x, listen="0.0.0.0:7000", advertise="10.0.0.1:7000",
                          seeds=["10.0.0.2:7000"], network_key="net.key") as peer:
        for batch in data:
            train_step(x, batch)
            peer.step()                    # may start an exchange; applies a finished mix into x

The peer is gossip-peer's (the same membership, encrypted averaging exchange, catch-up, robust
mixing and metric lines); its options are gossip-peer's flags with '_' for '-', checked by the
same code with the same messages (docs/python.md).
"""

import json
import os
import tempfile
import weakref

from . import _core

__all__ = ["Peer", "UsageError", "ConfigError", "CheckpointError", "peer_options",
           "split_peer_args"]

UsageError = _core.UsageError  # a ValueError: a bad option or value, gossip-peer's message
ConfigError = _core.ConfigError  # a ValueError: a key file or address that cannot be used
CheckpointError = _core.CheckpointError  # a ValueError: checkpoint_dir holds something else


def peer_options():
    """The gossip-peer flags a Peer takes, as keyword names, with their help text."""
    return {f.replace("-", "_"): _core.flag_help(f) for f in _core.peer_flags()}


# Flags gossip-launch gives every gossip-peer to share one machine's cores (priorities, pinning,
# the OpenBLAS core, the GPU, its exporters): they place a process, and a Python peer's caller
# places itself, so split_peer_args drops them.
_PLACEMENT_FLAGS = {"train-nice", "net-cores", "blas-core", "device", "prometheus", "tensorboard"}


def split_peer_args(argv):
    """Splits a gossip-peer command line (the words after the program name, as gossip-launch
    --peer-bin SCRIPT passes them to SCRIPT: docs/python.md) into (options, rest).

    options: the flags a Peer takes, as keyword arguments for Peer(buffer, **options) (listen,
    seeds, network_key, identity, metrics, checkpoint_dir, min_peers, shard, num_shards, ...),
    values as strings, checked when the Peer is made. rest: every other flag, mostly gossip-peer's
    training flags (epochs, lr, batch, data, seed, ...), name (with '_') -> value string, True for
    a switch; the script uses those it knows and should refuse the others. gossip-launch's
    placement flags (train_nice, net_cores, blas_core, device, prometheus, tensorboard) are
    dropped. Accepts --name=value and --name value; a flag followed by another flag or nothing is
    a switch. Raises UsageError on a word that is not a flag."""
    takes = set(_core.peer_flags())
    options, rest = {}, {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("--") or len(word) == 2:
            raise UsageError("gossiptrain.split_peer_args: expected a flag (--name), got %r"
                             % word)
        name, eq, value = word[2:].partition("=")
        if not eq:
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                value = argv[i + 1]
                i += 1
            else:
                value = True
        i += 1
        if name in _PLACEMENT_FLAGS:
            continue
        (options if name in takes else rest)[name.replace("-", "_")] = value
    return options, rest


def _flag_args(options):
    args = []
    for key, value in options.items():
        if value is None or (key == "seeds" and not value):
            continue  # no seeds: the first peer of a swarm
        if key == "seeds" and not isinstance(value, (str, bytes)):
            value = ",".join(value)
        elif isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, os.PathLike):
            value = os.fspath(value)
        args.append("--%s=%s" % (key.replace("_", "-"), value))
    return args


def _is_torch(buffer):
    return type(buffer).__module__.split(".")[0] == "torch"


def _check_torch(t):
    import torch

    if t.dtype != torch.float32:
        raise TypeError("gossiptrain.Peer: the tensor must be torch.float32, not %s" % t.dtype)
    if t.dim() != 1:
        raise ValueError("gossiptrain.Peer: the tensor must be one-dimensional, not of shape %s "
                         "(gossiptrain.torch.flatten_parameters gives one)" % (tuple(t.shape),))
    if not t.is_contiguous():
        raise ValueError("gossiptrain.Peer: the tensor is not contiguous: the peer mixes into "
                         "its memory in place, so it needs one contiguous block")
    return t.detach()  # the same memory; DLPack does not export a tensor that requires grad


def _check_array(buffer):
    import numpy

    if not isinstance(buffer, numpy.ndarray):
        try:
            buffer = numpy.asarray(memoryview(buffer))  # the buffer protocol: no copy
        except TypeError:
            raise TypeError("gossiptrain.Peer: the buffer must be a float32 NumPy array, a CPU "
                            "torch tensor or a writable float32 buffer, not %s"
                            % type(buffer).__name__) from None
    if buffer.dtype != numpy.float32:
        raise TypeError("gossiptrain.Peer: the array must be float32, not %s (numpy.float32: "
                        "the wire and the mixing are fp32)" % buffer.dtype)
    if buffer.ndim != 1:
        raise ValueError("gossiptrain.Peer: the array must be one-dimensional, not of shape %s "
                         "(x.reshape(-1) of a contiguous array shares its memory)"
                         % (buffer.shape,))
    if not buffer.flags.c_contiguous:
        raise ValueError("gossiptrain.Peer: the array is not contiguous (a strided view): the "
                         "peer mixes into its memory in place, so it needs one contiguous block")
    if not buffer.flags.writeable:
        raise ValueError("gossiptrain.Peer: the array is read-only: the peer mixes into it")
    return buffer


class Peer:
    """A gossiptrain peer averaging `buffer` (1-D, float32, contiguous) in place.

    The buffer: a NumPy array or any writable float32 buffer (the buffer protocol), or a torch
    tensor. Host memory is averaged where it lies, with no copy. A tensor on a GPU is staged: it is
    copied into a host copy before each step() and back after it (2 x 4 bytes per value per step
    over the bus; staged=True does the same for a CPU tensor, staged=False refuses a GPU one).

    Options are gossip-peer's flags with '_' for '-' (gossiptrain.peer_options() lists them):
    listen, advertise, seeds (a list or "a:1,b:2"), network_key, identity, gossip_every, wire,
    mix, min_peers, catch_up, metrics, checkpoint_dir, model, ...  Differences from gossip-peer:
    identity=None (the default) is a fresh key for this process, not ./gossip-peer.key; and
    catch_up is "off" unless asked: a caller's vector may hold values it chose, which a fetched
    state would replace (catch_up="auto" fetches a live member's vector on joining, as a restarted
    process wants). With checkpoint_dir holding a checkpoint of this vector, the peer resumes from
    it instead. model="mlp:784-128-10" gives the vector that gossip-peer model's fingerprint, so
    that it averages with gossip-peer processes training it.
    """

    def __init__(self, buffer, *, listen="127.0.0.1:0", identity=None, catch_up="off",
                 staged=None, **options):
        self._host = None
        if _is_torch(buffer):
            self._tensor = _check_torch(buffer)
            self._ptr = (self._tensor.data_ptr(), self._tensor.numel())
            array = self._tensor
            if staged is None:
                staged = self._tensor.device.type != "cpu"
            elif not staged and self._tensor.device.type != "cpu":
                raise ValueError("gossiptrain.Peer: the tensor is on %s and staged=False: the peer "
                                 "averages host memory in place; leave staged to its default to "
                                 "average it through a host copy" % self._tensor.device)
            if staged:
                import torch

                pin = self._tensor.device.type == "cuda"
                self._host = torch.empty(self._tensor.numel(), dtype=torch.float32,
                                         pin_memory=pin)
                self._host.copy_(self._tensor)
                array = self._host
        else:
            if staged:
                raise ValueError("gossiptrain.Peer: staged=True is for torch tensors; a NumPy "
                                 "array is averaged in place")
            self._tensor = None
            array = _check_array(buffer)
        self.buffer = buffer
        options = dict(options, listen=listen, catch_up=catch_up)
        tmp = None
        if identity is None:
            tmp = tempfile.TemporaryDirectory(prefix="gossiptrain-")
            identity = os.path.join(tmp.name, "identity.key")
        options["identity"] = identity
        try:
            self._core = _core.Peer(array, _flag_args(options))
        finally:
            if tmp is not None:
                tmp.cleanup()  # the key is in memory: this process's identity, used once
        self._finalizer = weakref.finalize(self, self._core.close)
        self._joined = False
        self.caught_up = None
        self._stage_out()  # resumed from checkpoint_dir into the host copy

    def join(self):
        """Waits for min_peers live members, then (catch_up="auto", with seeds, not resumed from
        a checkpoint) takes a live member's vector and step count into the buffer; with
        min_peers above 1 only a member's that resumed its checkpoint (none when all start
        fresh). The first
        step() calls it; call it before to know self.caught_up (a dict: ok, from, step, ms; or
        None when there was no catch-up) and self.steps before training. Ctrl-C interrupts it."""
        if not self._joined:
            self._joined = True
            self._stage_in()
            self.caught_up = self._core.join()
            self._stage_out()
        return self.caught_up

    # A staged tensor (on a GPU, or staged=True) is averaged through a host copy: the tensor is
    # copied into it before the peer reads it (a step, a checkpoint) and back after the peer may
    # have written it (a step's mix, a catch-up, a resumed checkpoint). torch's copy_ between a
    # device and host memory waits for the device's pending work.
    def _stage_in(self):
        if self._host is not None:
            self._host.copy_(self._tensor)

    def _stage_out(self):
        if self._host is not None:
            self._tensor.copy_(self._host)

    @property
    def address(self):
        """The HOST:PORT this peer listens on (port 0 resolved)."""
        return self._core.address

    @property
    def peer_id(self):
        return self._core.peer_id

    @property
    def members(self):
        """Live members known, this peer not counted."""
        return self._core.members

    @property
    def steps(self):
        """step() calls so far (from the checkpoint or the caught-up state when there was one)."""
        return self._core.steps

    @property
    def resumed(self):
        """True when the buffer was loaded from checkpoint_dir's checkpoint."""
        return self._core.resumed

    @property
    def closed(self):
        return self._core.closed

    def step(self):
        """Call at each step boundary: may start an exchange and applies a finished mix into the
        buffer, in place, all or nothing. Releases the GIL; waits no longer than gossip-peer's
        step hook does (--max-lag)."""
        if self._tensor is not None and (self._tensor.data_ptr(), self._tensor.numel()) != self._ptr:
            raise RuntimeError(
                "gossiptrain.Peer: the tensor was resized or its storage replaced since the peer "
                "was made; the pending mix is not applied. Close this peer and make a new one")
        if not self._joined:
            self.join()
        self._stage_in()
        self._core.step()
        self._stage_out()

    def stats(self):
        """Exchanges so far: ok, averaging, failed, bytes_sent, bytes_received, lag waits."""
        return self._core.stats()

    def metric(self, event, **fields):
        """Appends a metric line of yours to the peer's metrics file (metrics=), on its clock:
        `eval` (epoch, step, test_acc, test_loss, final) and `done` (steps, epochs,
        final_test_acc, seconds) lines make `gossip-launch --report DIR` summarize several
        Python processes as one run (docs/python.md)."""
        self._core.metric(event, json.dumps(fields))

    def save_checkpoint(self):
        """Writes checkpoint_dir/checkpoint.bin now (it is also written every checkpoint_every
        seconds from step(), and at close())."""
        self._stage_in()
        self._core.save_checkpoint()

    def close(self):
        """Leaves the swarm (others learn it at once) and stops the network threads."""
        if self._finalizer.alive and not self._core.closed:
            self._stage_in()  # the last checkpoint holds the tensor as it is now
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
