"""A real headless browser for the pages the project writes (report.html, history.html).

``PROBE`` is inserted at the top of <head> in a copy of the page: it collects errors, then, once
every ``div.plot`` holds plotly's svg.main-svg with a trace (or 20 s have passed), writes what it
found into ``<pre id="probe">``: the plots, those not drawn, the errors, whether a planted
``window.__pwned`` ran, each plot's title, and every resource the page loaded from elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', e => window.__errors.push('error: ' + (e.message || (e.target && e.target.src) || \
'resource')), true);
window.addEventListener('unhandledrejection', e => window.__errors.push('rejection: ' + e.reason));
const origError = console.error; \
console.error = (...a) => { window.__errors.push('console: ' + a.join(' ')); origError(...a); };
window.addEventListener('load', () => {
  let tries = 0;
  const check = () => {
    const plots = [...document.querySelectorAll('div.plot')];
    const drawn = d => d.querySelector('svg.main-svg') && d.getBoundingClientRect().width > 0 && \
d.querySelectorAll('.trace, .shapelayer path').length > 0;
    const missing = plots.filter(d => !drawn(d)).map(d => d.id + ' ' + d.getAttribute('aria-label'));
    if (missing.length && ++tries < 200) { setTimeout(check, 100); return; }
    const out = document.createElement('pre'); out.id = 'probe';
    out.textContent = JSON.stringify({plots: plots.length, missing: missing, errors: window.__errors, \
pwned: window.__pwned !== undefined,
                                      titles: plots.map(d => (d.querySelector('.gtitle') || {}).textContent),
                                      fetched: performance.getEntriesByType('resource').map(r => r.name)});
    document.body.appendChild(out);
  };
  check();
});
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_or_skip() -> str:
    """The browser; a failure under CI=true (scripts/install_system_deps.sh installs it), else a skip."""
    browser = chromium()
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (scripts/install_system_deps.sh installs it)")
        pytest.skip("chromium is not installed")
    return browser


def browser_args(browser: str, tmp_path: Path) -> list[str]:
    """Headless, no GPU, its own profile, no connection of its own to anything."""
    return [
        browser,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--user-data-dir=" + str(tmp_path / "profile"),
        "--virtual-time-budget=30000",
    ]


def probe_page(page: Path, tmp_path: Path) -> dict:
    """What ``PROBE`` found in ``page`` (a copy with the probe, opened in headless Chromium)."""
    browser = chromium_or_skip()
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    dom = subprocess.run(
        browser_args(browser, tmp_path) + ["--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return json.loads(dom.stdout.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))
