#!/usr/bin/python3
"""Why the drift corrections tried for issue 47 were not kept: a toy swarm of 10 peers on
quadratic losses with different optima (label skew's stand-in), momentum SGD, a random pairwise
averaging per step (as gossip-peer's loopback swarms do, about one per step), and the two
update-space corrections that were built into gossip::Node and measured in real runs:

  track: gradient tracking in update space: D_i an average of own updates, T_i gossip-averaged
         beside x (sum of T = sum of D), x += T_i - D_i after each step;
  pull:  an integral of the mixing pull, c_i += gain * (mix applied), x += c_i after each step
         (zero bytes; sum of c stays 0 where the mixes keep the sum).

Prints the consensus distance (mean squared distance to the mean) and the mean's error after
4,000 steps. Both corrections keep the mean right (the sum is kept) and blow the consensus up at
the step sizes training uses (lr 0.05 with momentum 0.9: 1,000 to 13,000 times the plain
distance); both are stable only at small steps, where they cut the distance by a third (lr 0.05,
no momentum: 0.81 to 0.53). Usage: scripts/experiments/drift_toy.py (about 5 s, numpy)."""
import numpy as np

N, D, STEPS = 10, 20, 4000


def run(method, lr, mom, param=0.1, seed=0):
    rng = np.random.default_rng(seed)
    h = np.diag(np.linspace(0.1, 2.0, D))
    optima = np.random.default_rng(1).normal(0.0, 3.0, (N, D))
    x = np.zeros((N, D)); v = np.zeros((N, D))
    d = np.zeros((N, D)); t = np.zeros((N, D)); c = np.zeros((N, D))
    for _ in range(STEPS):
        g = (x - optima) @ h + 0.5 * rng.normal(size=(N, D))
        v = mom * v + g
        u = -lr * v
        x = x + u
        if method == "track":
            dd = param * (u - d); d += dd; t += dd
        pre = x.copy()
        perm = rng.permutation(N)
        for k in range(0, N, 2):
            i, j = perm[k], perm[k + 1]
            if rng.random() < 0.95:
                x[i] = x[j] = (x[i] + x[j]) / 2
                if method == "track":
                    t[i] = t[j] = (t[i] + t[j]) / 2
        if method == "track":
            x = x + t - d
        elif method == "pull":
            c += param * (x - pre)
            x = x + c
    consensus = ((x - x.mean(0)) ** 2).sum(1).mean()
    error = ((x.mean(0) - optima.mean(0)) ** 2).sum()
    return consensus, error


if __name__ == "__main__":
    print(f"{'method':>6} {'lr':>5} {'mom':>4} {'param':>5} {'consensus':>12} {'mean error':>10}")
    for lr, mom in ((0.05, 0.9), (0.5, 0.0), (0.1, 0.0), (0.05, 0.0)):
        for method, param in (("none", 0), ("track", 0.1), ("track", 1.0), ("pull", 0.05)):
            cons, err = run(method, lr, mom, param)
            print(f"{method:>6} {lr:5.2f} {mom:4.1f} {param:5.2f} {cons:12.4g} {err:10.4f}")
