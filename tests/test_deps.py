"""tests/test_deps.py — every Python module a test, benchmark or tool imports
is provided by a Debian package that `make deps` installs (DEPS_PKGS in the
Makefile), so a fresh machine after `make deps` runs all of them.

Scans tests/*.py, tools/*.py, bench/**/*.py and the Python inside shell
scripts (tests/*.sh, tools/*.sh, bench/*.sh: lines of `python3 -c` and
heredocs that start with import/from) for imports, optional ones (inside
try/except ImportError) included: an optional import still names a package
the project relies on. Modules of the standard library and the project's
own (a .py beside the scanned files) need nothing; any other module must map
to a package in DEPS_PKGS. Where the module is installed here, the package
that owns its file (dpkg -S) must be that package, so the map cannot drift;
a module installed outside Debian (pip) fails.
"""
import ast
import glob
import importlib.util
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Module -> Debian package, for modules the project uses or is likely to.
KNOWN = {
    "msgpack": "python3-msgpack",
    "numpy": "python3-numpy",
    "torch": "python3-torch",
    "matplotlib": "python3-matplotlib",
    "scipy": "python3-scipy",
    "yaml": "python3-yaml",
    "xxhash": "python3-xxhash",
    "safetensors": "python3-safetensors",
    "requests": "python3-requests",
}

failures = 0


def report(ok, name, why=""):
    global failures
    if ok:
        print("PASS %s" % name)
    else:
        failures += 1
        print("FAIL %s: %s" % (name, why))


def deps_pkgs():
    """The packages of every `DEPS_PKGS =` / `+=` line (with continuations)."""
    text = open(os.path.join(ROOT, "Makefile")).read()
    pkgs = set()
    for m in re.finditer(r"^DEPS_PKGS\s*\+?=\s*((?:.*\\\n)*.*)$", text, re.M):
        pkgs |= set(m.group(1).replace("\\\n", " ").split())
    return pkgs or None


def local_modules():
    names = set()
    for d in ("tests", "tools", "bench"):
        for f in glob.glob(os.path.join(ROOT, d, "**", "*.py"), recursive=True):
            names.add(os.path.splitext(os.path.basename(f))[0])
    return names


def imports_of_source(src, where):
    """(module, where:line) for every absolute import in Python source."""
    out = []
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        return [("<syntax error: %s>" % e, where)]
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                out.append((a.name.split(".")[0], "%s:%d" % (where, n.lineno)))
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            out.append((n.module.split(".")[0], "%s:%d" % (where, n.lineno)))
    return out


SH_IMPORT = re.compile(r"^\s*(?:import\s+([A-Za-z_][\w.]*)|from\s+([A-Za-z_][\w.]*)\s+import\b)")
SH_DASH_C = re.compile(r"python3?\S*\s+-c\s+(['\"])(.*?)\1")


def imports_of_shell(path):
    out = []
    rel = os.path.relpath(path, ROOT)
    for i, line in enumerate(open(path, errors="replace"), 1):
        for m in SH_DASH_C.finditer(line):
            for stmt in m.group(2).split(";"):
                mm = SH_IMPORT.match(stmt)
                if mm:
                    out.append(((mm.group(1) or mm.group(2)).split(".")[0], "%s:%d" % (rel, i)))
        mm = SH_IMPORT.match(line)
        if mm:
            out.append(((mm.group(1) or mm.group(2)).split(".")[0], "%s:%d" % (rel, i)))
    return out


def scan():
    found = []
    for pat in ("tests/*.py", "tools/*.py", "bench/**/*.py"):
        for f in sorted(glob.glob(os.path.join(ROOT, pat), recursive=True)):
            found += imports_of_source(open(f).read(), os.path.relpath(f, ROOT))
    for pat in ("tests/*.sh", "tools/*.sh", "bench/*.sh"):
        for f in sorted(glob.glob(os.path.join(ROOT, pat))):
            found += imports_of_shell(f)
    return found


def problems(found, pkgs, local):
    """Messages for imports make deps would not provide."""
    out = []
    for mod, where in found:
        if mod.startswith("<"):
            out.append("%s: %s" % (where, mod))
            continue
        if mod in sys.stdlib_module_names or mod in local or mod == "__future__":
            continue
        pkg = KNOWN.get(mod)
        if pkg is None:
            out.append("%s imports %s, which no Debian package in this test's map provides;"
                       " add the module's package to DEPS_PKGS and to KNOWN in tests/test_deps.py"
                       % (where, mod))
        elif pkg not in pkgs:
            out.append("%s imports %s (Debian package %s), which is not in DEPS_PKGS"
                       % (where, mod, pkg))
    return out


def owner_package(mod):
    """(package, file) owning the installed module, or (None, file/None)."""
    try:
        spec = importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None, None
    path = spec.origin
    if spec.submodule_search_locations:
        path = list(spec.submodule_search_locations)[0]
    if not path:
        return None, None
    r = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None, path
    return r.stdout.split(":")[0].strip(), path


def main():
    pkgs = deps_pkgs()
    report(bool(pkgs), "deps_pkgs_read", "no DEPS_PKGS line in the Makefile")
    if not pkgs:
        return
    local = local_modules()
    found = scan()
    report(len(found) > 0, "imports_found", "the scan found no imports at all")

    # The checker itself: an unknown module and a known one missing from the
    # list are both reported; stdlib and local modules are not.
    demo = imports_of_source("import os\nimport lindmodel\nimport frobnicate_xyz\n"
                             "try:\n    import torch\nexcept ImportError:\n    torch = None\n",
                             "demo.py")
    demo_msgs = problems(demo, pkgs - {"python3-torch"}, local)
    report(len(demo_msgs) == 2 and "frobnicate_xyz" in demo_msgs[0] and "torch" in demo_msgs[1],
           "checker_catches_missing", "on a planted example it reported %r" % demo_msgs)

    msgs = problems(found, pkgs, local)
    report(not msgs, "imports_provided_by_deps", "; ".join(msgs))

    # The map agrees with dpkg for every third-party module in use here.
    bad = []
    used = sorted({m for m, _ in found if m in KNOWN})
    for mod in used:
        pkg, path = owner_package(mod)
        if path is None:
            continue    # not installed here: make deps would install it
        if pkg is None:
            bad.append("%s is installed from outside Debian (%s)" % (mod, path))
        elif pkg != KNOWN[mod]:
            bad.append("%s comes from %s, the map says %s" % (mod, pkg, KNOWN[mod]))
    report(not bad, "module_packages_match_dpkg", "; ".join(bad))


main()
sys.exit(1 if failures else 0)
