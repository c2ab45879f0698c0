"""Every form of image reference a data row may hold, resolved as a run resolves it: a path
relative to the dataset folder, raw bytes, a hub `{bytes, path}` dict, a `data:` URI
(size-bounded, never a path) and an http(s) URL — refused in a served run without the
server's opt-in, and with it downloaded once from a real loopback HTTP server, within the
size cap."""

from __future__ import annotations

import base64
import io
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tunelab import paths
from tunelab.worker.data.image_sources import ImageRefused, ImageSources, decode_data_uri
from tunelab.worker.families.vision.data import check_image


def _png(colour: tuple[int, int, int] = (200, 20, 20)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (12, 8), colour).save(out, format="PNG")
    return out.getvalue()


def _data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.fixture
def data_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "a.png").write_bytes(_png())
    return folder


def _sources(data_folder: Path, cache: Path | None = None, **bounds) -> ImageSources:
    return ImageSources([data_folder], "local_datasets", cache, **bounds)


def test_a_relative_path_is_read_from_the_dataset_folder(data_folder):
    image = _sources(data_folder).resolve("images/a.png")
    assert image == {"path": str(data_folder / "images" / "a.png"), "bytes": None}
    check_image(image)


def test_raw_bytes_and_a_hub_dict_are_the_image_itself(data_folder):
    png = _png()
    sources = _sources(data_folder)
    assert sources.resolve(png) == {"path": None, "bytes": png}
    # A hub image feature read undecoded: the path is only a name, the bytes are the image.
    assert sources.resolve({"bytes": png, "path": "nowhere.png"}) == {"path": "nowhere.png", "bytes": png}
    assert sources.resolve({"bytes": None, "path": "images/a.png"})["path"] == str(data_folder / "images" / "a.png")
    check_image(sources.resolve(png))


def test_a_data_uri_is_decoded_and_never_joined_onto_the_folder(data_folder):
    png = _png()
    sources = _sources(data_folder)
    image = sources.resolve(_data_uri(png))
    assert image == {"path": None, "bytes": png}
    check_image(image)
    # Not base64: an error about the URI, never a file looked up in the data folder.
    with pytest.raises(ValueError, match="not valid base64") as bad:
        sources.resolve("data:image/png;base64,@@@not-base64@@@")
    assert str(data_folder) not in str(bad.value)
    with pytest.raises(ValueError, match="comma"):
        sources.resolve("data:image/png;base64")


def test_a_data_uri_over_the_size_cap_is_refused_before_decoding(data_folder):
    png = _png()
    with pytest.raises(ValueError, match=f"more than the {len(png) - 1} an image may have"):
        _sources(data_folder, max_bytes=len(png) - 1).resolve(_data_uri(png))
    assert decode_data_uri(_data_uri(png), len(png)) == png


def test_another_url_scheme_is_refused(data_folder):
    with pytest.raises(ImageRefused, match=r"URL scheme \(s3:\)"):
        _sources(data_folder).resolve("s3://bucket/a.png")


class _Images(BaseHTTPRequestHandler):
    """Serves /small.png, /big.png (declares its length) and /stream.png (big, no length)."""
    requests: list[str] = []
    png = b""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).requests.append(self.path)
        if self.path == "/small.png":
            body, declared = self.png, True
        elif self.path in ("/big.png", "/stream.png"):
            body, declared = self.png + b"\0" * 4096, self.path == "/big.png"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if declared:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def image_server():
    _Images.requests = []
    _Images.png = _png((10, 10, 220))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_in_a_served_run_an_http_url_is_refused_without_the_opt_in(data_folder, image_server, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CONFINE_READS_ENV, "1")
    monkeypatch.delenv(paths.IMAGE_URLS_ENV, raising=False)
    with pytest.raises(ImageRefused, match="--allow-image-urls"):
        _sources(data_folder, tmp_path / "cache").resolve(f"{image_server}/small.png")
    assert _Images.requests == []  # nothing was fetched


def test_with_the_opt_in_a_url_is_downloaded_once_into_the_cache(data_folder, image_server, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CONFINE_READS_ENV, "1")
    monkeypatch.setenv(paths.IMAGE_URLS_ENV, "1")
    sources = _sources(data_folder, tmp_path / "cache")
    first = sources.resolve(f"{image_server}/small.png")
    assert Path(first["path"]).read_bytes() == _Images.png and Path(first["path"]).parent == tmp_path / "cache"
    check_image(first)
    assert sources.resolve(f"{image_server}/small.png") == first
    assert _Images.requests == ["/small.png"]  # the second reference read the cached copy
    with pytest.raises(ValueError, match="HTTP 404"):
        sources.resolve(f"{image_server}/gone.png")


@pytest.mark.parametrize("name", ["big.png", "stream.png"])
def test_a_download_over_the_size_cap_is_refused_and_leaves_nothing(data_folder, image_server, tmp_path, monkeypatch, name):
    """Refused on the declared length, and without one while it streams in."""
    cap = len(_png((10, 10, 220))) + 100
    sources = _sources(data_folder, tmp_path / "cache", max_bytes=cap)
    with pytest.raises(ValueError, match=f"more than the {cap}"):
        sources.resolve(f"{image_server}/{name}")
    assert not any((tmp_path / "cache").iterdir())


def test_a_run_from_the_cli_fetches_urls(data_folder, image_server, tmp_path, monkeypatch):
    """Only a served run needs the opt-in: the machine's own user may fetch what it likes."""
    monkeypatch.delenv(paths.CONFINE_READS_ENV, raising=False)
    monkeypatch.delenv(paths.IMAGE_URLS_ENV, raising=False)
    image = _sources(data_folder, tmp_path / "cache").resolve(f"{image_server}/small.png")
    assert Path(image["path"]).read_bytes() == _Images.png
