"""One process of the three-peer check: a float32 vector of N values at VALUE, stepped every
2 ms for SECONDS, joined through SEED when given. Prints its address, then one JSON line with
what its vector ended as (the same array object, averaged in place)."""
import argparse
import json
import sys
import time

import numpy

import gossiptrain

ap = argparse.ArgumentParser()
ap.add_argument("value", type=float)
ap.add_argument("seconds", type=float)
ap.add_argument("--seed")
ap.add_argument("--n", type=int, default=10000)
ap.add_argument("--metrics")
a = ap.parse_args()

x = numpy.full(a.n, a.value, numpy.float32)
before = x.__array_interface__["data"][0]
opts = {"seeds": [a.seed]} if a.seed else {}
if a.metrics:
    opts["metrics"] = a.metrics
with gossiptrain.Peer(x, listen="127.0.0.1:0", log_level="warn", **opts) as peer:
    print(json.dumps({"address": peer.address}), flush=True)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        peer.step()
        time.sleep(0.002)
    stats = peer.stats()
print(json.dumps({"min": float(x.min()), "max": float(x.max()), "mean": float(x.mean()),
                  "same_memory": x.__array_interface__["data"][0] == before,
                  "ok": stats["ok"], "averaging": stats["averaging"]}), flush=True)
sys.exit(0)
