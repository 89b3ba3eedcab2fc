#!/usr/bin/python3
"""The documentation against the code (ctest "docs:statements_match_the_code"):
1. every relative link of README.md and docs/**/*.md names a file that exists, and an anchor a
   heading of that page;
2. the include graph that docs/ARCHITECTURE.md states (the table after "<!-- include-graph -->")
   is the one the sources have: for each layer, the set of other layers its files include
   (`#include "LAYER/..."`), tests left out, must equal the table's;
3. the CMake targets of those layers link (PUBLIC or PRIVATE) the layers they include;
4. every source path a page names in backticks (`gossip/exchange/averager.cpp`, `net/secure/frame.{hpp,cpp}`)
   exists (docs/results/ left out: a result names the code as it was when it was measured).
Exit 0 when all hold; 1 with one line per mismatch."""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
errors = []


def md_files():
    yield os.path.join(ROOT, 'README.md')
    for d, _, files in os.walk(os.path.join(ROOT, 'docs')):
        for f in files:
            if f.endswith('.md'):
                yield os.path.join(d, f)


def slugs(path):
    """GitHub's heading anchors of a Markdown file."""
    out, seen, code = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            code = not code
        m = None if code else re.match(r'(#+) +(.*?)\s*$', line)
        if not m:
            continue
        s = re.sub(r'[^\w\- ]', '', m.group(2).strip().lower()).replace(' ', '-')
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out


def check_links():
    for md in md_files():
        text = open(md, encoding='utf-8').read()
        text = re.sub(r'```.*?```', '', text, flags=re.S)
        for target in re.findall(r'\]\(([^)\s]+)\)', text):
            if re.match(r'[a-z]+:', target):
                continue
            path, _, anchor = target.partition('#')
            dest = md if not path else os.path.normpath(os.path.join(os.path.dirname(md), path))
            rel = os.path.relpath(md, ROOT)
            if not os.path.exists(dest):
                errors.append(f'{rel}: link to {target}: no such file')
            elif anchor and dest.endswith('.md') and anchor not in slugs(dest):
                errors.append(f'{rel}: link to {target}: no heading with that anchor')


LAYER_RE = re.compile(r'#include "([a-z_]+)/')


def stated_graph():
    text = open(os.path.join(ROOT, 'docs', 'ARCHITECTURE.md'), encoding='utf-8').read()
    m = re.search(r'<!-- include-graph -->\n(.*?)\n\n', text, re.S)
    if not m:
        errors.append('docs/ARCHITECTURE.md: no "<!-- include-graph -->" table')
        return {}
    graph = {}
    for row in m.group(1).splitlines()[2:]:
        cells = [c.strip().strip('`/') for c in row.strip('|').split('|')]
        layer, includes = cells[0], cells[1]
        graph[layer] = includes
    layers = set(graph)
    for layer, includes in graph.items():
        if includes == 'nothing of ours':
            graph[layer] = set()
        elif includes == 'every other layer':
            graph[layer] = layers - {layer}
        else:
            graph[layer] = {c.strip().strip('`/') for c in includes.split(',')}
    return graph


def actual_includes(layer, layers):
    found = {}
    for d, _, files in os.walk(os.path.join(ROOT, layer)):
        for f in files:
            if not f.endswith(('.cpp', '.hpp', '.cu', '.cuh')):
                continue
            p = os.path.join(d, f)
            for inc in LAYER_RE.findall(open(p, encoding='utf-8', errors='replace').read()):
                if inc in layers and inc != layer:
                    found.setdefault(inc, os.path.relpath(p, ROOT))
    return found


def check_graph():
    graph = stated_graph()
    layers = set(graph)
    for layer in sorted(graph):
        if not os.path.isdir(os.path.join(ROOT, layer)):
            errors.append(f'docs/ARCHITECTURE.md: include graph names {layer}/, which does not exist')
            continue
        found = actual_includes(layer, layers)
        for extra in sorted(set(found) - graph[layer]):
            errors.append(f'{layer}/ includes {extra}/ ({found[extra]}), which the include graph '
                          'in docs/ARCHITECTURE.md does not say')
        for missing in sorted(graph[layer] - set(found)):
            errors.append(f'docs/ARCHITECTURE.md says {layer}/ includes {missing}/, but no file '
                          'of it does')
        cm = os.path.join(ROOT, layer, 'CMakeLists.txt')
        if layer != 'apps' and os.path.exists(cm):
            links = set(re.findall(r'gt_([a-z_]+)', open(cm).read()))
            for dep in sorted(set(found)):
                if dep not in links:
                    errors.append(f'{layer}/CMakeLists.txt does not link gt_{dep}, which '
                                  f'{found[dep]} includes')


PATH_RE = re.compile(r'`((?:base|kernels|core|net|gossip|apps|tests|scripts|deploy)/[\w./{},*-]+)`')


def check_paths():
    for md in md_files():
        rel = os.path.relpath(md, ROOT)
        if rel.startswith(os.path.join('docs', 'results')):
            continue
        for path in PATH_RE.findall(open(md, encoding='utf-8').read()):
            if '*' in path or path.endswith('/'):
                continue
            m = re.match(r'(.*)\{(.*)\}(.*)', path)
            variants = [m.group(1) + v + m.group(3) for v in m.group(2).split(',')] if m else [path]
            for v in variants:
                full = os.path.join(ROOT, v)
                stems = [full + e for e in ('', '.hpp', '.cpp', '.h', '.cu', '.py', '.sh')]
                if not any(os.path.exists(x) for x in stems):
                    errors.append(f'{rel}: names {v}, which does not exist')


check_links()
check_graph()
check_paths()
for e in errors:
    print('docs_check:', e)
print(f'docs_check: {"ok" if not errors else str(len(errors)) + " mismatch(es)"}')
sys.exit(1 if errors else 0)
