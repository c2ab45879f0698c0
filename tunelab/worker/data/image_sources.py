"""Image references in every form users bring, resolved to `{path, bytes}` for one run.

  a path         relative ones against the dataset file's folder (the first of the run's
                 data folders that holds them); a `file:` URL as the path it names. In a run a
                 server started (`paths.reads_confined`) it must lie in the data roots.
  bytes          the image file's bytes (a binary column)
  {bytes, path}  a hub image feature read without decoding: with bytes, the bytes are the
                 image (the path is only its name)
  data: URI      `data:image/jpeg;base64,...`, as OpenAI's `image_url` parts carry images:
                 decoded here, at most `max_bytes`; never read as a path
  http(s) URL    downloaded once into the run's image cache (`paths.run_images_cache`), at
                 most `max_bytes` within `timeout_s`; only where `paths.image_urls_allowed()`
                 (a served run needs `tunelab serve --allow-image-urls`: a server fetching the
                 URLs its clients name is a request-forgery path into its network)
Any other URL scheme (s3://, ftp://, ...) is refused. `ImageRefused` and
`paths.PathNotAllowed` are refusals, which `skip_bad_images` never turns into skips; every
other failure (missing, too large, unreachable) is bad data. Torch-free.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from tunelab import paths

# Largest image one reference may carry (decoded data: URI or download): far above any
# photo a vision model takes, small enough that a hostile row cannot fill the memory or disk.
MAX_IMAGE_BYTES = 20 * 1024 * 1024
# How long one download may take, start to last byte.
URL_TIMEOUT_S = 30.0
URL_SCHEMES = ("http", "https")
READ_CHUNK = 64 * 1024
# A URL's scheme: "data:" and "file:" as they are, any other only before "//" ("https://",
# "s3://"), so a file named "img:1.png" or a "C:" drive letter stays a path.
_SCHEME = re.compile(r"^(data|file):|^([A-Za-z][A-Za-z0-9+.-]+)://", re.IGNORECASE)
SHOWN_CHARS = 120


class ImageRefused(ValueError):
    """An image reference this run may not follow: a refusal, not bad data."""


def scheme_of(value: str) -> str | None:
    """The URL scheme a string reference starts with (lower case), or None for a plain path."""
    match = _SCHEME.match(value)
    return (match.group(1) or match.group(2)).lower() if match else None


def is_url(ref: Any) -> bool:
    return isinstance(ref, str) and scheme_of(ref) in URL_SCHEMES


def describe(ref: Any) -> str:
    """A reference as a message names it: a path or URL as written (cut short), a data: URI
    by its media type and length, embedded bytes as such."""
    if isinstance(ref, dict):
        ref = ref.get("path") or (b"" if ref.get("bytes") else ref.get("url"))
    if isinstance(ref, (bytes, bytearray)):
        return f"(embedded image, {len(ref)} bytes)" if ref else "(embedded image)"
    if isinstance(ref, str):
        if scheme_of(ref) == "data":
            return f"data:{ref[5:].split(',', 1)[0][:40]},… ({len(ref)} characters)"
        return ref if len(ref) <= SHOWN_CHARS else ref[:SHOWN_CHARS] + "…"
    return repr(ref)[:SHOWN_CHARS]


def decode_data_uri(uri: str, max_bytes: int = MAX_IMAGE_BYTES) -> bytes:
    """The bytes a `data:` URI carries (base64 or percent-encoded), refused above `max_bytes`
    before decoding."""
    header, comma, payload = uri.partition(",")
    if not comma:
        raise ValueError("a data: URI needs a comma between its media type and its data (data:image/png;base64,...)")
    if header.lower().endswith(";base64"):
        payload = "".join(payload.split())  # line breaks inside long base64 are common
        if len(payload) // 4 * 3 > max_bytes:
            raise ValueError(f"its data: URI holds about {len(payload) // 4 * 3} bytes, more than the {max_bytes} an image may have")
        try:
            data = base64.b64decode(payload + "=" * (-len(payload) % 4), validate=True)
        except binascii.Error as exc:
            raise ValueError(f"its data: URI is not valid base64 ({exc})") from None
    else:
        data = unquote_to_bytes(payload)
    if len(data) > max_bytes:
        raise ValueError(f"its data: URI holds {len(data)} bytes, more than the {max_bytes} an image may have")
    return data


def image_reference(ref: Any, folders: list[Path]) -> dict[str, Any]:
    """`{path, bytes}` for a path, bytes or `{bytes, path}` reference, relative paths resolved
    against `folders` (the audio paths read clips the same way). A URL is never a path here."""
    if isinstance(ref, (bytes, bytearray, memoryview)):
        if not ref:
            raise ValueError("the embedded image is empty (no bytes)")
        return {"path": None, "bytes": bytes(ref)}
    if isinstance(ref, dict):
        data, path = ref.get("bytes"), ref.get("path")
        if data:
            return {"path": path, "bytes": bytes(data)}
        ref = path
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"{ref!r} is neither a file path nor image bytes")
    local = paths.file_url_path(ref)
    if local is None and scheme_of(ref) is not None:
        raise ValueError(f"{describe(ref)} is a URL, not a file path; a data: URI or an http(s) URL is read only as an image part's url")
    path = Path(local or ref).expanduser()
    if not path.is_absolute():
        path = next((folder / path for folder in folders if (folder / path).exists()), (folders[0] / path) if folders else path)
    return {"path": str(path), "bytes": None}


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to another http(s) URL (urllib would also follow one to ftp)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        if scheme_of(newurl) not in URL_SCHEMES:
            raise urllib.error.HTTPError(newurl, code, f"redirected to a non-http(s) URL {describe(newurl)}", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def download(url: str, target: Path, max_bytes: int = MAX_IMAGE_BYTES, timeout_s: float = URL_TIMEOUT_S) -> Path:
    """`url` saved at `target` (written whole or not at all), at most `max_bytes` within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    request = urllib.request.Request(url, headers={"User-Agent": "tunelab"})
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    try:
        with opener.open(request, timeout=timeout_s) as answer:
            declared = answer.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise ValueError(f"the server says it is {declared} bytes, more than the {max_bytes} an image may have")
            received = 0
            with open(partial, "wb") as out:
                while chunk := answer.read(READ_CHUNK):
                    received += len(chunk)
                    if received > max_bytes:
                        raise ValueError(f"it is more than the {max_bytes} bytes an image may have")
                    if time.monotonic() > deadline:
                        raise ValueError(f"the download took longer than {timeout_s:g} s")
                    out.write(chunk)
        os.replace(partial, target)
    except urllib.error.HTTPError as exc:
        raise ValueError(f"the download failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ValueError(f"the download failed: {getattr(exc, 'reason', exc)}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target


class ImageSources:
    """One run's (or one preview's) way from an image reference to `{path, bytes}`: its data
    folders for relative paths, its cache for downloads (None: URLs are not fetched), the
    size and time bounds, and whether paths must lie in the data roots (`confined`, on
    `field`; by default where a server started this process)."""

    def __init__(self, folders: list[Path], field: str, cache: Path | None, *, max_bytes: int = MAX_IMAGE_BYTES,
                 timeout_s: float = URL_TIMEOUT_S, confined: bool | None = None):
        self.folders = folders
        self.field = field
        self.cache = cache
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.confined = paths.reads_confined() if confined is None else confined

    def resolve(self, ref: Any) -> dict[str, Any]:
        """`{path, bytes}` for `ref`; ImageRefused / PathNotAllowed for a reference this run may
        not follow, ValueError (or OSError) for one that holds no usable image."""
        scheme = scheme_of(ref) if isinstance(ref, str) else None
        if scheme == "data":
            return {"path": None, "bytes": decode_data_uri(ref, self.max_bytes)}
        if scheme in URL_SCHEMES:
            return {"path": str(self._fetched(ref)), "bytes": None}
        if scheme is not None and scheme != "file":
            raise ImageRefused(f"{describe(ref)} has a URL scheme ({scheme}:) tunelab does not read images from; "
                               "give a path, a data: URI or an http(s) URL")
        image = image_reference(ref, self.folders)
        if self.confined and not image["bytes"]:
            paths.check_readable(image["path"], self.field)
        return image

    def _fetched(self, url: str) -> Path:
        if not paths.image_urls_allowed():
            raise ImageRefused(f"{describe(url)} is an http(s) URL, and this server does not fetch URLs named in data "
                               "(that would let a client make it request any address on its network); start it with "
                               "`tunelab serve --allow-image-urls`, or embed the images as data: URIs or files in the data folder")
        if self.cache is None:
            raise ImageRefused(f"{describe(url)} is an http(s) URL; it is downloaded when a run trains, not here")
        target = self.cache / hashlib.sha256(url.encode()).hexdigest()[:40]
        if target.is_file():  # downloaded once: a resumed or repeated reference reads the copy
            return target
        return download(url, target, self.max_bytes, self.timeout_s)
