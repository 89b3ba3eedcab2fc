#!/usr/bin/python3
# The plot scripts on small made-up run folders (issue 26, items 11 and 13): alive.png has room
# above the swarm's size, consensus.png is on a log axis, loss.png exists, and every plot over time
# marks the churn events. Run by CTest; exit code 77 (skipped) without matplotlib.
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "plot"))
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("SKIPPED: no matplotlib in " + sys.executable)
    sys.exit(77)

import plot_run  # noqa: E402
import plot_sim  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


# Every figure the scripts close, by title, to look at its axes.
figures = {}
real_close = plt.close


def record_close(fig=None):
    if hasattr(fig, "axes") and fig.axes:
        figures[fig.axes[0].get_title()] = fig
    real_close(fig)


plt.close = record_close


def vertical_lines(ax):
    """x of the axis's vertical lines (axvline)."""
    xs = set()
    for line in ax.get_lines():
        x = list(line.get_xdata())
        if len(x) == 2 and x[0] == x[1]:
            xs.add(round(float(x[0]), 6))
    return xs


def by_title(prefix):
    for title, fig in figures.items():
        if title.startswith(prefix):
            return fig.axes[0]
    return None


with tempfile.TemporaryDirectory() as tmp:
    # gossip-sim: 100 peers, one crash at 5 s and its restart at 7 s.
    sim = os.path.join(tmp, "sim")
    os.makedirs(sim)
    with open(os.path.join(sim, "summary.json"), "w") as f:
        json.dump({"peers": 100}, f)
    rows = []
    for t in range(0, 11):
        live = 99 if 5 <= t < 7 else 100
        rows.append({"t": float(t), "event": "sample", "live": live, "msd": 10.0 ** -t})
    rows += [{"t": 5.0, "event": "churn", "kind": "crash", "peer": 3},
             {"t": 7.0, "event": "churn", "kind": "restart", "peer": 3}]
    write_jsonl(os.path.join(sim, "events.jsonl"), rows)
    sys.argv = ["plot_sim.py", sim]
    plot_sim.main()
    alive = by_title("Peers up")
    check(alive is not None, "plot_sim.py drew alive.png")
    if alive is not None:
        top = alive.get_ylim()[1]
        check(top >= 100 * 1.05, f"alive.png: the 100-peer line is below the top of the axis "
                                 f"(top {top:.2f})")
        check({5.0, 7.0} <= vertical_lines(alive), "alive.png marks the crash and the restart")
    cons = by_title("Consensus distance")
    check(cons is not None and {5.0, 7.0} <= vertical_lines(cons),
          "sim consensus.png marks the crash and the restart")

    # gossip-launch: 2 peers, a crash, a restart, a partition and its heal.
    run = os.path.join(tmp, "run")
    for i in range(2):
        os.makedirs(os.path.join(run, f"peer{i}"))
        m = []
        for k in range(1, 21):
            m.append({"t": 0.5 * k, "peer": f"p{i}", "event": "step", "step": 10 * k,
                      "loss": 2.0 / k})
            m.append({"t": 0.5 * k, "peer": f"p{i}", "event": "exchange", "ok": True,
                      "bytes_sent": 1e6, "bytes": 2e6})
            if k % 5 == 0:
                m.append({"t": 0.5 * k, "peer": f"p{i}", "event": "eval", "epoch": k // 5,
                          "test_acc": 0.2 + 0.03 * k, "train_loss": 2.0 / k})
        write_jsonl(os.path.join(run, f"peer{i}", "metrics.jsonl"), m)
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"mode": "gossip", "partition": "iid", "peers": 2, "target_acc": 0.5,
                   "peer_list": [{"peer": 0, "start_offset_s": 0.0},
                                 {"peer": 1, "start_offset_s": 0.0}]}, f)
    write_jsonl(os.path.join(run, "consensus.jsonl"),
                [{"t": float(t), "distance": 10.0 ** -t} for t in range(1, 6)])
    churn = [(2.0, "crash", [1]), (4.0, "restart", [1]), (6.0, "partition", [0, 1]),
             (8.0, "heal", [])]
    write_jsonl(os.path.join(run, "events.jsonl"),
                [{"t": t, "event": "churn", "kind": k, "applied_to": who} for t, k, who in churn])
    figures.clear()
    check(plot_run.main(["plot_run.py", run]) == 0, "plot_run.py exits 0")
    check(os.path.exists(os.path.join(run, "loss.png")), "plot_run.py writes loss.png")
    cons = by_title("consensus distance")
    check(cons is not None and cons.get_yscale() == "log", "consensus.png has a log y axis")
    acc_mb = by_title("accuracy against MB sent")
    check(os.path.exists(os.path.join(run, "accuracy_bytes.png")) and acc_mb is not None,
          "plot_run.py writes accuracy_bytes.png")
    if acc_mb is not None:
        # 1 MB sent per step line, an eval every 5: at 5, 10, 15 and 20 MB.
        xs = sorted({round(float(x), 6) for ln in acc_mb.get_lines() for x in ln.get_xdata()
                     if len(ln.get_xdata()) == 4})
        check(xs == [5.0, 10.0, 15.0, 20.0], f"accuracy_bytes.png: evals at the MB sent ({xs})")
    times = {t for t, _, _ in churn}
    for name in ("test accuracy", "training loss", "consensus distance", "bytes on the wire"):
        ax = by_title(name)
        check(ax is not None and times <= vertical_lines(ax),
              f"plot '{name}' marks every churn event")

    # Defects issue, item 8: a local launch with a restarted peer. Peer 1's first process started
    # at 0.5 s and evaluated at 12 and 14 s (its t); it was crashed and restarted at 40 s, where
    # its clock started again. Every process on the run's one axis: its first evaluations at 12.5
    # and 14.5 s, not shifted by the latest start (52 and 54 s), and the line never runs back.
    rs = os.path.join(tmp, "restarted")
    for i in range(2):
        os.makedirs(os.path.join(rs, f"peer{i}"))
    write_jsonl(os.path.join(rs, "peer0", "metrics.jsonl"),
                [{"t": float(t), "peer": "p0", "event": "eval", "epoch": t // 10,
                  "test_acc": 0.5 + 0.005 * t} for t in range(10, 61, 10)])
    life0 = [{"t": t, "peer": "p1", "event": "eval", "epoch": k, "test_acc": 0.6 + 0.1 * k}
             for k, t in ((1, 12.0), (2, 14.0))]
    life1 = [{"t": t, "peer": "p1", "event": "eval", "epoch": k, "test_acc": 0.8 + 0.01 * k}
             for k, t in ((3, 3.0), (4, 8.0))]
    write_jsonl(os.path.join(rs, "peer1", "metrics.jsonl"), life0 + life1)
    with open(os.path.join(rs, "config.json"), "w") as f:
        json.dump({"mode": "gossip", "peers": 2, "target_acc": 0.85,
                   "peer_list": [{"peer": 0, "start_offset_s": 0.0},
                                 {"peer": 1, "start_offset_s": 0.0}]}, f)
    with open(os.path.join(rs, "summary.json"), "w") as f:
        json.dump({"peers": [{"peer": 0, "clock_offset_s": 0.5, "life_offsets_s": [0.5]},
                             {"peer": 1, "clock_offset_s": 40.0,
                              "life_offsets_s": [0.5, 40.0]}]}, f)
    write_jsonl(os.path.join(rs, "events.jsonl"),
                [{"t": 20.0, "event": "churn", "kind": "crash", "applied_to": [1]},
                 {"t": 39.5, "event": "churn", "kind": "restart", "applied_to": [1]}])
    figures.clear()
    check(plot_run.main(["plot_run.py", rs]) == 0, "plot_run.py exits 0 on the restarted run")
    acc = by_title("test accuracy")
    xs = []
    for line in acc.get_lines() if acc is not None else []:
        if line.get_label() == "peer 1":
            xs = [round(float(x), 6) for x in line.get_xdata()]
    check(xs == [12.5, 14.5, 43.0, 48.0],
          f"accuracy.png: each of peer 1's processes at its own start on the run's clock ({xs})")
    check(xs == sorted(xs), "accuracy.png: peer 1's line never runs back in time")

    # Defects issue, item 11: 36 random-churn events drew 36 labelled lines over the curves. Past
    # a dozen they are ticks along the top, with a count per kind in the legend; a partition
    # keeps its line.
    dense = [{"t": 1.0 + 1.5 * k, "event": "churn", "kind": "crash" if k % 2 == 0 else "restart",
              "applied_to": [k % 2], "source": "random"} for k in range(36)]
    dense += [{"t": 20.0, "event": "churn", "kind": "partition", "applied_to": [0, 1]},
              {"t": 30.0, "event": "churn", "kind": "heal", "applied_to": []}]
    write_jsonl(os.path.join(run, "events.jsonl"), dense)
    figures.clear()
    check(plot_run.main(["plot_run.py", run]) == 0, "plot_run.py exits 0 with 36 churn events")
    acc = by_title("test accuracy")
    if acc is not None:
        lines = vertical_lines(acc)
        check(lines == {20.0, 30.0}, f"dense churn: only the partition and heal are lines ({lines})")
        labels = [t.get_text() for t in acc.get_legend().get_texts()] if acc.get_legend() else []
        check(any("crash x18" in x for x in labels) and any("restart x18" in x for x in labels),
              f"dense churn: the legend counts them per kind ({labels})")
        texts = [t for t in acc.texts if t.get_text().strip().startswith(("crash", "restart"))]
        check(not texts, f"dense churn: no label per event ({len(texts)} drawn)")
    keep = os.environ.get("GT_PLOT_CHECK_KEEP")
    if keep:  # to look at the figures: GT_PLOT_CHECK_KEEP=DIR
        import shutil
        shutil.copytree(tmp, keep, dirs_exist_ok=True)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all plot checks passed")
