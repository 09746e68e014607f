"""`modelzip view` in a real browser: Playwright drives headless Chromium (Debian's
`chromium`, no browser download) over the page the CLI serves on 127.0.0.1.

Each test starts `modelzip view ARCHIVE` (port 0), reads the URL it prints, and stops it at
the end. What the page shows is compared with the CLI's own reports (`tags --json`,
`show --json`, `diff --json`). Screenshots of each view go to target/view-screenshots/.
Without Playwright or Chromium these tests skip, except under test.sh
(MODELZIP_REQUIRE_BROWSER=1), which installs both and where a skip is a failure.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import HOSTILE, PADDLE_FIXTURES, REPO, RangeHandler, cli_json, cli_path, run_cli

SHOTS = REPO / "target" / "view-screenshots"
PERSISTABLES = PADDLE_FIXTURES / "mlp_persistables"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser():
    """Playwright's sync API and a Chromium, or a skip (a failure under test.sh)."""
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        missing = "the playwright package"
    else:
        missing = None if chromium_path() else "a chromium executable"
    if missing:
        if os.environ.get("MODELZIP_REQUIRE_BROWSER"):
            pytest.fail(f"{missing} is required (MODELZIP_REQUIRE_BROWSER is set)")
        pytest.skip(f"{missing} is not installed")


class Server:
    """`modelzip view ARCHIVE` on 127.0.0.1, port 0; `url` is what it printed."""

    def __init__(self, archive: Path | str):
        self.proc = subprocess.Popen(
            [str(cli_path()), "view", str(archive)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        # The page's URL ends the line (an http:// archive's URL may come before it).
        urls = re.findall(r"(http://127\.0\.0\.1:\d+/)(?:\s|$)", line)
        if not urls:
            self.stop()
            raise AssertionError(f"no URL printed: {line!r} {self.proc.stderr.read()!r}")
        self.url = urls[-1]

    def get(self, path: str):
        """(status, JSON body) of an API request."""
        try:
            with urllib.request.urlopen(self.url + path) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def browser():
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector("body[data-ready]", state="attached")
    return page


def make_archive(path: Path) -> None:
    """The quickstart's archive (FP32 and INT8 of the MLP Paddle wrote) and three
    checkpoints packed with --step and --metric, one of them without `acc`."""
    run_cli("import-paddle", path, "--tag", "fp32",
            PADDLE_FIXTURES / "mlp.pdmodel", PADDLE_FIXTURES / "mlp.pdiparams", "-q")
    run_cli("quantize", path, "--from", "fp32", "--tag", "int8", "--per-channel", "-q")
    for step, loss, acc in [(100, 0.9, 0.5), (200, 0.4, None), (300, 0.6, 0.8)]:
        metrics = ["--metric", f"loss={loss}", "--metric", "lr=0.001"]
        if acc is not None:
            metrics += ["--metric", f"acc={acc}"]
        run_cli("pack", path, PERSISTABLES, "--tag", f"step-{step:09d}",
                "--step", step, *metrics, "-q")


@pytest.fixture
def served(tmp):
    archive = tmp / "demo.zip"
    make_archive(archive)
    server = Server(archive)
    yield archive, server
    server.stop()


def test_page_lists_the_tags_metrics_params_diff_and_graph(browser, served):
    archive, server = served
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = open_page(browser, server.url)
    assert page.locator('[data-testid="error-panel"]').is_hidden()

    # Exactly the tags of `tags --json`, in archive order.
    tags = cli_json("tags", archive)
    rows = page.locator('[data-testid="tag-row"]')
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.tag)") == [t["name"] for t in tags["tags"]]
    page.locator("#timeline-section").screenshot(path=str(SHOTS / "timeline.png"))

    # One chart per metric, one point per checkpoint that has it.
    charts = page.locator('[data-testid="metric-chart"]')
    assert charts.evaluate_all("cs => cs.map(c => c.dataset.metric)") == ["acc", "loss", "lr"]
    points = lambda m: page.locator(f'[data-testid="metric-chart"][data-metric="{m}"] [data-testid="metric-point"]')
    assert points("loss").evaluate_all("ps => ps.map(p => p.dataset.tag)") == [
        "step-000000100", "step-000000200", "step-000000300"]
    assert points("acc").evaluate_all("ps => ps.map(p => p.dataset.tag)") == [
        "step-000000100", "step-000000300"]
    # The best loss (the smallest) and the best acc (the largest) are marked.
    assert page.locator('[data-metric="loss"] .pt.best').get_attribute("data-tag") == "step-000000200"
    assert page.locator('[data-metric="acc"] .pt.best').get_attribute("data-tag") == "step-000000300"
    page.locator("#metrics-section").screenshot(path=str(SHOTS / "metrics.png"))

    # Clicking a tag shows its parameters: those of `show --json`.
    rows.nth(0).click()
    show = cli_json("show", archive, "--tag", "fp32")
    prow = page.locator('[data-testid="param-row"]')
    prow.first.wait_for()
    assert prow.evaluate_all("rs => rs.map(r => r.dataset.name)") == [p["name"] for p in show["params"]]
    # Filtering narrows the table; a parameter's statistics are computed on click.
    page.fill('[data-testid="param-filter"]', "w_0")
    assert prow.evaluate_all("rs => rs.map(r => r.dataset.name)") == [
        p["name"] for p in show["params"] if "w_0" in p["name"]]
    prow.first.click()
    page.locator('[data-testid="param-histogram"]').wait_for()
    stats = page.locator('[data-testid="param-stats"]').inner_text()
    assert "mean" in stats and "std" in stats
    page.locator("#params-section").screenshot(path=str(SHOTS / "params.png"))

    # The diff of two tags shows the rows `diff --json` gives.
    page.select_option('[data-testid="diff-select-a"]', "fp32")
    page.select_option('[data-testid="diff-select-b"]', "int8")
    page.click('[data-testid="diff-run"]')
    page.wait_for_function("document.getElementById('diff-summary').textContent.includes('added')")
    diff = cli_json("diff", archive, "fp32", "int8")
    want = sorted([("added", n) for n in diff["added"]] + [("removed", n) for n in diff["removed"]]
                  + [("changed", c["name"]) for c in diff["changed"]])
    got = page.locator('[data-testid="diff-row"]').evaluate_all(
        "rs => rs.map(r => [r.dataset.change, r.dataset.name])")
    assert sorted(map(tuple, got)) == want
    assert len(got) == len(want) > 0
    page.locator("#diff-section").screenshot(path=str(SHOTS / "diff.png"))

    # The graph of the quickstart's MLP: one node per op of every block.
    rows.nth(0).click()
    page.click('[data-testid="view-graph"]')
    page.locator('[data-testid="graph-node"]').first.wait_for()
    graph = cli_json_graph(archive, "fp32")
    ops = [op["type"] for block in graph["blocks"] for op in block["ops"]]
    got_ops = page.locator('[data-testid="graph-node"]').evaluate_all("ns => ns.map(n => n.dataset.op)")
    assert sorted(got_ops) == sorted(ops)
    assert "feed" in got_ops and "fetch" in got_ops
    # Clicking a node shows its op, inputs, outputs and attributes.
    page.locator('[data-testid="graph-node"][data-op="feed"]').first.click()
    details = page.locator('[data-testid="graph-details"]').inner_text()
    assert "feed" in details and "outputs" in details and "attributes" in details
    page.locator("#graph-section").screenshot(path=str(SHOTS / "graph.png"))
    page.screenshot(path=str(SHOTS / "page.png"), full_page=True)
    page.close()


def cli_json_graph(archive: Path, tag: str) -> dict:
    return json.loads(run_cli("graph", archive, "--tag", tag, "--format", "json").stdout)["graph"]


def test_a_checkpoint_saved_while_the_page_is_open_appears_on_reload(browser, served):
    archive, server = served
    page = open_page(browser, server.url)
    before = page.locator('[data-testid="tag-row"]').count()
    run_cli("pack", archive, PERSISTABLES, "--tag", "step-000000400",
            "--step", 400, "--metric", "loss=0.1", "-q")
    page.reload()
    page.wait_for_selector("body[data-ready]", state="attached")
    assert page.locator('[data-testid="tag-row"]').count() == before + 1
    assert page.locator('[data-testid="tag-row"]').last.get_attribute("data-tag") == "step-000000400"
    loss = page.locator('[data-metric="loss"] [data-testid="metric-point"]')
    assert loss.count() == 4
    assert page.locator('[data-metric="loss"] .pt.best').get_attribute("data-tag") == "step-000000400"
    page.close()


def test_api_validates_its_inputs(served):
    _, server = served
    assert server.get("api/tag?name=nope")[0] == 404
    assert server.get("api/tag")[0] == 400
    assert server.get("api/tag?name=%01x")[0] == 400
    assert server.get("api/param?tag=fp32&name=nope")[0] == 404
    assert server.get("api/param?tag=fp32&name=fc_0.w_0&bins=0")[0] == 400
    assert server.get("api/param?tag=fp32&name=fc_0.w_0&bins=x")[0] == 400
    status, doc = server.get("api/param?tag=fp32&name=fc_0.w_0&bins=10")
    assert status == 200 and sum(doc["histogram"]["counts"]) == doc["finite"] == 128
    assert server.get("api/diff?a=fp32&b=nope")[0] == 404
    assert server.get("../../etc/passwd")[0] == 404
    assert server.get("api/graph?tag=int8")[0] == 200
    # A request for another host name (a DNS name rebound to 127.0.0.1) is refused.
    req = urllib.request.Request(server.url + "api/archive", headers={"Host": "evil.example:80"})
    try:
        urllib.request.urlopen(req)
        raise AssertionError("a foreign Host header was served")
    except urllib.error.HTTPError as e:
        assert e.code == 403
    assert server.alive()


def test_graphs_of_onnx_tensorflow_and_pir_tags(browser, tmp):
    """ONNX nodes, TensorFlow nodes (constants included: they are GraphDef nodes) and PIR
    ops are the drawn nodes; ONNX inputs and initializers and PIR parameters are values,
    folded into edges."""
    archive = tmp / "g.zip"
    fixtures = REPO / "tests" / "fixtures"
    run_cli("import", archive, "--tag", "onnx", fixtures / "onnx" / "mlp.onnx", "-q")
    run_cli("import", archive, "--tag", "tf", fixtures / "tf" / "cnn.pb", "-q")
    pir = fixtures / "paddle" / "pir"
    run_cli("import", archive, "--tag", "pir", pir / "mlp.json", pir / "mlp.pdiparams", "-q")
    server = Server(archive)
    try:
        # A PIR program is drawn op by op, as the file lists them: its parameter ops are
        # values (folded into edges), every other op a node, and an op that reads another
        # op's result has an edge from it (read here from the file itself).
        program = json.loads((pir / "mlp.json").read_text())
        file_ops = [op for region in program["program"]["regions"]
                    for block in region["blocks"] for op in block["ops"]]
        pir_ops = [op["#"] for op in file_ops if op["#"] != "p"]
        status, g = server.get("api/graph?tag=pir")
        assert status == 200 and g["kind"] == "pir"
        assert sorted(n["op"] for n in g["nodes"]) == sorted(pir_ops)
        producer = {}
        for i, op in enumerate(file_ops):
            results = op.get("O", [])
            for r in results if isinstance(results, list) else [results]:
                producer[r["%"]] = i
        want_edges = sorted({(f"o{producer[v['%']]}", f"o{i}")
                             for i, op in enumerate(file_ops) if op["#"] != "p"
                             for v in op.get("I", [])
                             if file_ops[producer[v["%"]]]["#"] != "p"})
        assert sorted(tuple(e) for e in g["edges"]) == want_edges and want_edges
        page = open_page(browser, server.url)
        for tag, ops in [
            ("onnx", [n["op_type"] for n in cli_json_graph(archive, "onnx")["onnx"]["nodes"]]),
            ("tf", [n["op"] for n in cli_json_graph(archive, "tf")["tensorflow"]["nodes"]]),
            ("pir", pir_ops),
        ]:
            page.locator(f'[data-testid="tag-row"][data-tag="{tag}"]').click()
            page.locator('[data-testid="param-row"]').first.wait_for()
            page.click('[data-testid="view-graph"]')
            page.locator('[data-testid="graph-node"]').first.wait_for()
            got = page.locator('[data-testid="graph-node"]').evaluate_all(
                "ns => ns.map(n => n.dataset.op)")
            assert sorted(got) == sorted(ops), tag
            page.locator('[data-testid="graph-node"]').last.click()
            assert page.locator('[data-testid="graph-details"]').inner_text().strip()
        page.close()
    finally:
        server.stop()


def test_a_url_archive_is_served_like_a_local_one(tmp):
    """A URL (file://, read through the same object-store client as s3:// and https://):
    the same tag list, parameters and diff, and a new checkpoint appears on reload."""
    archive = tmp / "demo.zip"
    make_archive(archive)
    server = Server(archive.as_uri())
    try:
        status, doc = server.get("api/archive")
        assert status == 200
        assert [t["name"] for t in doc["tags"]] == [
            t["name"] for t in cli_json("tags", archive)["tags"]]
        status, tag = server.get("api/tag?name=fp32")
        assert status == 200 and len(tag["params"]) == 4
        status, diff = server.get("api/diff?a=fp32&b=int8")
        full = cli_json("diff", archive, "fp32", "int8")
        # `diff --json`'s document, with the lists' lengths (none cut at this size).
        assert status == 200 and {k: v for k, v in diff.items()
                                  if k not in ("counts", "truncated")} == full
        assert diff["truncated"] is False
        assert diff["counts"] == {k: len(full[k])
                                  for k in ("added", "removed", "changed", "shared", "copied")}
        run_cli("pack", archive, PERSISTABLES, "--tag", "step-000000400", "--step", 400, "-q")
        assert server.get("api/archive")[1]["tags"][-1]["name"] == "step-000000400"
    finally:
        server.stop()


def test_hostile_archives_give_an_error_panel_and_the_server_survives(browser, tmp):
    """Every archive of tests/hostile: the page shows an error panel or the archive (some
    are readable in part), every API request answers JSON, and the server stays up."""
    require_browser()
    # A copy: opening an archive rolls back a journal a killed writer left (as every
    # reader does), which must not change the repository's fixtures.
    hostile = tmp / "hostile"
    shutil.copytree(HOSTILE, hostile)
    names = sorted(p.name for p in hostile.glob("*.zip"))
    assert names
    page = browser.new_page()
    # Two of them (100,000 tags; a million parameter names) take seconds to refuse in a
    # debug build: waiting is allowed, failing to answer is not.
    page.set_default_timeout(180_000)
    errors = 0
    for name in names:
        server = Server(hostile / name)
        try:
            page.goto(server.url)
            page.wait_for_selector("body[data-ready]", state="attached")
            assert page.evaluate("document.body.dataset.ready") in ("yes", "error"), name
            status, doc = server.get("api/archive")
            if status != 200:
                errors += 1
                assert "error" in doc
                assert page.locator('[data-testid="error-panel"]').is_visible(), name
                assert page.locator('[data-testid="error-panel"]').inner_text().strip(), name
            else:
                assert page.evaluate("document.body.dataset.ready") == "yes", name
                for t in doc["tags"][:50]:
                    q = urllib.request.quote(t["name"], safe="")
                    for path in (f"api/tag?name={q}", f"api/graph?tag={q}",
                                 f"api/diff?a={q}&b={q}"):
                        st, body = server.get(path)
                        assert st == 200 or "error" in body, (name, path, st)
            assert server.alive(), name
            if name == "central-record-bad-signature.zip":
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / "hostile.png"))
        finally:
            server.stop()
    assert errors > len(names) // 2
    page.close()


def test_the_retention_policys_kept_and_removed_checkpoints_are_shown(browser, tmp):
    """A Checkpointer with keep_last=2 and the best 1 by loss: the timeline says which
    rule keeps each checkpoint, and the loss chart draws the removed ones hollow, from
    the record each save writes into metadata.json."""
    import numpy as np

    import modelzip

    archive = tmp / "run.zip"
    ck = modelzip.Checkpointer(archive, keep_last=2, keep_best=("loss", "min", 1))
    losses = {100: 0.9, 200: 0.2, 300: 0.7, 400: 0.5, 500: 0.6}
    for step, loss in losses.items():
        ck.save(step, {"w": np.full(4, step, dtype=np.float32)}, metrics={"loss": loss})
    assert ck.checkpoints() == ["step-000000200", "step-000000400", "step-000000500"]
    server = Server(archive)
    try:
        page = open_page(browser, server.url)
        kept = page.locator('[data-testid="tag-row"]').evaluate_all(
            "rs => rs.map(r => [r.dataset.tag, "
            "r.querySelector('[data-testid=tag-retention]').textContent])")
        assert kept == [
            ["step-000000200", "kept: best 1 lowest by loss"],
            ["step-000000400", "kept: last 2"],
            ["step-000000500", "kept: newest, last 2"],
        ]
        chart = page.locator('[data-metric="loss"]')
        points = chart.locator('[data-testid="metric-point"]').evaluate_all(
            "ps => ps.map(p => +p.dataset.step)")
        removed = chart.locator('[data-testid="metric-point-removed"]').evaluate_all(
            "ps => ps.map(p => [p.dataset.tag, +p.dataset.step, +p.dataset.value])")
        assert sorted(points) == [200, 400, 500]
        assert removed == [["step-000000100", 100, 0.9], ["step-000000300", 300, 0.7]]
        assert chart.locator(".pt.best").get_attribute("data-step") == "200"
        summary = page.locator('[data-testid="retention-summary"]').text_content()
        assert "the last 2" in summary and "the best 1 by loss (lowest)" in summary
        assert "2 checkpoints removed" in summary
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator("#metrics-section").screenshot(path=str(SHOTS / "retention.png"))
        page.close()
    finally:
        server.stop()


def test_host_warns_loudly_before_listening_beyond_the_loopback(tmp):
    """`--host` with a non-loopback address says so on stderr before it binds. The address
    is TEST-NET-1's (RFC 5737), which no machine has: the bind fails after the warning,
    so the test never listens beyond 127.0.0.1. A loopback `--host` gets no warning and
    serves, keeping the Host-header check."""
    archive = tmp / "demo.zip"
    make_archive(archive)
    r = subprocess.run([str(cli_path()), "view", str(archive), "--host", "192.0.2.1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "WARNING: --host 192.0.2.1 is not a loopback address" in r.stderr
    assert "no authentication" in r.stderr
    assert "cannot listen on 192.0.2.1" in r.stderr
    assert r.stdout == ""

    # An IPv4-mapped loopback address is the IPv4 address: bound so, and checked so.
    for host, bound in [("127.0.0.2", "127.0.0.2"), ("::ffff:127.0.0.1", "127.0.0.1")]:
        proc = subprocess.Popen([str(cli_path()), "view", str(archive), "--host", host],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            url = re.findall(r"(http://" + re.escape(bound) + r":\d+/)", line)
            assert url, line
            with urllib.request.urlopen(url[0] + "api/archive") as resp:
                assert resp.status == 200
            req = urllib.request.Request(url[0] + "api/archive",
                                         headers={"Host": "evil.example"})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req)
            assert e.value.code == 403
        finally:
            proc.kill()
            _, err = proc.communicate()
        assert "WARNING" not in err, (host, err)


def test_html_writes_a_static_page_that_needs_no_server(browser, tmp):
    archive = tmp / "demo.zip"
    make_archive(archive)
    out = tmp / "report.html"
    run_cli("view", archive, "--html", out)
    text = out.read_text()
    assert "<script src=" not in text and "http" not in text.split("</head>")[0]
    page = browser.new_page()
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]", state="attached")
    tags = [t["name"] for t in cli_json("tags", archive)["tags"]]
    assert page.locator('[data-testid="tag-row"]').evaluate_all(
        "rs => rs.map(r => r.dataset.tag)") == tags
    assert page.locator('[data-metric="loss"] [data-testid="metric-point"]').count() == 3
    page.locator('[data-testid="tag-row"]').nth(0).click()
    page.locator('[data-testid="param-row"]').first.wait_for()
    page.select_option('[data-testid="diff-select-a"]', "fp32")
    page.select_option('[data-testid="diff-select-b"]', "int8")
    page.click('[data-testid="diff-run"]')
    page.wait_for_function("document.getElementById('diff-summary').textContent.includes('added')")
    assert page.locator('[data-testid="diff-row"]').count() > 0
    page.close()


def test_html_keeps_names_that_look_like_markup_as_text(browser, tmp):
    """A parameter named like the end of a script, or like a comment opening one, is
    data in the static page: the page still runs and lists it as it is named."""
    import numpy as np
    import modelzip

    archive = tmp / "odd.zip"
    names = ["a</script><b>", "b<!--<script>", "c\u2028d"]
    modelzip.save(archive, "t", {n: np.ones((2, 2), np.float32) for n in names})
    out = tmp / "odd.html"
    run_cli("view", archive, "--html", out)
    assert "<!--<script>" not in out.read_text()
    page = browser.new_page()
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready]", state="attached")
    page.locator('[data-testid="tag-row"]').nth(0).click()
    page.locator('[data-testid="param-row"]').first.wait_for()
    listed = page.locator('[data-testid="param-row"]').evaluate_all(
        "rs => rs.map(r => r.dataset.name)")
    assert sorted(listed) == sorted(names)
    page.close()


def test_the_graph_pans_on_drag_and_zooms_at_the_pointer(browser, served):
    """Dragging the drawing moves the view by the pointer's travel; the wheel zooms in
    (a smaller viewBox) and out, keeping the point under the pointer in place."""
    _, server = served
    page = open_page(browser, server.url)
    page.locator('[data-testid="tag-row"][data-tag="fp32"]').click()
    page.locator('[data-testid="param-row"]').first.wait_for()
    page.click('[data-testid="view-graph"]')
    page.locator('[data-testid="graph-node"]').first.wait_for()
    svg = page.locator('[data-testid="graph-svg"]')

    def view_box():
        return [float(v) for v in svg.get_attribute("viewBox").split()]

    box = svg.bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    x0, y0, w0, h0 = view_box()
    # Zoom in at the centre: the box shrinks by 1.15 per notch around the same point.
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -100)
    page.wait_for_function(f"document.querySelector('[data-testid=graph-svg]')"
                           f".getAttribute('viewBox').split(' ')[2] < {w0}")
    x1, y1, w1, h1 = view_box()
    assert w1 == pytest.approx(w0 / 1.15, rel=1e-3) and h1 == pytest.approx(h0 / 1.15, rel=1e-3)
    centre_before = (x0 + w0 / 2, y0 + h0 / 2)
    centre_after = (x1 + w1 / 2, y1 + h1 / 2)
    assert centre_after == pytest.approx(centre_before, abs=w0 * 0.01)
    # Zoom back out.
    page.mouse.wheel(0, 100)
    page.wait_for_function(f"document.querySelector('[data-testid=graph-svg]')"
                           f".getAttribute('viewBox').split(' ')[2] > {w1}")
    assert view_box()[2] == pytest.approx(w0, rel=1e-3)
    # Drag 100 px right and 50 px down: the view moves left and up by that much of the
    # box, in drawing units.
    x2, y2, w2, h2 = view_box()
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 100, cy + 50, steps=5)
    page.mouse.up()
    x3, y3, w3, h3 = view_box()
    assert (w3, h3) == (w2, h2)
    assert x3 == pytest.approx(x2 - 100 / box["width"] * w2, rel=1e-3, abs=1e-6)
    assert y3 == pytest.approx(y2 - 50 / box["height"] * h2, rel=1e-3, abs=1e-6)
    page.close()


def test_open_starts_the_systems_browser_with_the_printed_url(tmp):
    """--open runs xdg-open (here a stand-in earlier on PATH that records its argument)
    with the URL the server printed."""
    archive = tmp / "o.zip"
    make_archive(archive)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    record = tmp / "opened.txt"
    opener = bin_dir / "xdg-open"
    opener.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > '{record}'\n")
    opener.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen([str(cli_path()), "view", str(archive), "--open"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", line).group(1)
        for _ in range(100):
            if record.exists() and record.read_text():
                break
            time.sleep(0.05)
        assert record.read_text() == url
        with urllib.request.urlopen(url + "api/archive") as r:
            assert r.status == 200
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_an_http_archive_is_served_like_a_local_one(tmp):
    """`modelzip view http://127.0.0.1:PORT/demo.zip` (a range-answering file server of
    this test, on 127.0.0.1) shows the tags and the diff `tags` and `diff` give for the
    same URL, and a checkpoint packed meanwhile appears."""
    archive = tmp / "site" / "demo.zip"
    archive.parent.mkdir()
    make_archive(archive)
    handler = functools.partial(RangeHandler, directory=str(archive.parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/demo.zip"
    try:
        server = Server(url)
        try:
            status, doc = server.get("api/archive")
            assert status == 200
            assert [t["name"] for t in doc["tags"]] == [
                t["name"] for t in cli_json("tags", url)["tags"]]
            status, diff = server.get("api/diff?a=fp32&b=int8")
            assert status == 200 and diff.pop("truncated") is False
            assert diff.pop("counts")["changed"] == 2
            assert diff == cli_json("diff", url, "fp32", "int8")
            # A checkpoint packed into the served file appears on the next request.
            run_cli("pack", archive, PERSISTABLES, "--tag", "step-000000400", "--step", 400,
                    "-q")
            assert server.get("api/archive")[1]["tags"][-1]["name"] == "step-000000400"
        finally:
            server.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_large_remote_tensor_is_sampled_by_ranges(tmp):
    """`/api/param` of a 32 MiB tensor of an http:// archive reads its header and the 16
    sampled runs (4 MiB) by range, not the whole tensor; the statistics are those of the
    values at the sampled places."""
    import numpy as np

    import modelzip

    archive = tmp / "site" / "big.zip"
    archive.parent.mkdir()
    big = np.arange(8192 * 1024, dtype=np.float32).reshape(8192, 1024)
    modelzip.save(archive, "t", {"big": big})
    served = []

    class Counting(RangeHandler):
        def copyfile(self, source, outputfile):
            before = source.tell()
            super().copyfile(source, outputfile)
            served.append(source.tell() - before)

    handler = functools.partial(Counting, directory=str(archive.parent))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        server = Server(f"http://127.0.0.1:{httpd.server_address[1]}/big.zip")
        try:
            assert server.get("api/archive")[0] == 200
            served.clear()
            status, doc = server.get("api/param?tag=t&name=big&bins=10")
            assert status == 200, doc
            assert doc["sampled"] is True and doc["read"] == 1 << 20, doc
            assert sum(served) < 6 << 20, served  # 4 MiB of runs, not 32 MiB
            # Runs of 64 rows from every 512th row.
            rows = np.concatenate([big[i * 512 : i * 512 + 64] for i in range(16)])
            assert doc["min"] == float(rows.min()) and doc["max"] == float(rows.max())
            assert doc["mean"] == pytest.approx(float(rows.astype(np.float64).mean()))
        finally:
            server.stop()
    finally:
        httpd.shutdown()
        httpd.server_close()
