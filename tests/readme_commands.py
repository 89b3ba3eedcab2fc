#!/usr/bin/python3
"""The README's commands, run as a user types them (ctest "docs:readme_commands_run").

Every line of README.md's shell blocks that starts a program of ours is run from a scratch
folder that holds a link to the build tree and scripts/ (so `build/apps/...` and
`bash scripts/...` resolve as they do at the repository root, and run folders land there), with
the user's environment: no OPENBLAS_NUM_THREADS, default flags. The one change: `--epochs N`
becomes `--epochs 1` (and the demo gets `--epochs 1`), so the suite stays short; the commands are
otherwise as written. Each must exit 0 within its deadline, and the runs must leave what the
README says they leave (summary.json, the plots the demo names, a --compare table with every run).

Left out, with the reason: `bash scripts/test.sh` (this suite itself), `cmake --install` (the test
install:installed_programs_run_a_swarm_and_write_its_plots), the several-machines commands (the
netns test system:three hosts as a user runs them, which needs root), and lines that are comments
or not a program of ours (`head -c 32 /dev/urandom ...`).

  readme_commands.py SOURCE_DIR BUILD_DIR
Exit 0 when every command ran as it should; 1 with a line per failure; 77 (skip) without the
Fashion-MNIST data set."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_commands  # noqa: E402  (tests/: the docs' command blocks, one parser)

SRC = os.path.abspath(sys.argv[1])
BUILD = os.path.abspath(sys.argv[2])
DATA = '/usr/share/datasets/fashion-mnist'
failures = []


def commands():
    """(line number, command) for each line of the README's bash blocks, continuations joined."""
    return doc_commands.commands(os.path.join(SRC, 'README.md'))


def ours(cmd):
    return cmd.startswith(('build/apps/', 'bash scripts/demo.sh'))


def shortened(cmd):
    """The command as typed, with --epochs N made 1 (the demo takes it as an extra argument)."""
    cmd = re.sub(r'--epochs +[0-9]+', '--epochs 1', cmd)
    if cmd.startswith('bash scripts/demo.sh'):
        cmd += ' --epochs 1'
    return cmd


def run(line, shown, cwd, env, timeout):
    t0 = time.time()
    try:
        # Through bash, as typed: `runs/*` is the shell's glob.
        p = subprocess.run(['bash', '-c', shown], cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        failures.append(f'README.md:{line}: `{shown}` did not end within {timeout} s; its output:\n'
                        + (e.stdout or b'').decode(errors='replace')[-3000:])
        return None
    if p.returncode != 0:
        failures.append(f'README.md:{line}: `{shown}` exited {p.returncode}; its output:\n'
                        + p.stdout[-3000:])
        return None
    print(f'README.md:{line}: {shown}  ({time.time() - t0:.1f} s)', flush=True)
    return p.stdout


def run_folders(cwd, before):
    runs = os.path.join(cwd, 'runs')
    now = set(os.listdir(runs)) if os.path.isdir(runs) else set()
    return sorted(os.path.join(runs, d) for d in now - before)


def main():
    if not os.path.isfile(os.path.join(DATA, 'train-images-idx3-ubyte.gz')):
        print(f'skipped: no Fashion-MNIST at {DATA} (scripts/setup.sh installs it)')
        return 77
    cmds = [(n, c) for n, c in commands() if ours(c)]
    if len(cmds) < 5:  # the README's own commands, not a parse that found nothing
        print(f'found only {len(cmds)} commands of ours in README.md: {cmds}')
        return 1
    env = {k: v for k, v in os.environ.items() if not k.startswith('OPENBLAS_')}
    cwd = tempfile.mkdtemp(prefix='gt-readme-')
    try:
        os.symlink(BUILD, os.path.join(cwd, 'build'))
        os.symlink(os.path.join(SRC, 'scripts'), os.path.join(cwd, 'scripts'))
        for line, cmd in cmds:
            typed = shortened(cmd)  # the command line bash gets
            runs_dir = os.path.join(cwd, 'runs')
            before = set(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else set()
            if typed.startswith('bash scripts/demo.sh'):
                # The demo configures and builds into build/ (a no-op on this suite's tree): from
                # the source tree, with its run folder here.
                out_dir = os.path.join(cwd, 'runs', 'demo')
                denv = dict(env, BUILD=BUILD, OUT=out_dir)
                out = run(line, typed, SRC, denv, 900)
                if out is not None:
                    for f in ('summary.json', 'accuracy.png', 'consensus.png', 'bytes.png'):
                        if not os.path.isfile(os.path.join(out_dir, f)):
                            failures.append(f'README.md:{line}: the demo left no {f} in {out_dir}')
                    if 'plots: ' not in out:
                        failures.append(f'README.md:{line}: the demo did not print its plots')
                continue
            out = run(line, typed, cwd, env, 600)
            if out is None:
                continue
            if '--help' in typed:
                if 'usage' not in out.lower() or '--epochs' not in out:
                    failures.append(f'README.md:{line}: --help printed no usage with --epochs')
                continue
            if '--compare' in typed:
                for d in run_folders(cwd, set()):
                    if os.path.basename(d) not in out:
                        failures.append(f'README.md:{line}: --compare left out {d}')
                continue
            if typed.startswith('build/apps/gossip-launch'):
                new = run_folders(cwd, before)
                if len(new) != 1:
                    failures.append(f'README.md:{line}: expected one new run folder, found {new}')
                    continue
                s = json.load(open(os.path.join(new[0], 'summary.json')))
                acc = s.get('final_test_acc_mean')
                if not s.get('peers') or s.get('interrupted') or s.get('failed_peers'):
                    failures.append(f'README.md:{line}: summary.json: peers {s.get("peers")!r:.200}, '
                                    f'interrupted {s.get("interrupted")}, failed '
                                    f'{s.get("failed_peers")}')
                # One epoch: 0.7-0.85 with averaging; --mode local on dirichlet:0.1 shards ~0.45.
                floor = 0.3 if '--mode local' in typed else 0.6
                if not isinstance(acc, (int, float)) or acc < floor:
                    failures.append(f'README.md:{line}: final mean accuracy {acc} after one '
                                    f'epoch (at least {floor} expected)')
        for f in failures:
            print('FAILED ' + f)
        print(f'{len(cmds)} README commands, {len(failures)} failures')
        return 1 if failures else 0
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
