#!/usr/bin/python3
"""The shell commands of our docs, and which test runs each of them.

A doc's commands are the lines of its ```sh / ```bash blocks, continuation lines joined and
comments dropped. `commands(path)` gives them to the tests that run them (tests/readme_commands.py
for README.md; tests/slurm_check.sh, tests/container_swarm.py and tests/container_scale.py for the
cluster pages), so a test runs what the page says, not a copy of it that can drift.

RUN_BY lists, for docs/cluster.md and docs/containers.md, every command of the page by its
beginning, with the test that runs it and what that test changes (only what a 2-core test machine
needs: epochs cut, names of its own, --wait), or why no test can run it here. `check` (ctest
docs:cluster_commands_are_run_by_tests) fails when a page has a command that no entry covers or an
entry that no command matches: a command added to a page must name its test.

  doc_commands.py list DOC               every command, "LINE: COMMAND"
  doc_commands.py get DOC PREFIX         the one command that starts with PREFIX (exit 1 if not one)
  doc_commands.py check SOURCE_DIR       the coverage check above"""
import os
import re
import shlex
import subprocess
import sys

# (page, beginning of a command, who runs it and how)
RUN_BY = [
    # docs/cluster.md
    ('docs/cluster.md', 'sbatch --ntasks 8 deploy/slurm/gossip.sbatch --epochs 10',
     'scripts:slurm (tests/slurm_check.sh): as written, with sbatch\'s --wait, --overcommit (the '
     'page says so for a node with fewer CPUs than tasks) and --output, and --epochs 1'),
    ('docs/cluster.md', "echo '{\"events\"",
     'scripts:slurm, as written, in the job\'s submit folder'),
    ('docs/cluster.md', 'sbatch --ntasks 4 deploy/slurm/gossip.sbatch --churn',
     'scripts:slurm: as written, with --wait, --overcommit, --output and --epochs 2 (10 on the '
     'page)'),
    # docs/containers.md
    ('docs/containers.md', 'scripts/setup.sh',
     'scripts/test.sh runs it first (the README\'s test command, what CI runs)'),
    ('docs/containers.md', 'cmake -S . -B build',
     'scripts/test.sh builds the same way (Ninja, Release)'),
    ('docs/containers.md', 'deploy/container/build-image.sh',
     'every deploy:* container test (scripts/test/container_lib.py build_image), with --build and '
     '--image of the test'),
    ('docs/containers.md', 'deploy/container/podman-swarm.sh up --name gt --replicas 4 -- ',
     'deploy:four_containers_find_each_other_by_name_and_a_killed_one_resumes '
     '(tests/container_swarm.py): as written, with the test\'s own name, image, key and service, '
     'and the StatefulSet\'s training flags and the test\'s size after the page\'s'),
    ('docs/containers.md', 'podman kill gt-2; podman start gt-2',
     'deploy:four_containers_..., with the test\'s name (the start once the others noticed the kill)'),
    ('docs/containers.md', 'deploy/container/podman-swarm.sh down --name gt --replicas 4',
     'deploy:four_containers_... (its clean-up), with the test\'s name'),
    ('docs/containers.md', 'deploy/container/podman-swarm.sh up --name gt --replicas 4 --run-id r1',
     'deploy:a_podman_swarm_resized_4_6_3_finishes_one_run (tests/container_scale.py): as written, '
     'with the test\'s name, image and model, --checkpoint-every 1 and --linger 5'),
    ('docs/containers.md', 'podman stop -t 60 gt-0 gt-1 gt-2 gt-3',
     'deploy:a_podman_swarm_resized_4_6_3_finishes_one_run, with the test\'s names'),
    ('docs/containers.md', 'podman rm gt-0 gt-1 gt-2 gt-3',
     'deploy:a_podman_swarm_resized_4_6_3_finishes_one_run, with the test\'s names'),
    ('docs/containers.md', 'deploy/container/podman-swarm.sh up --name gt --replicas 6 --run-id r1',
     'deploy:a_podman_swarm_resized_4_6_3_finishes_one_run, as the first up, and for the last '
     'size with --replicas 3'),
    ('docs/containers.md', 'deploy/k8s/make-secret.sh | kubectl apply',
     'NOT RUN: no Kubernetes API server on the test machine. make-secret.sh\'s output is validated '
     'by deploy:k8s_manifests_validate_and_agree_with_the_entrypoint'),
    ('docs/containers.md', 'kubectl ',
     'NOT RUN: no Kubernetes API server on the test machine. The manifests are validated with '
     'kubernetes-validate --strict by deploy:k8s_manifests_validate_and_agree_with_the_entrypoint, '
     'and the pods\' containers (image, entrypoint, environment, args) run in podman: '
     'deploy:four_containers_... (StatefulSet) and deploy:indexed_job_... (Job, report Job)'),
]


def commands(path):
    """[(line number, command)] of the page's sh/bash blocks, continuations joined, comments
    dropped (a '#' that starts a comment: at the line's start or after a blank)."""
    out, block, pending, start = [], False, '', 0
    with open(path, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if line.startswith('```'):
                block = line.strip() in ('```sh', '```bash') if not block else False
                pending = ''
                continue
            if not block:
                continue
            text = strip_comment(line).rstrip()
            if not pending:
                start = n
            if text.endswith('\\'):
                pending += text[:-1] + ' '
                continue
            cmd = (pending + text).strip()
            pending = ''
            if cmd:
                out.append((start, cmd))
    return out


def strip_comment(line):
    """The line without a trailing shell comment; quotes are respected."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in '\'"':
            quote = ch
        elif ch == '#' and (i == 0 or line[i - 1] in ' \t'):
            return line[:i]
    return line


def get(path, prefix):
    found = [c for _, c in commands(path) if c.startswith(prefix)]
    if len(found) != 1:
        raise LookupError(f'{path}: {len(found)} commands start with {prefix!r}, not one')
    return found[0]


def with_name(cmd, tag, options=(), flags=()):
    """A containers.md command for a test that runs it beside others: the swarm name `gt` (and
    its containers gt-0, gt-1, ...) becomes tag; options go before podman-swarm.sh's `--`, flags
    after the training flags (the last of a repeated gossip-peer flag wins)."""
    cmd = re.sub(r'--name gt(?= |$)', f'--name {tag}', cmd)
    cmd = re.sub(r'(?<![\w-])gt-(\d+)\b', lambda m: f'{tag}-{m.group(1)}', cmd)
    if options:
        head, sep, tail = cmd.partition(' -- ')
        cmd = ' '.join([head, *options]) + (sep + tail if sep else '')
    return ' '.join([cmd, *flags])


def for_test(path, prefix, tag, options=(), flags=(), adapt=None):
    """with_name() of the page's command that starts with prefix, options and flags quoted for
    bash, then adapt(cmd) where given; printed, so the test's log shows what it ran."""
    cmd = with_name(get(path, prefix), tag, [shlex.quote(o) for o in options],
                    [shlex.quote(f) for f in flags])
    if adapt:
        cmd = adapt(cmd)
    page = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
    print(f"{page}: {cmd}", flush=True)
    return cmd


def run_line(cmd, cwd, timeout):
    """A page's command line through bash from cwd (its paths are relative to the repository
    root), its output captured."""
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def entry_for(page, cmd):
    """The RUN_BY entries whose beginning the command has (the longest first)."""
    return sorted((e for e in RUN_BY if e[0] == page and cmd.startswith(e[1])),
                  key=lambda e: -len(e[1]))


def check(src):
    problems = []
    for page in sorted({e[0] for e in RUN_BY}):
        cmds = commands(os.path.join(src, page))
        if not cmds:
            problems.append(f'{page}: no command found (a block lost its sh tag?)')
        used = set()
        for line, cmd in cmds:
            e = entry_for(page, cmd)
            if not e:
                problems.append(f'{page}:{line}: `{cmd}` is run by no test (add it to RUN_BY in '
                                'tests/doc_commands.py with the test that runs it)')
                continue
            used.add(e[0][1])
            print(f'{page}:{line}: {cmd}\n    -> {e[0][2]}')
        for e in RUN_BY:
            if e[0] == page and e[1] not in used:
                problems.append(f'{page}: no command starts with {e[1]!r} any more (RUN_BY is stale)')
    for p in problems:
        print('FAILED ' + p)
    return 1 if problems else 0


def main(argv):
    if len(argv) == 3 and argv[1] == 'list':
        for n, c in commands(argv[2]):
            print(f'{n}: {c}')
        return 0
    if len(argv) == 4 and argv[1] == 'get':
        try:
            print(get(argv[2], argv[3]))
        except LookupError as e:
            print(e, file=sys.stderr)
            return 1
        return 0
    if len(argv) == 3 and argv[1] == 'check':
        return check(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
