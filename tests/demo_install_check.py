"""What `cmake --install` copies from the build tree is built by the demo: every file that
BUILD/cmake_install.cmake installs from BUILD must be among what the targets that
scripts/demo.sh builds depend on (ninja -t query), so that `bash scripts/demo.sh` then `cmake --install`
works (it failed with "cannot find build/apps/gossip-sim" when the demo built three of the four
programs).

    python3 tests/demo_install_check.py SOURCE_DIR BUILD_DIR"""
import os
import re
import shlex
import subprocess
import sys

src, build = sys.argv[1], os.path.abspath(sys.argv[2])


def demo_targets():
    """The --target names of the demo's `cmake --build` line."""
    with open(os.path.join(src, "scripts", "demo.sh")) as f:
        for line in f:
            line = line.split("#", 1)[0]
            if "cmake --build" in line and "--target" in line:
                words = shlex.split(line)
                return words[words.index("--target") + 1:]
    sys.exit("FAIL: scripts/demo.sh has no `cmake --build ... --target` line")


def installed_from_build():
    """The build-tree files that the install scripts copy (file(INSTALL ... FILES "...") lines),
    following BUILD/cmake_install.cmake and the scripts it includes: only this project's install.
    (Other CMake trees can sit inside BUILD, e.g. pip's build of the Python package in build/py/;
    `cmake --install BUILD` does not run theirs.)"""
    files, todo, seen = set(), [os.path.join(build, "cmake_install.cmake")], set()
    while todo:
        script = todo.pop()
        if script in seen or not os.path.isfile(script):
            continue
        seen.add(script)
        with open(script) as f:
            text = f.read()
        todo += re.findall(r'include\("([^"]+/cmake_install\.cmake)"\)', text)
        for m in re.finditer(r'file\(INSTALL [^)]*?FILES ([^)]*)\)', text):
            for path in re.findall(r'"([^"]+)"', m.group(1)):
                if path.startswith(build + "/"):
                    files.add(os.path.relpath(path, build))
    return files


def built_by(targets):
    """Every build-tree file the targets depend on, transitively (ninja -t query, level by level;
    -t inputs leaves out the intermediate outputs)."""
    seen, level = set(targets), list(targets)
    while level:
        out = subprocess.run(["ninja", "-C", build, "-t", "query", *level], capture_output=True,
                             text=True, check=True).stdout
        nxt, section = [], None
        for line in out.splitlines():
            if not line.startswith(" "):
                continue
            word = line.strip()
            if word.startswith("input:") or word == "outputs:":
                section = word
                continue
            if section and section.startswith("input:") and line.startswith("    "):
                path = os.path.normpath(word.lstrip("| "))
                if not os.path.isabs(path) and path not in seen:
                    seen.add(path)
                    nxt.append(path)
        level = nxt
    return seen


targets = demo_targets()
built = built_by(targets)
installed = installed_from_build()
if not installed:
    sys.exit(f"FAIL: no file installed from {build} found in its cmake_install.cmake files")
missing = sorted(p for p in installed if p not in built)
print(f"demo builds {' '.join(targets)}; the install copies {len(installed)} files from the build tree")
if missing:
    sys.exit(f"FAIL: `cmake --install` after the demo would not find: {', '.join(missing)}")
print("ok: every installed build file is built by the demo")
