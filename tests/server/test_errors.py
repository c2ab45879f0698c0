"""Every failure answers `{"error": {"code", "message", "field"?}}` and never a stack trace."""

from __future__ import annotations

import logging

import httpx
from fastapi.testclient import TestClient

from tunelab.server import roles
from tunelab.server.app import create_app


def assert_error_shape(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text
    return error


def test_unknown_route_is_a_json_404(live_server):
    assert_error_shape(live_server.client().get("/api/train/nothing-here"), 404, "not_found")
    assert_error_shape(live_server.client().get("/no-such-page.html"), 404, "not_found")


def test_wrong_method_is_a_json_405(live_server):
    error = assert_error_shape(live_server.client().delete("/api/train/status"), 405, "method_not_allowed")
    assert "DELETE" in error["message"]


def test_malformed_json_is_a_422_naming_the_body(live_server):
    response = live_server.client().post(
        "/api/train/start", content=b'{"model_name": ', headers={"content-type": "application/json"}
    )
    assert assert_error_shape(response, 422, "invalid_input")["field"] == "body"


def test_bad_query_values_name_their_parameter(live_server):
    error = assert_error_shape(live_server.client().get("/api/runs", params={"limit": "many"}), 422, "invalid_input")
    assert error["field"] == "limit"
    error = assert_error_shape(live_server.client().get("/api/train/plot.png", params={"theme": "neon"}), 422, "invalid_input")
    assert error["field"] == "theme"


def test_unknown_run_is_a_404(live_server):
    client = live_server.client()
    assert_error_shape(client.get("/api/runs/424242"), 404, "run_not_found")
    assert_error_shape(client.patch("/api/runs/424242", json={"display_name": "x"}), 404, "run_not_found")
    assert_error_shape(client.delete("/api/runs/424242"), 404, "run_not_found")
    assert_error_shape(client.post("/api/runs/424242/resume"), 404, "run_not_found")


def test_stop_and_reset_without_a_run_are_conflicts(live_server):
    client = live_server.client()
    assert_error_shape(client.post("/api/train/stop", json={"save": True}), 409, "no_active_run")
    error = assert_error_shape(client.post("/api/train/stop", json={}), 422, "invalid_input")
    assert error["field"] == "save"


def test_docs_and_schema_are_served_without_a_token(live_server):
    docs = httpx.get(live_server.base_url + "/docs")
    assert docs.status_code == 200
    # Offline machines have no CDN: every asset the page names is served by tunelab itself.
    assert "cdn" not in docs.text.lower()
    for asset in ("/docs-assets/swagger-ui-bundle.js", "/docs-assets/swagger-ui.css"):
        assert asset in docs.text
        assert httpx.get(live_server.base_url + asset).status_code == 200
    schema = httpx.get(live_server.base_url + "/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert "security" not in schema["paths"]["/api/health"]["get"]
    assert schema["paths"]["/api/train/start"]["post"]["security"] == [{"bearer": []}]


def test_unexpected_errors_are_logged_not_sent(home, caplog, monkeypatch):
    app = create_app(token="t")
    secret_detail = "internal detail that must stay on the server"

    def explode():
        raise RuntimeError(secret_detail)

    app.add_api_route("/api/explode", explode)
    monkeypatch.setitem(roles.RULES, ("GET", "/api/explode"), roles.READ)  # a route without a rule is refused
    with TestClient(app, raise_server_exceptions=False) as client, caplog.at_level(logging.ERROR, "tunelab.server"):
        response = client.get("/api/explode", headers={"Authorization": "Bearer t"})
    assert_error_shape(response, 500, "internal_error")
    assert secret_detail not in response.text
    assert any(secret_detail in (r.exc_text or "") or (r.exc_info and secret_detail in str(r.exc_info[1])) for r in caplog.records)


def test_the_page_is_public_and_never_shadows_the_api(home, tmp_path):
    page = tmp_path / "page"
    page.mkdir()
    (page / "index.html").write_text("<!doctype html><title>tunelab</title>")
    app = create_app(token="t", static_dir=page)
    with TestClient(app) as client:
        index = client.get("/")
        assert index.status_code == 200 and "<title>tunelab</title>" in index.text
        auth = {"Authorization": "Bearer t"}
        # An unknown API path is the API's 404, whatever the method, not a static-file answer.
        assert_error_shape(client.post("/api/nothing", headers=auth), 404, "not_found")
        assert_error_shape(client.post("/api/train/status", headers=auth), 405, "method_not_allowed")
        assert client.get("/api/train/status", headers=auth).json()["phase"] == "idle"
