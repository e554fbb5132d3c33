"""tests/openai_npm.py — the official `openai` npm client for the tests that
drive lind's HTTP API with it (tests/test_http_openai_npm.py,
tests/test_http_structured_npm.py): installed once from the npm registry
into ${XDG_CACHE_HOME:-~/.cache}/lind-npm-openai and reused."""
import json
import os
import shutil
import subprocess

from daemon_harness import SLOW, TMP

CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lind-npm-openai")
PACKAGE = "openai@4.104.0"
CLIENT = os.path.join(CACHE, "node_modules", "openai", "index.mjs")


def install():
    """None, or why the package is not there."""
    if not shutil.which("node") or not shutil.which("npm"):
        return "node/npm not installed (make deps installs nodejs)"
    if os.path.exists(CLIENT):
        return None
    os.makedirs(CACHE, exist_ok=True)
    try:
        r = subprocess.run(["npm", "install", "--prefix", CACHE, "--no-audit", "--no-fund", PACKAGE],
                           capture_output=True, text=True, timeout=600 * SLOW)
    except subprocess.TimeoutExpired:
        return "npm install timed out (registry unreachable?)"
    if r.returncode != 0 or not os.path.exists(CLIENT):
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["?"]
        return "npm install failed (registry unreachable?): " + tail[0]
    return None


def run_driver(js, args, timeout):
    """Run the ES module source js with node, given the client's path and
    args: the JSON object its last stdout line holds, or {"error": ...}
    with the end of what it printed. timeout: seconds (times SLOW)."""
    driver = os.path.join(TMP, "driver.mjs")
    with open(driver, "w") as f:
        f.write(js)
    r = subprocess.run(["node", driver, CLIENT] + list(args), capture_output=True, text=True,
                       timeout=timeout * SLOW)
    if r.returncode == 0:
        return json.loads(r.stdout.strip().splitlines()[-1])
    return {"error": (r.stderr or r.stdout)[-1500:]}
