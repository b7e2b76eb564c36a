"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
NUL-separated JSON on file descriptors 3 and 4), so no WebSocket client is needed: load a
page, collect every console error, uncaught exception and failed load, count elements,
take a screenshot. Every wait has a deadline; the browser's process group dies with the
session."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

DEADLINE_S = 60.0
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


DEBIAN_BINARY = "/usr/lib/chromium/chromium"   # Debian's /usr/bin/chromium is a shell launcher


def chromium_path() -> str | None:
    if os.access(DEBIAN_BINARY, os.X_OK):
        return DEBIAN_BINARY
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


class Browser:
    """One headless Chromium; `load(url)` returns what the page did."""

    def __init__(self, executable: str, width: int = 1280, height: int = 1600) -> None:
        self.profile = tempfile.mkdtemp(prefix="inferasim-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()

        def pipes_on_3_and_4() -> None:   # in the child: commands on fd 3, replies on fd 4
            reader, writer = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(reader, 3)
            os.dup2(writer, 4)

        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--disable-extensions", "--disable-background-networking", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(to_child_r, from_child_w, 3, 4), start_new_session=True, preexec_fn=pipes_on_3_and_4)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=DEADLINE_S)
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_child, json.dumps(message).encode() + b"\0")
        return self._until(lambda m: m.get("id") == message["id"])

    def _until(self, match, deadline_s: float = DEADLINE_S) -> dict:
        end = time.monotonic() + deadline_s
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                message = json.loads(raw)
                if match(message):
                    if "error" in message:
                        raise RuntimeError(f"DevTools: {message['error']}")
                    return message
                self.events.append(message)
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from Chromium within the deadline")
            ready, _, _ = select.select([self.from_child], [], [], left)
            if ready:
                chunk = os.read(self.from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the DevTools pipe")
                self.buffer += chunk

    def load(self, url: str, selectors: tuple[str, ...]) -> dict:
        """Open ``url``; (errors, element counts per CSS selector, PNG screenshot bytes)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": url}, session)
        self._until(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session)
        counts = {}
        for selector in selectors:
            expression = f"document.querySelectorAll({json.dumps(selector)}).length"
            reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
            counts[selector] = reply["result"]["result"]["value"]
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, session)
        return {"errors": self._errors(session), "counts": counts,
                "png": base64.b64decode(shot["result"]["data"])}

    def _errors(self, session: str) -> list[str]:
        found = []
        for event in self.events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append("exception: " + params["exceptionDetails"].get("text", ""))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        return found


def save(png: bytes, path: Path) -> Path:
    path.write_bytes(png)
    return path
