"""`POST /api/datasets/preview`: detected format, columns, row count and rendered rows,
read in a child process so the server never loads the data libraries."""

from __future__ import annotations

import json


def count_rows(path) -> int:
    text = path.read_text()
    return len(json.loads(text)) if path.suffix == ".json" else sum(1 for line in text.splitlines() if line.strip())


def test_alpaca_rows_are_rendered_through_the_models_chat_template(live_server, demo_assets):
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "rows": 2}
    response = live_server.client().post("/api/datasets/preview", json=body)
    assert response.status_code == 200, response.text
    preview = response.json()
    first = json.loads(demo_assets.alpaca.read_text().splitlines()[0])
    assert preview["format"] == "alpaca"
    assert {"instruction", "input", "output"} <= set(preview["columns"])
    assert preview["row_count"] == count_rows(demo_assets.alpaca)
    assert preview["rendered_with"] == "chat_template"
    assert len(preview["rows"]) == 2
    text = preview["rows"][0]["text"]
    # The demo template writes each turn as <|role|>\ncontent<|end|>.
    assert f"<|user|>\n{first['instruction']}" in text
    assert f"<|assistant|>\n{first['output']}<|end|>" in text
    assert [m["role"] for m in preview["rows"][0]["messages"]][-1] == "assistant"
    # The demo model names no code of its own: nothing to approve (and nothing of it was run).
    assert preview["remote_code"] == {"fingerprint": None, "files": [], "note": "the model names no code of its own"}


def test_sharegpt_without_a_model_shows_plain_turns(live_server, demo_assets):
    body = {"local_datasets": [str(demo_assets.sharegpt)], "rows": 1}
    preview = live_server.client().post("/api/datasets/preview", json=body).json()
    assert preview["format"] == "sharegpt"
    assert preview["rendered_with"] == "plain"
    assert preview["row_count"] == count_rows(demo_assets.sharegpt)
    roles = [m["role"] for m in preview["rows"][0]["messages"]]
    assert roles[0] == "system" and roles[-1] == "assistant"


def test_raw_text_is_shown_as_is(live_server, demo_assets):
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.text)], "rows": 1}
    preview = live_server.client().post("/api/datasets/preview", json=body).json()
    first = json.loads(demo_assets.text.read_text().splitlines()[0])
    assert preview["format"] == "text" and preview["rendered_with"] == "raw_text"
    assert preview["rows"][0]["text"] == first["text"]


def test_unrecognised_columns_are_a_422_listing_them(live_server):
    odd = live_server.home / "datasets" / "odd.jsonl"
    odd.parent.mkdir(exist_ok=True)
    odd.write_text("\n".join(json.dumps({"question_text": f"q{i}", "reply_text": f"a{i}"}) for i in range(5)))
    response = live_server.client().post("/api/datasets/preview", json={"local_datasets": [str(odd)]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] in ("format", "column_mapping")
    assert "question_text" in error["message"] and "reply_text" in error["message"]


def test_column_mapping_fixes_unrecognised_columns(live_server):
    odd = live_server.home / "datasets" / "mapped.jsonl"
    odd.parent.mkdir(exist_ok=True)
    odd.write_text("\n".join(json.dumps({"question_text": f"q{i}", "reply_text": f"a{i}"}) for i in range(5)))
    body = {"local_datasets": [str(odd)], "column_mapping": {"instruction": "question_text", "output": "reply_text"}}
    preview = live_server.client().post("/api/datasets/preview", json=body).json()
    assert preview["format"] == "alpaca" and preview["row_count"] == 5
    assert preview["rows"][0]["messages"][-1] == {"role": "assistant", "content": "a0"}


def test_image_data_comes_back_with_its_image_facts_and_thumbnails(live_server):
    """What the child adds for image data (image count, bad-image rows, each shown row's
    images) reaches the client through the route's response model."""
    from PIL import Image

    folder = live_server.home / "datasets" / "pictures"
    folder.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 20), (200, 10, 10)).save(folder / "red.png")
    rows = [{"image": "red.png", "text": "A red box."}, {"image": "gone.png", "text": "Nothing."}]
    (folder / "captions.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    body = {"local_datasets": [str(folder / "captions.jsonl")], "rows": 2}
    response = live_server.client().post("/api/datasets/preview", json=body)
    assert response.status_code == 200, response.text
    preview = response.json()
    assert (preview["format"], preview["image_count"], preview["bad_image_rows"], preview["image_rows_checked"]) == ("caption", 2, 1, 2)
    shown, missing = preview["rows"][0]["images"][0], preview["rows"][1]["images"][0]
    assert (shown["width"], shown["height"]) == (40, 20) and shown["thumbnail"].startswith("data:image/jpeg;base64,")
    assert missing["name"] == "gone.png" and missing["error"].startswith("cannot be read") and missing["thumbnail"] is None


def test_files_outside_the_readable_folders_are_refused(live_server, tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"text": "secret"}))
    for path in (str(outside), "../../../etc/passwd"):
        response = live_server.client().post("/api/datasets/preview", json={"local_datasets": [path]})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "local_datasets"
        assert "secret" not in response.text


def test_the_server_process_never_loads_the_data_libraries(live_server, demo_assets):
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.chatml)]}
    assert live_server.client().post("/api/datasets/preview", json=body).status_code == 200
    detail = live_server.client().get("/api/health", params={"detail": 1}).json()
    assert detail["heavy_modules"] == []


def test_long_rows_come_back_cut_short_with_a_marker(live_server):
    """One huge row must not pass through the server whole: each row's text and chat
    turns are cut with a visible marker, and the whole answer stays small."""
    huge = live_server.home / "datasets" / "huge.jsonl"
    huge.parent.mkdir(exist_ok=True)
    rows = [{"instruction": "say a lot " * 300_000, "input": "", "output": "y" * 2_000_000} for _ in range(3)]
    huge.write_text("\n".join(json.dumps(row) for row in rows))
    response = live_server.client().post("/api/datasets/preview", json={"local_datasets": [str(huge)], "rows": 3})
    assert response.status_code == 200, response.text[:500]
    assert len(response.content) < 200_000
    preview = response.json()
    assert preview["row_count"] == 3 and len(preview["rows"]) >= 1
    for row in preview["rows"]:
        assert "[truncated: " in row["text"] and len(row["text"]) < 5_000
        assert all(len(m["content"]) < 5_000 for m in row["messages"])
        assert "more characters]" in row["messages"][-1]["content"]


def test_the_server_drops_a_preview_answer_over_its_limit():
    """Even a child that ignored its caps cannot make the server hold its whole answer."""
    import asyncio

    from tunelab.server.errors import ApiError
    from tunelab.server.routes_datasets import MAX_ANSWER_BYTES, run_preview_child

    chatty = ("-c", f"import sys; sys.stdin.read(); sys.stdout.write('[' + '1,' * {MAX_ANSWER_BYTES} + '1]')")
    try:
        asyncio.run(run_preview_child({"rows": 1}, timeout=60, argv=chatty))
    except ApiError as exc:
        assert exc.status == 502 and exc.code == "preview_too_large"
    else:
        raise AssertionError("an oversize answer was accepted")


def test_image_urls_in_the_data_are_refused_unless_the_server_was_started_to_fetch_them(start_server, tmp_path):
    """`--allow-image-urls` reaches the children the server starts: without it the preview
    shows the refusal training would give (and fetches nothing); with it, the URL is left to
    the run, which downloads it."""
    row = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                    {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}]},
                        {"role": "assistant", "content": "A cat."}]}
    answers = {}
    for name, args in (("closed", []), ("open", ["--allow-image-urls"])):
        server = start_server(home=tmp_path / name, extra_args=args)
        folder = server.home / "datasets"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "urls.jsonl").write_text(json.dumps(row) + "\n")
        response = server.client().post("/api/datasets/preview", json={"local_datasets": [str(folder / "urls.jsonl")], "rows": 1})
        assert response.status_code == 200, response.text
        preview = response.json()
        assert (preview["format"], preview["image_count"], preview["bad_image_rows"]) == ("chatml", 1, 0)
        answers[name] = preview["rows"][0]["images"][0]
    assert answers["closed"]["name"] == "http://127.0.0.1:9/cat.png" and "tunelab serve --allow-image-urls" in answers["closed"]["error"]
    assert "downloaded when a run trains" in answers["open"]["error"] and "--allow-image-urls" not in answers["open"]["error"]
