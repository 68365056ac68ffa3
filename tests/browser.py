"""Headless Chromium for the browser tests: Debian's `chromium` and `chromium-driver` driven by Selenium.

Where they are missing they are installed with apt-get if that is possible (root, or passwordless sudo); otherwise the
tests skip and say how to get them.
"""

import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest


PACKAGES = ["chromium", "chromium-driver"]
# These flags work on a machine without a GPU or network: without the networking ones, Chromium's own background
# connections are refused by a closed network and it stalls.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
]


BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]


def _binaries():
    return next(filter(None, map(shutil.which, BROWSERS)), None), shutil.which("chromedriver")


def _apt_get_install() -> str | None:
    """Install the packages; returns why it could not, or None."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    if os.geteuid() == 0:
        prefix = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return "installing them needs root or passwordless sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", *PACKAGES]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:  # perhaps stale package lists
        subprocess.run([*prefix, "apt-get", "update"], env=env, capture_output=True)
        result = subprocess.run(install, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            return f"`{' '.join(install)}` failed: {result.stderr.strip()[-500:]}"
    return None


@functools.cache
def chromium() -> tuple[str | None, str | None, str | None]:
    """(browser, driver, None) or (None, None, why not)."""
    browser, driver = _binaries()
    if browser and driver:
        return browser, driver, None
    problem = _apt_get_install()
    browser, driver = _binaries()
    if browser and driver:
        return browser, driver, None
    return None, None, problem or "the installed packages provide no chromium/chromedriver"


def require_chromium() -> tuple[str, str]:
    pytest.importorskip("selenium", reason="selenium is in the `dev` extra: pip install -e '.[dev]'")
    browser, driver, problem = chromium()
    if problem:
        pytest.skip(
            f"Chromium and chromedriver are not installed and could not be installed here ({problem}). Debian: "
            "`sudo apt-get install chromium chromium-driver`; Ubuntu: `sudo apt-get install chromium-browser "
            f"chromium-chromedriver`; elsewhere put Chromium or Chrome ({', '.join(BROWSERS)}) and the matching "
            "chromedriver on the PATH."
        )
    return browser, driver


@contextlib.contextmanager
def chrome():
    """A headless Chromium session with a fresh profile; it records the network requests of the pages it opens."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        session = webdriver.Chrome(service=Service(driver), options=options)
        try:
            yield session
        finally:
            session.quit()


def requested_urls(session) -> list[str]:
    """The URLs the browser has requested since the last call (from Chromium's performance log)."""
    urls = []
    for entry in session.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def static_server(directory):
    """Serve `directory` on a free port of 127.0.0.1; yields the base URL."""

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
