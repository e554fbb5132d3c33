#!/usr/bin/python3
"""tests/test_lindctl_docs.py — the documents say what the programs do.

1. Every `lind ...` / `lindctl ...` command line shown in README.md and
   docs/*.md (code blocks and inline code) names a real subcommand, and
   every option it uses is one that subcommand's --help lists.
2. Every ```console block is replayed against a fresh `lind serve` on the
   shipped model: each `$ ` line runs with `sh -c` (build/ first on PATH,
   LIND_SOCKET set) and its stdout must equal the lines below it.
"""
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

B = os.environ.get("LIND_BUILD", "build")
# Time bounds: seconds times SLOW, as in tests/daemon_harness.py (LIND_TEST_TIME_SCALE).
SLOW = max(1.0, float(os.environ.get("LIND_TEST_TIME_SCALE") or 1)) * \
    (5 if os.environ.get("LIND_SANITIZED") == "1" else 1)
DOCS = ["README.md"] + sorted(glob.glob("docs/*.md"))
failed = 0


def report(name, ok, why=""):
    global failed
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
    if not ok:
        failed += 1


def helptext(prog, sub):
    r = subprocess.run([f"{B}/{prog}", sub, "--help"], capture_output=True, text=True)
    return r.returncode, r.stdout


# ---- 1. command lines name real subcommands and options ---------------------

CMD = re.compile(r"(?:^|[\s`(])(?:\$ )?(?:build/)?(lindctl|lind)((?: +[^\s`|;&)]+)*)")
def subcommands(prog):
    """The subcommands a program's --help lists under "commands:" (2-space indent)."""
    out = subprocess.run([f"{B}/{prog}", "--help"], capture_output=True, text=True).stdout
    subs, inside = ["help"], False
    for line in out.splitlines():
        if line.strip() == "commands:":
            inside = True
        elif inside and re.match(r"^  [a-z]", line):
            subs.append(line.split()[0])
        elif inside:
            inside = False
    return subs


SUBS = {"lind": subcommands("lind"), "lindctl": subcommands("lindctl")}
GLOBAL = {"lind": {"--help", "-h", "--version"},
          "lindctl": {"--socket", "--token-file", "--help", "-h", "--version"}}


def command_lines(text):
    """(line number, program, words) of command lines in code."""
    out, in_block = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        spans = [line] if in_block or line.startswith("    ") else re.findall(r"`([^`]+)`", line)
        for span in spans:
            m = re.match(r"\s*(?:\$ )?(?:build/)?(lindctl|lind)\b(.*)", span)
            if m:
                out.append((n, m.group(1), m.group(2).split()))
    return out


help_cache = {}
bad = []
checked = 0
for doc in DOCS:
    text = open(doc, encoding="utf-8").read()
    for n, prog, words in command_lines(text):
        # The subcommand is the first word that is not a global option.
        i = 0
        while i < len(words) and words[i] in GLOBAL[prog]:
            i += 2 if words[i] in ("--socket", "--token-file") else 1
        if i >= len(words) or not re.match(r"^[a-z-]+$", words[i]):
            continue    # prose like "lindctl's" or a bare program name
        sub = words[i]
        if sub not in SUBS[prog]:
            if sub.upper() != sub and sub not in ("is", "and", "the", "talks", "serves", "chat's"):
                bad.append(f"{doc}:{n}: {prog} {sub}: no such subcommand")
            continue
        if sub == "help":
            continue
        if (prog, sub) not in help_cache:
            help_cache[(prog, sub)] = helptext(prog, sub)
        rc, htext = help_cache[(prog, sub)]
        checked += 1
        for w in (p for w in words[i + 1:] for p in w.split("|")):
            w = w.strip("[](),.'\"")
            opt = re.match(r"^(--[a-z][a-z0-9-]*|-[a-zA-Z])(?:=.*)?$", w)
            if not opt or opt.group(1) in GLOBAL[prog]:
                continue
            if not re.search(r"(?<![\w-])" + re.escape(opt.group(1)) + r"(?![\w-])", htext):
                bad.append(f"{doc}:{n}: `{prog} {sub}` has no option {opt.group(1)}")
print(f"NOTE {checked} command lines checked against --help")
report("doc_command_lines", checked > 20 and not bad,
       f"{checked} checked; " + "; ".join(bad[:12]))

# ---- 2. console blocks replay ---------------------------------------------------


def console_blocks(text):
    blocks, cur = [], None
    for line in text.splitlines():
        if cur is None and line.strip() == "```console":
            cur = []
        elif cur is not None and line.strip() == "```":
            blocks.append(cur)
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


examples = []
for doc in DOCS:
    for blk in console_blocks(open(doc, encoding="utf-8").read()):
        steps = []
        for line in blk:
            if line.startswith("$ "):
                steps.append([line[2:], []])
            elif steps:
                steps[-1][1].append(line)
        examples.append((doc, steps))

if not examples:
    report("doc_console_blocks", False, "no ```console block found in the docs")
else:
    tmp = tempfile.mkdtemp(prefix="lind-docs-")
    sock = os.path.join(tmp, "lind.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    daemon = subprocess.Popen([f"{B}/lind", "serve", "--model", "models/default", "--socket", sock,
                               "--db", os.path.join(tmp, "lind.db"), "--backend", "cpu",
                               "--log-level", "warn"], stdout=log, stderr=log)
    try:
        deadline = time.time() + 60 * SLOW
        up = False
        while time.time() < deadline and not up:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock)
                s.close()
                up = True
            except OSError:
                time.sleep(0.05)
        env = dict(os.environ, LIND_SOCKET=sock,
                   PATH=os.path.abspath(B) + os.pathsep + os.environ.get("PATH", ""))
        for doc, steps in examples:
            for cmd, want in steps:
                r = subprocess.run(["sh", "-c", cmd], capture_output=True, env=env, cwd=tmp, timeout=120 * SLOW)
                got = r.stdout.decode("utf-8", "replace").rstrip("\n").split("\n") if r.stdout else []
                ok = got == want
                report(f"doc_example {cmd[:60]}", up and ok,
                       f"{doc}: wanted {want!r}, got {got!r} (stderr {r.stderr[-200:]!r})")
    finally:
        daemon.terminate()
        daemon.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)

sys.exit(1 if failed else 0)
