"""A real headless Chromium for tests, driven through its DevTools protocol over a pipe
(`--remote-debugging-pipe`: JSON messages ended by NUL on file descriptors 3 and 4), so no
WebDriver and no websocket library are needed. Debian's package is `chromium`.

Every page's console messages, uncaught exceptions, log entries (CSP refusals, failed
loads) and requested URLs are collected, so a test can assert there were none it did not
expect. Chromium's own background traffic is switched off and every host name resolves
nowhere but 127.0.0.1: nothing leaves the machine.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INSTALL_HINT = "needs Chromium for the headless dashboard tests: apt-get install chromium"

FLAGS = (
    "--headless=new",
    "--remote-debugging-pipe",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--hide-scrollbars",
)


def chromium_binary() -> str | None:
    """The Chromium executable on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    """Chromium answered a command with an error, or went away."""


@dataclass
class Page:
    """One tab, attached in flattened mode; what it logged and requested is kept."""

    browser: Chromium
    session: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def goto(self, url: str, timeout_s: float = 30) -> None:
        self.browser.events.clear()
        self.send("Page.navigate", {"url": url})
        self.browser.wait_event("Page.loadEventFired", self.session, timeout_s)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited); its exception raised."""
        out = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in out:
            raise BrowserError(f"{expression[:80]}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"never true: {expression}")
            self.browser.pump(0.1)

    def screenshot(self, path: Path, width: int = 1400) -> None:
        """A PNG of the whole page at `width` CSS pixels."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        self.browser.pump(0.3)
        shot = self.send("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(shot["data"]))


class Chromium:
    """A headless Chromium process and its DevTools pipe."""

    def __init__(self) -> None:
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError(INSTALL_HINT)
        self._profile = tempfile.TemporaryDirectory(prefix="jp-chromium-")
        self.log = Path(self._profile.name) / "chromium.log"
        read_end, self._out = os.pipe()
        self._in, write_end = os.pipe()
        # Above 4, so that neither redirection below overwrites the other's source.
        to_child = fcntl.fcntl(read_end, fcntl.F_DUPFD, 10)
        from_child = fcntl.fcntl(write_end, fcntl.F_DUPFD, 10)
        os.close(read_end)
        os.close(write_end)
        # Chromium reads commands on fd 3 and writes answers on fd 4.
        with self.log.open("wb") as log:
            self.proc = self._start(binary, to_child, from_child, log)
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        self._pages: dict[str, Page] = {}

    def _start(
        self, binary: str, to_child: int, from_child: int, log: Any
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                # bash, not sh: dash takes no descriptor above 9.
                "bash",
                "-c",
                f'exec "$@" 3<&{to_child} 4>&{from_child} {to_child}<&- {from_child}>&-',
                "bash",
                binary,
                *FLAGS,
                f"--user-data-dir={self._profile.name}",
                "about:blank",
            ],
            pass_fds=(to_child, from_child),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def said(self) -> str:
        """Its exit status and the end of what it wrote on stderr."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"exit {self.proc.poll()}: {text[-2000:]}"

    def close(self) -> None:
        with contextlib.suppress(BrowserError, TimeoutError, OSError):
            self.send("Browser.close", timeout_s=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._in, self._out):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def new_page(self) -> Page:
        """A fresh tab, with console, log, network and page events enabled."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session)
        self._pages[session] = page
        for domain in ("Runtime", "Log", "Network", "Page"):
            page.send(f"{domain}.enable")
        return page

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout_s: float = 30,
    ) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        try:
            os.write(self._out, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise BrowserError(f"Chromium went away: {self.said()}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            for reply in self._read(deadline):
                if reply.get("id") == ident:
                    if "error" in reply:
                        raise BrowserError(f"{method}: {reply['error']}")
                    result: dict[str, Any] = reply.get("result", {})
                    return result

    def pump(self, seconds: float) -> None:
        """Take in whatever Chromium says for `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            list(self._read(deadline, block=False))

    def wait_event(self, method: str, session: str | None, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for event in list(self.events):
                if event["method"] == method and event.get("sessionId") == session:
                    return event
            list(self._read(deadline))

    def _read(self, deadline: float, block: bool = True) -> list[dict[str, Any]]:
        """The messages that arrive before `deadline` (at least one, if `block`)."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                if block:
                    raise TimeoutError("Chromium did not answer in time")
                return []
            ready, _, _ = select.select([self._in], [], [], min(left, 0.1))
            if not ready:
                if not block:
                    return []
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium went away: {self.said()}")
            self._buffer += chunk
        *whole, self._buffer = self._buffer.split(b"\0")
        messages = [json.loads(m) for m in whole]
        for m in messages:
            if "method" in m:
                self._note(m)
        return messages

    def _note(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        page = self._pages.get(event.get("sessionId", ""))
        if page is None:
            return
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in {"error", "assert"}:
            page.console_errors.append(json.dumps(params.get("args"))[:500])
        elif method == "Runtime.exceptionThrown":
            page.console_errors.append(json.dumps(params.get("exceptionDetails"))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            page.console_errors.append(params["entry"].get("text", "")[:500])
        elif method == "Network.requestWillBeSent":
            page.requests.append(params["request"]["url"])
