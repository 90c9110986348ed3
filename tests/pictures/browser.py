"""One headless Chromium for the tests of a module, driven over its remote-debugging protocol.

The protocol runs over a websocket; the client here is the stdlib's socket with the few lines of
RFC 6455 a client needs (masked text frames out, unmasked frames in). Chromium listens on
127.0.0.1 on a port it picks (``--remote-debugging-port=0``) and writes it to
``DevToolsActivePort`` in its profile directory. ``--host-resolver-rules`` resolves every name to
nothing, so a page that tried to fetch from anywhere but 127.0.0.1 could not, and the Network
domain's log says what it tried.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.request import urlopen


class WebSocket:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        assert url.startswith("ws://"), url
        hostport, _, path = url[len("ws://") :].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            assert chunk, "the browser closed the connection during the handshake"
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 101"), status
        self.buffer = rest

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the browser closed the connection"
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def send(self, text: str) -> None:
        payload = text.encode()
        head = bytearray([0x81])  # FIN, text
        if len(payload) < 126:
            head.append(0x80 | len(payload))
        elif len(payload) < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", len(payload))
        mask = os.urandom(4)
        self.sock.sendall(bytes(head) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack("!H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode == 0x8:
                raise ConnectionError("the browser closed the websocket")
            if opcode in (0x9, 0xA):  # ping/pong: not used by Chromium's endpoint, skipped
                continue
            message += payload
            if first & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


@dataclass
class Tab:
    """One page target: commands by id, events kept in order."""

    ws: WebSocket
    next_id: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    #: What the last page's scripts threw, and what it logged as an error (a refused fetch, say).
    errors: list[str] = field(default_factory=list)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == ident:
                assert "error" not in message, message
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for index, event in enumerate(self.events):
                if event["method"] == method:
                    return self.events.pop(index)
            message = json.loads(self.ws.receive())
            if "method" in message:
                self.events.append(message)
        raise AssertionError(f"no {method} within {timeout}s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def open(self, path: Path) -> list[str]:
        """Navigate to a file, wait for its load event; the URLs of every request it made."""
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_event("Page.loadEventFired")
        self.evaluate("0")  # drain events sent before the load event's answer
        self.errors = [
            json.dumps(e["params"])
            for e in self.events
            if e["method"] == "Runtime.exceptionThrown"
            or e["method"] == "Log.entryAdded"
            and e["params"]["entry"]["level"] == "error"
        ]
        return [
            e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"
        ]

    def screenshot(self, scale: float = 0.25) -> bytes:
        """The top of the page (1280x900 CSS pixels) as a PNG, scaled down (decoding it here is pure Python)."""
        clip = {"x": 0, "y": 0, "width": 1280, "height": 900, "scale": scale}
        return base64.b64decode(self.call("Page.captureScreenshot", format="png", clip=clip)["data"])

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) in the middle of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)


@dataclass
class Browser:
    process: subprocess.Popen[bytes]
    port: int
    tab: Tab


def start_browser(profile: Path, timeout: float = 60.0) -> Browser:
    # Through PATH: a test that did not declare needs("chromium") runs the guard's stand-in and fails.
    chromium = shutil.which("chromium")
    assert chromium is not None, "chromium is not installed (apt-get install chromium)"
    argv = [
        chromium,
        "--headless",
        "--no-sandbox",  # the tests run as root
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        "about:blank",
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not active.exists() or len(active.read_text().splitlines()) < 2:
            assert process.poll() is None, f"chromium exited {process.returncode}"
            assert time.monotonic() < deadline, "chromium wrote no DevToolsActivePort"
            time.sleep(0.05)
        port = int(active.read_text().splitlines()[0])
        with urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page = next(t for t in targets if t["type"] == "page")
        tab = Tab(WebSocket(page["webSocketDebuggerUrl"]))
        for domain in ("Page", "Network", "Runtime", "Log"):
            tab.call(f"{domain}.enable")
        return Browser(process, port, tab)
    except BaseException:
        stop_browser(process)
        raise


def stop_browser(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def running_browser(profile: Path) -> Iterator[Browser]:
    browser = start_browser(profile)
    try:
        yield browser
    finally:
        browser.tab.ws.close()
        stop_browser(browser.process)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered rows (RGB or RGBA bytes) of an 8-bit non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, chunks, header = 8, b"", b""
    while offset < len(data):
        (length,) = struct.unpack("!I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks += body
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack("!IIBBBBB", header)
    assert depth == 8 and interlace == 0 and colour in (2, 6), (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(chunks)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                guess = left + up - corner
                pa, pb, pc = abs(guess - left), abs(guess - up), abs(guess - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[x] = (line[x] + best) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def colours(data: bytes, step: int = 4) -> dict[tuple[int, int, int], int]:
    """How many sampled pixels (every ``step``-th row and column) have each colour."""
    width, height, rows = png_pixels(data)
    channels = len(rows[0]) // width
    seen: dict[tuple[int, int, int], int] = {}
    for row in rows[::step]:
        for x in range(0, width * channels, channels * step):
            pixel = (row[x], row[x + 1], row[x + 2])
            seen[pixel] = seen.get(pixel, 0) + 1
    return seen
