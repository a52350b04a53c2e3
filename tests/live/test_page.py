"""The live viewer in a real headless Chromium (Playwright).

Skipped only where /usr/bin/chromium is missing and CI is not set; under
CI=true it runs (CI installs Debian's chromium).
"""

import os
import queue
import shutil
import tempfile
import time

import numpy as np
import pytest
from cases import parallel_phantom_scan

from leveret.live import Frame, LiveReconstructor
from leveret.live.server import MAX_AXIAL, LiveServer, LiveSession, to_uint8

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM) and os.environ.get("CI", "").lower() != "true":
    pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium); runs under CI=true", allow_module_level=True)
if os.environ.get("CI", "").lower() == "true":
    import playwright.sync_api as sync_api  # a test extra: CI must have it
else:
    sync_api = pytest.importorskip("playwright.sync_api")

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
N, ROWS, VIEWS = 48, 16, 60


def js_checksum(pixels: np.ndarray) -> int:
    """The page's checksum of a drawn 8-bit image (app.js)."""
    s = 0
    for v in pixels.reshape(-1).tolist():
        s = (s * 31 + v) & 0xFFFFFFFF
    return s


@pytest.fixture(scope="module")
def scan():
    return parallel_phantom_scan(N, ROWS, VIEWS)


class FedSource:
    """Frames the test puts in ``frames``; ``bad_messages`` as a ZeroMQ source counts them."""

    def __init__(self):
        self.frames: queue.Queue = queue.Queue()
        self.bad_messages = 0

    def __iter__(self):
        while True:
            f = self.frames.get()
            if f is None:
                return
            yield f

    def close(self):
        self.frames.put(None)


@pytest.fixture
def viewer(scan, request):
    """The page of a session fed by the test; ``request.param``: LiveSession keywords."""
    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    source = FedSource()
    frames = source.frames
    session = LiveSession(rec, source, **getattr(request, "param", {}))
    server = LiveServer(session, port=0)
    url = server.start()
    session.start()
    profile = tempfile.mkdtemp(prefix="leveret-chromium-")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page()
        page.goto(url)
        yield page, frames, rec, session
        browser.close()
    frames.put(None)
    session.stop()
    server.stop()
    shutil.rmtree(profile, ignore_errors=True)


def _canvas(page, name):
    return page.eval_on_selector(
        f"#slice-{name}", "c => ({views: Number(c.dataset.views || -1), checksum: Number(c.dataset.checksum || -1)})"
    )


def test_page_loads_updates_as_frames_arrive_and_moves_slices(viewer, scan):
    page, frames, rec, session = viewer
    angles, g, proj = scan
    assert page.title() == "leveret live"
    page.wait_for_function("document.getElementById('stat-status').textContent !== 'connecting'")

    for i in range(10):
        frames.put(Frame(proj[i], i, angle=angles[i]))
    page.wait_for_function("document.getElementById('slice-xz').dataset.views === '10'", timeout=20000)
    before = _canvas(page, "xz")

    for i in range(10, 30):
        frames.put(Frame(proj[i], i, angle=angles[i]))
    page.wait_for_function("document.getElementById('slice-xz').dataset.views === '30'", timeout=20000)
    after = _canvas(page, "xz")
    assert after["checksum"] != before["checksum"]  # the slices change as frames arrive
    assert page.inner_text("#stat-views") == "30"
    sino = page.eval_on_selector("#slice-sinogram", "c => [c.width, c.height]")
    assert sino == [N, 30]

    # move the xz slice (y) with its slider, while no frame arrives
    y_new = float(g.default_volume().coordinates("y")[5])
    page.eval_on_selector("#point-y", f"e => {{ e.value = {y_new}; e.dispatchEvent(new Event('input')); }}")
    page.wait_for_function(
        f"window.leveretLive.lastState.slices.find(s => s.name === 'xz').origin[1] === {y_new}"
        " && document.getElementById('slice-xz').dataset.checksum !== "
        f"'{after['checksum']}'",
        timeout=20000,
    )
    # what the page shows is the moved slice recomputed from all 30 frames
    fresh = LiveReconstructor(g.default_volume(), g, backend="cpu")
    fresh.watch_orthogonal(point=(0.0, y_new, 0.0))
    fresh.add(proj[:30], angles[:30])
    np.testing.assert_allclose(rec.slices()["xz"], fresh.slices()["xz"], rtol=0, atol=2e-6)

    def drawn_and_expected():
        lo, hi = page.evaluate("window.leveretLive.lastState.range")
        return _canvas(page, "xz"), js_checksum(to_uint8(rec.slices()["xz"], lo, hi))

    deadline = time.monotonic() + 20  # until the last push of this version has landed
    shown, expected = drawn_and_expected()
    while shown["checksum"] != expected and time.monotonic() < deadline:
        page.wait_for_timeout(50)
        shown, expected = drawn_and_expected()
    assert shown["views"] == 30
    assert shown["checksum"] == expected


def test_page_shows_rejected_frames_and_axial_slices(viewer, scan):
    page, frames, rec, session = viewer
    angles, g, proj = scan
    frames.put(Frame(proj[0], 0, angle=angles[0]))
    frames.put(Frame(proj[1][:, :5], 1, angle=angles[1]))  # wrong shape: rejected, counted
    frames.put(Frame(proj[3], 3, angle=angles[3]))  # frame 2 never comes: 1 and 2 missing
    page.wait_for_function("document.getElementById('stat-rejected').textContent === '1'", timeout=20000)
    page.wait_for_function("document.getElementById('stat-missing').textContent === '2'", timeout=20000)
    page.fill("#axial-z", "-2, 3")
    page.click("#axial-apply")
    page.wait_for_selector("#slice-z1", timeout=20000)
    page.wait_for_function("document.getElementById('slice-z1').dataset.views === '2'", timeout=20000)


@pytest.mark.parametrize("viewer", [{"max_views": 2}], indirect=True)
def test_page_shows_dropped_frames_and_bad_messages(viewer, scan):
    page, frames, rec, session = viewer
    angles, g, proj = scan
    session.source.bad_messages = 3  # as a ZeroMQ source counts undecodable messages
    for i in range(5):  # room for 2 views: 3 dropped
        frames.put(Frame(proj[i], i, angle=angles[i]))
    page.wait_for_function("document.getElementById('stat-dropped').textContent === '3'", timeout=20000)
    page.wait_for_function("document.getElementById('stat-bad').textContent === '3'", timeout=20000)
    assert page.get_attribute("#stat-dropped", "title") == "3 store full"
    assert page.inner_text("#stat-views") == "2"


def test_page_shows_why_too_many_axial_slices_are_refused(viewer, scan):
    page, frames, rec, session = viewer
    page.wait_for_function("document.getElementById('stat-status').textContent !== 'connecting'")
    page.fill("#axial-z", ", ".join(str(z) for z in range(MAX_AXIAL + 1)))
    page.click("#axial-apply")
    page.wait_for_function("document.getElementById('message').textContent.includes('at most')", timeout=20000)
    assert page.inner_text("#message") == f"axial: at most {MAX_AXIAL} axial slices at once, got {MAX_AXIAL + 1}"
    assert [s.name for s in rec.watched] == ["xy", "xz", "yz"]


def test_page_opened_with_its_token_works_and_without_it_is_refused(scan):
    """The address with ?token= sets the cookie and reloads the page without
    the token in the address bar; the page's scripts and websocket then carry
    the cookie. Another browser profile without the token gets 401."""
    angles, g, proj = scan
    rec = LiveReconstructor(g.default_volume(), g, backend="cpu")
    source = FedSource()
    session = LiveSession(rec, source)
    server = LiveServer(session, port=0, token="a-token-for-the-page-test")
    url = server.start()
    session.start()
    profile = tempfile.mkdtemp(prefix="leveret-chromium-")
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page()
            assert url.endswith("/?token=a-token-for-the-page-test")
            page.goto(url)
            assert page.url == f"http://127.0.0.1:{server.port}/"  # the token left the address bar
            for i in range(3):
                source.frames.put(Frame(proj[i], i, angle=angles[i]))
            page.wait_for_function("document.getElementById('stat-views').textContent === '3'", timeout=20000)
            browser.clear_cookies()
            response = page.goto(f"http://127.0.0.1:{server.port}/")
            assert response.status == 401
            browser.close()
    finally:
        source.frames.put(None)
        session.stop()
        server.stop()
        shutil.rmtree(profile, ignore_errors=True)
