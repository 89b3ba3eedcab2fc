"""examples/torch_transformer_lm.py: two PyTorch peers of a small transformer language model
average (their flattened parameters) and learn the generated language. Skips without PyTorch."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed in this venv (CTest: cmake -DGT_TORCH_VENV=A_VENV_WITH_TORCH, docs/python.md)")

import gossiptrain.torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "torch_transformer_lm.py")


def test_flatten_parameters_makes_every_parameter_a_view():
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    before = [p.detach().clone() for p in m.parameters()]
    flat = gossiptrain.torch.flatten_parameters(m)
    assert flat.numel() == 3 * 4 + 4 + 4 * 2 + 2
    for p, b in zip(m.parameters(), before):
        assert torch.equal(p, b)
    flat.fill_(0.5)  # what a mix does: the module sees it
    assert all(bool((p == 0.5).all()) for p in m.parameters())


def test_two_transformer_peers_learn_the_language():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.Popen([sys.executable, EXAMPLE, "--min-peers", "2"],
                             stdout=subprocess.PIPE, text=True, env=env)
    addr = json.loads(first.stdout.readline())["address"]
    second = subprocess.Popen([sys.executable, EXAMPLE, "--min-peers", "2", "--seed", "2",
                               "--seeds", addr], stdout=subprocess.PIPE, text=True, env=env)
    results = []
    for p in (first, second):
        lines = [json.loads(l) for l in p.stdout]
        assert p.wait(timeout=600) == 0
        results.append(lines[-1])
    print(json.dumps(results))
    for r in results:
        assert r["exchanges"]["averaging"] > 0, r
        assert r["final_loss"] < r["first_loss"] - 1.0, r
        assert r["final_loss"] < r["entropy"] + 0.2, r  # near the best possible loss
